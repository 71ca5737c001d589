"""`cpu_affinity = auto` on a real `gpu-platform serve`: every thread of the server runs on
one CPU, while its API worker and the jobs its agent starts keep every CPU it was given; in a
3-server cluster the leader's threads run on the last CPU and the followers' on others; a
server whose CPU other programs crowd moves to one with room."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from gpu_platform.adapters.outbound.cpu_affinity import parse_cpus
from gpu_platform.adapters.outbound.cpu_crowding import read_sample
from gpu_platform.testing.cluster_procs import ReplicatedCluster, wait_until
from tests.integration.conftest import Server, wait_for


def _allowed(status: Path) -> set[int]:
    for line in status.read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return parse_cpus(line.split(":", 1)[1])
    raise AssertionError(f"no Cpus_allowed_list in {status}")


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(x) for x in (task / "children").read_text().split()]
    return out


def test_auto_puts_the_server_on_one_cpu_and_leaves_its_workers_and_jobs_every_cpu(
    server_factory: Callable[..., Server],
) -> None:
    allowed = os.sched_getaffinity(0)
    server = server_factory(GPU_PLATFORM_CPU_AFFINITY="auto", GPU_PLATFORM_API_WORKERS="1")
    assert server.proc is not None
    pid = server.proc.pid
    threads = [_allowed(t / "status") for t in Path(f"/proc/{pid}/task").iterdir()]
    assert len(threads) > 5 and all(len(t) == 1 for t in threads), threads
    assert len({min(t) for t in threads}) == 1  # all on the same CPU
    workers = [
        c for c in _children(pid) if b"api_worker" in Path(f"/proc/{c}/cmdline").read_bytes()
    ]
    assert len(workers) == 1
    assert _allowed(Path(f"/proc/{workers[0]}/status")) == allowed

    r = httpx.post(
        f"{server.url}/v1/jobs",
        json={"command": ["grep", "Cpus_allowed_list", "/proc/self/status"], "gpus": 0},
        timeout=30,
    )
    assert r.status_code in (200, 201), r.text
    job = r.json()["id"]
    assert wait_for(lambda: server.get(f"/v1/jobs/{job}")["state"] == "COMPLETED", 60)
    logs = httpx.get(f"{server.url}/v1/jobs/{job}/logs", timeout=10).text
    assert parse_cpus(logs.split(":", 1)[1]) == allowed, logs


def test_a_cpu_the_server_may_not_use_is_refused_at_startup(tmp_path: Path) -> None:
    outside = max(os.sched_getaffinity(0)) + 1
    server = Server(tmp_path / "data", {"GPU_PLATFORM_CPU_AFFINITY": str(outside)})
    try:
        server.start(timeout=30)
    except AssertionError as exc:
        assert f"error: cpu_affinity: CPU {outside} is not one this process may use" in str(exc)
        assert "Traceback" not in str(exc)  # one line, not a stack
    else:
        server.stop()
        raise AssertionError("a server pinned to a CPU it may not use started")


def _cpus(pid: int) -> set[int]:
    """The CPUs any thread of `pid` may use (one set when they are all pinned alike)."""
    out: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            out |= _allowed(task / "status")
    return out


def test_in_a_cluster_the_leader_moves_to_the_last_cpu_and_back_when_it_hands_the_lead_on(
    tmp_path: Path,
) -> None:
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("needs two CPUs to tell the leader's from a follower's")
    leader_cpu = {allowed[-1]}
    c = ReplicatedCluster(tmp_path, servers=3, agents=0, env={"GPU_PLATFORM_CPU_AFFINITY": "auto"})
    try:
        for i in c.ids:
            c.start_server(i)
        lead = c.wait_leader()
        pids = {i: c.servers[i].pid for i in c.ids}

        def placed(leader: int) -> bool:
            return _cpus(pids[leader]) == leader_cpu and all(
                len(_cpus(p)) == 1 and _cpus(p) != leader_cpu
                for i, p in pids.items()
                if i != leader
            )

        assert wait_until(lambda: placed(lead), 30), {i: _cpus(p) for i, p in pids.items()}
        other = next(i for i in c.ids if i != lead)
        moved = c.cli("cluster", "transfer-leader", str(other), "--server", c.url(lead))
        assert moved.returncode == 0, moved.stderr
        assert c.wait_leader() == other
        assert wait_until(lambda: placed(other), 30), {i: _cpus(p) for i, p in pids.items()}
    finally:
        c.close()


_BUSY = "import os, sys; os.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True: pass"


def test_a_server_whose_cpu_others_crowd_moves_to_one_with_room(
    server_factory: Callable[..., Server],
) -> None:
    """Two busy loops on the server's CPU: within a few seconds every thread of the server is
    on another CPU (skipped, with the figures, when no other CPU had room meanwhile)."""
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("needs two CPUs to move between")
    server = server_factory(GPU_PLATFORM_CPU_AFFINITY="auto")
    assert server.proc is not None
    pid = server.proc.pid
    assert wait_until(lambda: _cpus(pid) == {allowed[-1]}, 30), _cpus(pid)  # it leads
    before = read_sample()
    loops = [subprocess.Popen([sys.executable, "-c", _BUSY, str(allowed[-1])]) for _ in range(2)]
    try:
        moved = wait_until(lambda: len(_cpus(pid)) == 1 and _cpus(pid) != {allowed[-1]}, 30)
        after = read_sample()
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    if not moved:
        span = {c: after.total[c] - before.total[c] for c in allowed[:-1]}
        idle = {c: 1 - (after.busy[c] - before.busy[c]) / max(span[c], 1) for c in span}
        if max(idle.values()) < 0.5:
            pytest.skip(f"no other CPU had room while the loops ran (idle shares {idle})")
        raise AssertionError(f"the server stayed on its crowded CPU; others idle {idle}")
