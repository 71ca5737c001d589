"""Jobs from an openb pod list with creation/deletion/scheduled times."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.traces import read_pod_jobs

HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
HEADER += "creation_time,deletion_time,scheduled_time\n"


def test_pods_become_jobs_with_arrival_duration_tenant_and_priority(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    path.write_text(
        HEADER
        + "p0,1000,100,1,460,,LS,Running,10,110,30\n"  # shared GPU -> 1 whole GPU
        + "p1,1000,100,0,0,,BE,Running,0,50,0\n"  # no GPU: left out
        + "p2,1000,100,8,1000,,BE,Pending,20,520,\n"  # never scheduled: from creation
        + "p3,1000,100,2,1000,,BE,Failed,40,40,40\n"  # zero length: 1 s
    )
    jobs = read_pod_jobs(path)
    assert [(j.id, j.tenant, j.submit_s, j.gpus, j.duration_s, j.priority) for j in jobs] == [
        ("p0", "LS", 10.0, 1, 80.0, 1),
        ("p2", "BE", 20.0, 8, 500.0, 0),
        ("p3", "BE", 40.0, 2, 1.0, 0),
    ]
    assert all(j.tasks == 1 and j.time_limit_s is None for j in jobs)


def test_a_pod_list_without_times_or_with_a_bad_row_is_refused(tmp_path: Path) -> None:
    plain = tmp_path / "plain.csv"
    plain.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1,1,1,1000\n")
    with pytest.raises(
        ValueError, match=re.escape("plain.csv: no creation_time, deletion_time column")
    ):
        read_pod_jobs(plain)
    bad = tmp_path / "bad.csv"
    bad.write_text(HEADER + "p0,1000,100,1,1000,,LS,Running,soon,110,30\n")
    with pytest.raises(ValueError, match=re.escape("bad.csv:2: bad or missing 'creation_time'")):
        read_pod_jobs(bad)
