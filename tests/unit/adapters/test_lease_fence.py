"""The lease fencer stops a node's tasks once the agent's lease has ended — by itself, so a
stopped (SIGSTOP) or cut-off agent cannot leave them running — and never before."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.process.fence import ProcessLeaseFence

IGNORE_TERM = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def until(cond: object, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


@pytest.fixture
def fence(tmp_path: Path) -> Iterator[ProcessLeaseFence]:
    fence = ProcessLeaseFence(tmp_path / "fence", grace_s=0.5)
    yield fence
    fence.close()


@pytest.fixture
def task() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
    )
    yield proc
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_a_task_lives_while_the_lease_is_renewed_and_is_never_fenced_before_a_lease(
    fence: ProcessLeaseFence, task: subprocess.Popen[bytes]
) -> None:
    fence.register(task.pid)
    time.sleep(0.3)  # no lease granted yet: nothing to fence
    assert task.poll() is None
    for _ in range(10):
        fence.renew(time.monotonic() + 0.3)
        time.sleep(0.1)
    assert task.poll() is None
    task.kill()
    task.wait()
    assert fence.unregister(task.pid) is False


def test_an_ended_lease_stops_the_task_and_marks_it_fenced(
    fence: ProcessLeaseFence, task: subprocess.Popen[bytes]
) -> None:
    fence.register(task.pid)
    ended = time.monotonic() + 0.2
    fence.renew(ended)
    task.wait(timeout=10)
    assert time.monotonic() >= ended
    assert task.returncode == -signal.SIGTERM
    assert fence.unregister(task.pid) is True


def test_a_task_that_ignores_sigterm_gets_sigkill_after_the_grace(
    fence: ProcessLeaseFence,
) -> None:
    proc = subprocess.Popen([sys.executable, "-c", IGNORE_TERM], start_new_session=True)
    time.sleep(0.3)  # let it install the handler
    fence.register(proc.pid)
    fence.renew(time.monotonic())
    assert proc.wait(timeout=10) == -signal.SIGKILL
    assert fence.unregister(proc.pid) is True


AGENT = textwrap.dedent(
    """
    import subprocess, sys, time
    from gpu_platform.adapters.outbound.process.fence import ProcessLeaseFence
    fence = ProcessLeaseFence(sys.argv[1], grace_s=0.5)
    task = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                            start_new_session=True)
    fence.register(task.pid)
    print(task.pid, flush=True)
    while True:  # an agent hearing its leader: every ack renews the lease
        fence.renew(time.monotonic() + 0.5)
        time.sleep(0.05)
    """
)


def test_a_stopped_agent_cannot_keep_its_tasks_running(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    agent = subprocess.Popen(
        [sys.executable, "-c", AGENT, str(tmp_path / "fence")], stdout=subprocess.PIPE, env=env
    )
    try:
        assert agent.stdout is not None
        pid = int(agent.stdout.readline())
        time.sleep(1.0)
        assert alive(pid), "a renewed lease must keep the task running"
        os.kill(agent.pid, signal.SIGSTOP)
        assert until(lambda: not alive(pid)), "the task outlived its agent's lease"
        marks = list((tmp_path / "fence" / "fenced").iterdir())
        assert [m.name.split("-")[0] for m in marks] == [str(pid)]
    finally:
        os.kill(agent.pid, signal.SIGKILL)
        agent.wait()


def test_a_task_names_itself_in_the_fence_so_a_launch_the_agent_never_finished_is_stopped(
    fence: ProcessLeaseFence,
) -> None:
    """The shim's `--fence`: the task is under the lease before it runs, although the runner
    (a frozen agent) never called `register` for it."""
    from gpu_platform.adapters.outbound.process.accounts import SHIM

    fence.renew(time.monotonic() + 0.5)
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", SHIM, str(os.getpid()), "--fence", str(fence.tasks),
         "--", "sleep", "600"],
        start_new_session=True,
    )  # fmt: skip
    try:
        assert until(lambda: any(fence.tasks.iterdir()))
        (name,) = (p.name for p in fence.tasks.iterdir())
        assert name.startswith(f"{proc.pid}-")
        proc.wait(timeout=10)  # the lease ran out: the fencer stopped it
        assert proc.returncode == -signal.SIGTERM
        assert (fence.root / "fenced" / name).exists()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_task_that_cannot_start_leaves_no_name_in_the_fence(fence: ProcessLeaseFence) -> None:
    from gpu_platform.adapters.outbound.process.accounts import SHIM

    done = subprocess.run(
        [sys.executable, "-I", "-S", SHIM, str(os.getpid()), "--fence", str(fence.tasks),
         "--", "/nonexistent/program"],
        capture_output=True, text=True, check=False, timeout=30,
    )  # fmt: skip
    assert done.returncode == 127, done.stderr
    assert list(fence.tasks.iterdir()) == []
