"""`cpu_priority` (issue 21, docs/raft.md "CPU priority"), read back from the kernel
(/proc/PID/task/TID/stat, /proc/PID/autogroup): at `high` every thread of the server runs at
nice -10, its autogroup too (each test server leads its own session); at `realtime` also the
threads that keep leadership under SCHED_RR; a server at `normal`, and a process the OS
refuses, keep normal priority.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_platform.testing.cluster_procs import ReplicatedCluster, wait_until

SCHED_OTHER, SCHED_RR = 0, 2
HIGH_NICE = -10
_RAISED = ("raft-{}", "raft-beat-{}", "raft-net-{}")  # the loop, the keeper, the transport


def _may_raise() -> bool:
    return os.geteuid() == 0 or (
        resource.getrlimit(resource.RLIMIT_RTPRIO)[0] >= 1
        and resource.getrlimit(resource.RLIMIT_NICE)[0] >= 20 - HIGH_NICE
    )


def threads(pid: int) -> dict[str, tuple[int, int, int]]:
    """Thread OS name -> (policy, real-time priority, nice), from stat(5) fields 41, 40, 19."""
    out: dict[str, tuple[int, int, int]] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        out[name if name not in out else f"{name}/{tid}"] = (
            int(fields[38]),
            int(fields[37]),
            int(fields[16]),
        )
    return out


def _autogroups() -> bool:
    path = Path("/proc/sys/kernel/sched_autogroup_enabled")
    return path.exists() and path.read_text().strip() == "1"


def autogroup_nice(pid: int) -> int:
    """The nice value of the process's autogroup ("/autogroup-N nice V")."""
    return int(Path(f"/proc/{pid}/autogroup").read_text().split()[-1])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplicatedCluster]:
    """Server 1 at cpu_priority realtime, 2 at high, 3 at normal."""
    if not _may_raise():
        pytest.skip("this user may not raise priorities (no CAP_SYS_NICE, RLIMIT_RTPRIO/NICE)")
    c = ReplicatedCluster(tmp_path_factory.mktemp("prio"), servers=3, agents=0)
    try:
        for i in c.ids:
            c.env["GPU_PLATFORM_CPU_PRIORITY"] = {1: "realtime", 2: "high"}.get(i, "normal")
            c.start_server(i)
        c.wait_leader()
        yield c
    finally:
        c.close()


def test_a_realtime_server_runs_its_raft_threads_under_sched_rr_and_the_rest_at_nice_minus_10(
    cluster: ReplicatedCluster,
) -> None:
    pid = cluster.servers[1].pid
    names = [n.format(1) for n in _RAISED]
    # the transport's thread is raised when it first delivers a message
    assert wait_until(lambda: all(n in threads(pid) for n in names), 30), threads(pid)
    seen = threads(pid)
    # a name seen twice is `name/tid`: over TCP each peer's inbound connection has its own
    # reader thread, and each one that delivers is raised as `raft-net-N`
    raised = {n: p for n, p in seen.items() if n.split("/")[0] in names}
    assert all(p[:2] == (SCHED_RR, 1) for p in raised.values()), raised
    others = {n: p for n, p in seen.items() if n not in raised}
    odd = {n: p for n, p in others.items() if p != (SCHED_OTHER, 0, HIGH_NICE)}
    assert not odd, odd
    if _autogroups():
        assert autogroup_nice(pid) == HIGH_NICE


def test_a_high_priority_server_runs_every_thread_at_nice_minus_10_and_none_real_time(
    cluster: ReplicatedCluster,
) -> None:
    pid = cluster.servers[2].pid
    seen = threads(pid)
    assert seen and all(p == (SCHED_OTHER, 0, HIGH_NICE) for p in seen.values()), seen
    if _autogroups():
        assert autogroup_nice(pid) == HIGH_NICE


def test_a_server_at_normal_priority_keeps_every_thread_as_it_was(
    cluster: ReplicatedCluster,
) -> None:
    pid = cluster.servers[3].pid
    seen = threads(pid)
    assert seen and all(p == (SCHED_OTHER, 0, 0) for p in seen.values()), seen
    if _autogroups():
        assert autogroup_nice(pid) == 0


_REFUSED = textwrap.dedent(
    """
    import logging, os, sys, threading
    from gpu_platform.adapters.outbound.cpu_priority import (
        RealtimeThreadPriority, raise_process_priority)
    if os.geteuid() == 0:
        os.setgid(65534); os.setuid(65534)  # an unprivileged user: the OS refuses
    logging.basicConfig(stream=sys.stdout, format="%(levelname)s %(message)s")
    print("process", raise_process_priority(), os.getpriority(os.PRIO_PROCESS, 0), flush=True)
    prio = RealtimeThreadPriority()
    def body(n):
        prio.raise_current(f"raft-{n}")
        print("thread", n, os.sched_getscheduler(0), flush=True)
    for n in (1, 2):
        t = threading.Thread(target=body, args=(n,)); t.start(); t.join()
    """
)


def test_a_refused_priority_is_one_warning_each_and_the_server_runs_on(tmp_path: Path) -> None:
    if os.geteuid() != 0 and _may_raise():
        pytest.skip("this user may raise priorities: nothing would be refused")
    out = subprocess.run(
        [sys.executable, "-c", _REFUSED],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        cwd="/" if os.geteuid() == 0 else tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.splitlines()
    warnings = [line for line in out if line.startswith("WARNING")]
    assert len(warnings) == 2, out  # one for the nice value, one for SCHED_RR (not per thread)
    assert all("cpu_priority high" in w and "not permitted" in w for w in warnings), warnings
    assert "process False 0" in out
    assert [line for line in out if line.startswith("thread")] == ["thread 1 0", "thread 2 0"]
