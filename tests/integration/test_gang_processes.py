"""Gangs as real processes: every task gets torchrun's variables and they really rendezvous on
MASTER_ADDR:MASTER_PORT; a failing task takes the whole gang down and leaves no process."""

from __future__ import annotations

import os
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.process import ProcessJobRunner
from gpu_platform.adapters.outbound.sim import default_node
from gpu_platform.adapters.outbound.system import SystemClock
from gpu_platform.application.control_plane import ControlPlane
from gpu_platform.domain.model.job import Job, JobSpec, JobState
from gpu_platform.domain.model.node import Inventory
from gpu_platform.testing.fakes import InMemoryJobStore, RecordingPublisher, SequentialJobIds

# Rank 0 listens on MASTER_PORT; every other rank connects and sends its variables; rank 0
# prints what it received, sorted by rank. A wrong RANK, WORLD_SIZE or port hangs or fails.
RENDEZVOUS = textwrap.dedent(
    """
    import os, socket, time
    e = os.environ
    rank, world = int(e["RANK"]), int(e["WORLD_SIZE"])
    me = f"rank={rank} local={e['LOCAL_RANK']}/{e['LOCAL_WORLD_SIZE']} node={e['NODE_RANK']} gpus={e['CUDA_VISIBLE_DEVICES']}"
    addr = (e["MASTER_ADDR"], int(e["MASTER_PORT"]))
    if rank == 0:
        srv = socket.create_server(addr)
        got = [me]
        for _ in range(world - 1):
            conn, _ = srv.accept()
            got.append(conn.makefile().readline().strip())
        print("\\n".join(sorted(got)), flush=True)
    else:
        for _ in range(200):
            try:
                s = socket.create_connection(addr)
                break
            except OSError:
                time.sleep(0.05)
        s.sendall((me + "\\n").encode())
    """
)


def wait_for(cond: Callable[[], bool], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not cond():
        time.sleep(0.05)
    return cond()


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[ControlPlane]:
    nodes = (default_node("node-a"), default_node("node-b"))
    runner = ProcessJobRunner(tmp_path / "jobs", base_env={"PATH": os.environ["PATH"]})
    cp = ControlPlane(
        Inventory(nodes, source="sim", simulated=True),
        InMemoryJobStore(),
        runner,
        SystemClock(),
        SequentialJobIds(),
        RecordingPublisher(),
        stop_grace_s=1.0,
        schedule_interval_s=0.05,
    )
    cp.start()
    yield cp
    cp.shutdown()
    runner.close(grace_s=1)


def ended(cp: ControlPlane, job: Job) -> Callable[[], bool]:
    return lambda: cp.get(job.id).terminal and not cp.get(job.id).holds_gpus


def test_a_four_task_gang_rendezvouses_with_one_rank_each(plane: ControlPlane) -> None:
    job = plane.submit(JobSpec((sys.executable, "-c", RENDEZVOUS), gpus=4, tasks=4))
    assert wait_for(ended(plane, job))
    final = plane.get(job.id)
    assert final.state is JobState.COMPLETED, final.reason
    lines = plane.logs(job.id).splitlines()
    assert [line.split()[0] for line in lines] == [f"rank={r}" for r in range(4)]
    assert final.allocation is not None
    for rank, (line, slot) in enumerate(zip(lines, final.allocation.tasks, strict=True)):
        node = final.allocation.nodes.index(slot.node)
        local = [t.node for t in final.allocation.tasks].count(slot.node)
        assert f"node={node}" in line and f"/{local}" in line
        assert line.endswith("gpus=" + ",".join(map(str, slot.gpu_indices))), (rank, line)


def test_one_failing_task_fails_the_gang_and_kills_the_others(
    plane: ControlPlane, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    code = textwrap.dedent(
        f"""
        import os, sys, time
        rank = int(os.environ["RANK"])
        open(os.path.join({str(pids)!r}, str(os.getpid())), "w").close()
        if rank == 2:
            time.sleep(0.5)
            sys.exit(3)
        time.sleep(600)
        """
    )
    job = plane.submit(JobSpec((sys.executable, "-c", code), gpus=2, tasks=3))
    assert wait_for(ended(plane, job))
    final = plane.get(job.id)
    assert final.state is JobState.FAILED
    assert final.exit_code == 3
    assert final.reason == "task 2 exited 3; the gang was stopped whole"
    started = [int(p.name) for p in pids.iterdir()]
    assert len(started) == 3
    for pid in started:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()
    assert plane.status().gpus_free == 16
