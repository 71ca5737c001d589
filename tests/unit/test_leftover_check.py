"""The session-end check of tests/conftest.py finds what a test leaves behind (issue 19 item 6)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import (
    CGROUP_ROOT,
    SESSION_MARKER,
    instance_groups,
    instance_of,
    marked_processes,
    session_instances,
)


def test_a_detached_process_started_by_a_test_is_found_by_its_session_marker() -> None:
    marker = os.environ[SESSION_MARKER]
    proc = subprocess.Popen(["sleep", "600"], start_new_session=True)  # left its session
    try:
        assert proc.pid in marked_processes(marker, exclude=os.getpid())
        assert "sleep 600" in marked_processes(marker, exclude=os.getpid())[proc.pid]
    finally:
        proc.kill()
        proc.wait()
    assert proc.pid not in marked_processes(marker, exclude=os.getpid())


def test_job_cgroups_are_attributed_to_the_data_directories_of_this_session(
    tmp_path: Path,
) -> None:
    data = tmp_path / "a" / "data"
    data.mkdir(parents=True)
    assert instance_of(data) in session_instances(tmp_path)


def test_an_instance_group_left_by_a_killed_server_is_found_with_its_data_directory(
    tmp_path: Path,
) -> None:
    top = CGROUP_ROOT / "pids" / "gpu-platform"
    if not os.access(CGROUP_ROOT / "pids", os.W_OK):
        pytest.skip("needs a writable cgroup v1 pids hierarchy (root)")
    data = tmp_path / "b" / "data"
    data.mkdir(parents=True)
    made_top = not top.exists()
    top.mkdir(exist_ok=True)
    group = top / instance_of(data)
    group.mkdir()
    try:
        assert instance_groups(session_instances(tmp_path))[group] == data
    finally:
        group.rmdir()
        if made_top:
            top.rmdir()
    assert group not in instance_groups(session_instances(tmp_path))
