"""No cgroup directory outlives the server (real cgroup v1, as root): a stopped server leaves
neither its jobs' groups nor its own `gpu-platform/<instance>` groups, and a start after a
crash removes what the crashed run left, prefix groups included."""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx

from gpu_platform.adapters.outbound.cgroups import CgroupV1Isolation
from gpu_platform.adapters.outbound.cgroups.v1 import CONTROLLERS
from gpu_platform.ports.outbound.isolation import IsolationSpec
from gpu_platform.testing.system import require
from tests.integration.conftest import Server, wait_for

ROOT = Path("/sys/fs/cgroup")


def _require_v1() -> None:
    for c in CONTROLLERS:
        ok = (ROOT / c).is_dir() and os.access(ROOT / c, os.W_OK) and os.geteuid() == 0
        require(ok, f"cgroup v1 '{c}' hierarchy not writable (needs root)")


def _groups(prefix: str) -> list[Path]:
    return [ROOT / c / prefix for c in CONTROLLERS if (ROOT / c / prefix).exists()]


def test_a_stopped_server_leaves_no_cgroup_directory_behind(
    server_factory: Callable[..., Server], tmp_path: Path
) -> None:
    _require_v1()
    data = tmp_path / "data"
    data.mkdir()
    instance = hashlib.sha256(str(data.resolve()).encode()).hexdigest()[:12]
    server = server_factory(data, GPU_PLATFORM_ISOLATION="cgroup-v1")
    r = httpx.post(f"{server.url}/v1/jobs", json={"command": ["sleep", "60"], "gpus": 1})
    assert r.status_code == 201, r.text
    job = r.json()["id"]
    server.wait_job(job, lambda j: j["state"] == "RUNNING")
    prefix = f"gpu-platform/{instance}"
    assert wait_for(lambda: bool(_groups(prefix)))  # the job runs confined
    server.stop()
    assert _groups(prefix) == []  # neither the job's group nor the server's own


def test_a_start_after_a_crash_removes_the_groups_and_prefix_it_left() -> None:
    _require_v1()
    top = f"gpu-platform-test-{uuid.uuid4().hex[:8]}"
    prefix = f"{top}/instance"
    crashed = CgroupV1Isolation(ROOT, prefix=prefix)
    crashed.prepare(IsolationSpec(name="j-left-1"))  # never released: the server died
    assert len(_groups(f"{prefix}/j-left-1")) == len(crashed.controllers)
    again = CgroupV1Isolation(ROOT, prefix=prefix)
    assert again.sweep() == ["j-left-1"]
    assert _groups(prefix) == [] and _groups(top) == []
    again.prepare(IsolationSpec(name="j-new"))  # the prefix is made again on use
    again.sweep()
    assert _groups(top) == []
