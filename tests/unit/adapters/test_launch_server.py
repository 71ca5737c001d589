"""The process runner's launch server: tasks forked from it are what the standalone shim made
(same process state, same environment), die with it and with the runner, and a dead launch
server is restarted once per launch, loudly, or the launch fails."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.cgroups.noop import NoopIsolation
from gpu_platform.adapters.outbound.process import ProcessJobRunner
from gpu_platform.adapters.outbound.process.launch_server import LaunchServer
from gpu_platform.ports.outbound.isolation import IsolationSpec
from gpu_platform.ports.outbound.job_runner import ExitReport, LaunchError, LaunchSpec
from gpu_platform.testing.cluster_procs import wait_until
from gpu_platform.testing.shim_launch import popen_shim

SRC = str(Path(__file__).resolve().parents[3] / "src")
PATH = os.environ["PATH"]
#: /proc/self/status lines that differ between any two processes (ids, memory, counters);
#: FDSize is the descriptor table's capacity, not what is open.
VOLATILE = re.compile(r"^(Pid|PPid|Tgid|NStgid|NSpid|NSpgid|NSsid|Vm\w+|Rss\w+|SigQ|FDSize|"
                      r"\w*voluntary_ctxt_switches):")  # fmt: skip


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def spec(job_id: str, argv: tuple[str, ...], **kw: object) -> LaunchSpec:
    return LaunchSpec(job_id, 1, 1, argv, (), (), (), **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def server() -> Iterator[LaunchServer]:
    s = LaunchServer(dict(os.environ))
    yield s
    s.close()


def seen(output: bytes, probe: str) -> list[str]:
    """What a probe printed, less what differs between any two processes."""
    lines = output.decode().splitlines()
    if probe == "proc":  # status and limits as they are; of stat, the session and scheduling
        pid, _, rest = lines[-1].partition(" (")
        f = rest.rsplit(") ", 1)[1].split()  # f[0] is field 3 (state)
        fields = [f[2] == pid, f[3] == pid, *(f[i] for i in (4, 5, 15, 16, 17, 37, 38))]
        return [*(line for line in lines[:-1] if not VOLATILE.match(line)), str(fields)]
    if probe == "fds":  # mode and what each descriptor is, not the pipe's inode or the pid
        return [re.sub(r"\d+\]|/proc/\d+", "", " ".join(line.split()[i] for i in (0, 8, 10)))
                for line in lines[1:]]  # fmt: skip
    return lines


PROBES = {
    "proc": ["cat", "/proc/self/status", "/proc/self/limits", "/proc/self/stat"],
    "fds": ["ls", "-l", "/proc/self/fd"],
    "env": ["env"],
}


@pytest.mark.parametrize(
    "env",
    [
        {"PATH": PATH, "X": "1"},
        {"PATH": PATH, "LANG": "xx_XX.UTF-8"},
        {"PATH": PATH, "LC_ALL": "C"},
    ],
    ids=["no-locale", "missing-locale", "lc-all"],
)
def test_a_task_of_the_launch_server_sees_what_the_standalone_shim_gave_it(
    server: LaunchServer, env: dict[str, str]
) -> None:
    options: list[list[str]] = [[]]
    if os.geteuid() == 0:
        options.append(["--pidns", "--user", "65534:65534"])
    for opts in options:
        for probe, argv in PROBES.items():
            task = server.spawn(opts, argv, env, "/tmp")
            assert task.stdout is not None
            new, new_code = task.stdout.read(), task.wait()
            old = popen_shim(opts, argv, env, "/tmp")
            assert old.stdout is not None
            before, old_code = old.stdout.read(), old.wait()
            assert (new_code, seen(new, probe)) == (old_code, seen(before, probe)), (opts, probe)


def test_a_request_larger_than_a_packet_reaches_the_task_whole(server: LaunchServer) -> None:
    big = "x" * 100_000
    args = ["sh", "-c", 'echo "${#BIG}" "$#"', "sh", *(["arg"] * 5000)]
    task = server.spawn([], args, {"PATH": PATH, "BIG": big}, "/")
    assert task.stdout is not None
    assert task.stdout.read() == b"100000 5000\n" and task.wait() == 0


def test_what_popen_refuses_the_launch_server_refuses_with_the_same_words(
    server: LaunchServer,
) -> None:
    with pytest.raises(ValueError, match="illegal environment variable name"):
        server.spawn([], ["true"], {"A=B": "1"}, "/")
    with pytest.raises(ValueError, match="embedded null byte"):
        server.spawn([], ["echo", "a\0b"], {"PATH": PATH}, "/")


def test_a_task_is_reported_as_popen_reports_it_exit_code_or_signal(server: LaunchServer) -> None:
    task = server.spawn([], ["sh", "-c", "exit 3"], {"PATH": PATH}, "/")
    assert task.wait() == 3 and task.poll() == 3 and task.returncode == 3
    task = server.spawn([], ["sh", "-c", "kill -TERM $$"], {"PATH": PATH}, "/")
    assert task.wait() == -signal.SIGTERM
    task = server.spawn([], ["sleep", "600"], {"PATH": PATH}, "/")
    assert task.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        task.wait(timeout=0.01)
    task.kill()
    assert task.wait() == -signal.SIGKILL


def test_a_stop_signal_to_the_launch_server_leaves_it_and_its_tasks_running(
    server: LaunchServer,
) -> None:
    # systemd stops a service by signalling its whole cgroup; the agent stops its tasks itself
    task = server.spawn([], ["sleep", "600"], {"PATH": PATH}, "/")
    pid, starts = server.pid, server.starts
    assert pid is not None
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        os.kill(pid, sig)
    assert server.spawn([], ["true"], {"PATH": PATH}, "/").wait() == 0  # served after them
    assert (server.pid, server.starts, task.poll()) == (pid, starts, None)
    task.kill()
    assert task.wait() == -signal.SIGKILL


class HeldIsolation(NoopIsolation):
    """No confinement, but `prepare` waits for `go`: holds a launch half done."""

    def __init__(self) -> None:
        self.entered, self.go = threading.Event(), threading.Event()

    def prepare(self, spec: IsolationSpec) -> tuple[str, ...]:
        self.entered.set()
        self.go.wait(30)
        return ()


def test_a_stop_that_comes_while_the_task_is_launched_stops_it_once_it_runs(
    tmp_path: Path,
) -> None:
    # the agent runs a stop beside a launch; before its exec a task has no attempt marker,
    # so `reap` cannot find it: the stop must wait for the launch, not be lost
    held = HeldIsolation()
    runner = ProcessJobRunner(tmp_path / "jobs", base_env={"PATH": PATH}, isolation=held)
    try:
        reports: list[ExitReport] = []
        launch = threading.Thread(
            target=runner.start, args=(spec("j-s", ("sleep", "600")), reports.append)
        )
        launch.start()
        assert held.entered.wait(30)
        assert runner.stop("j-s", 1, grace_s=600) is True  # a report will follow
        assert runner.stop("j-other", 1, grace_s=600) is False
        held.go.set()
        launch.join(30)
        assert wait_until(lambda: bool(reports), timeout=10, step=0.02)
        assert reports[0].signal == signal.SIGTERM
    finally:
        held.go.set()
        runner.close(grace_s=1)


def test_killing_the_launch_server_kills_its_tasks_and_the_next_launch_starts_another(
    tmp_path: Path,
) -> None:
    runner = ProcessJobRunner(tmp_path / "jobs", base_env={"PATH": PATH})
    try:
        reports: list[ExitReport] = []
        runner.start(spec("j-a", ("sleep", "600")), reports.append)
        first = runner.launch_server.pid
        assert first is not None and runner.launch_server.starts == 1
        [job] = [p for p in runner._live.values()]
        os.kill(first, signal.SIGKILL)
        assert wait_until(lambda: bool(reports), timeout=10, step=0.02)
        assert reports[0].signal == signal.SIGKILL and not alive(job.proc.pid)
        done: list[ExitReport] = []
        runner.start(spec("j-b", ("true",)), done.append)
        assert wait_until(lambda: bool(done), timeout=10, step=0.02) and done[0].exit_code == 0
        assert runner.launch_server.starts == 2 and runner.launch_server.pid not in (None, first)
    finally:
        runner.close(grace_s=1)


def test_a_launch_server_that_cannot_start_fails_each_launch_after_one_try() -> None:
    broken = LaunchServer(dict(os.environ), argv=[sys.executable, "-c", "raise SystemExit(3)"])
    try:
        for tries in (1, 2):
            with pytest.raises(LaunchError, match=r"did not start \(exit status 3\)"):
                broken.spawn([], ["true"], {"PATH": PATH}, "/")
            assert broken.starts == tries  # one start per launch, never a fallback
    finally:
        broken.close()


# Answers "ready", then dies on the first request it reads.
DIES_ON_REQUEST = """
import marshal, os, socket, sys
s = socket.socket(fileno=int(sys.argv[-1]))
s.send(marshal.dumps(("ready", os.getpid())))
s.recv(65536)
raise SystemExit(5)
"""


def test_a_launch_server_that_dies_with_the_request_fails_that_launch_without_retrying() -> None:
    dying = LaunchServer(dict(os.environ), argv=[sys.executable, "-c", DIES_ON_REQUEST])
    try:
        with pytest.raises(LaunchError, match=r"died while starting the task \(exit status 5\)"):
            dying.spawn([], ["true"], {"PATH": PATH}, "/")
        assert dying.starts == 1
    finally:
        dying.close()


def test_closing_the_runner_leaves_neither_tasks_nor_the_launch_server(tmp_path: Path) -> None:
    runner = ProcessJobRunner(tmp_path / "jobs", base_env={"PATH": PATH})
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    runner.start(spec("j-c", (sys.executable, "-c", code)), lambda r: None)
    server, [task] = runner.launch_server.pid, [a.proc.pid for a in runner._live.values()]
    assert server is not None and alive(task)
    runner.close(grace_s=0.2)
    assert not alive(task) and not Path(f"/proc/{server}").exists()  # dead and reaped
    assert runner.launch_server.pid is None


RUNNER = """
import sys, time
sys.path.insert(0, {src!r})
from gpu_platform.adapters.outbound.process import ProcessJobRunner
from gpu_platform.ports.outbound.job_runner import LaunchSpec
r = ProcessJobRunner({root!r}, pid_namespace={pidns})
r.start(LaunchSpec({job!r}, 1, 1, ('sleep', '600'), (), (), ()), lambda rep: None)
[attempt] = r._live.values()
print('started', r.launch_server.pid, attempt.proc.pid, flush=True)
time.sleep(600)
"""


def test_a_sigkilled_runner_takes_its_launch_server_and_every_task_with_it(tmp_path: Path) -> None:
    # as root the task is in its own PID namespace: outside shim -> init -> job, all of it goes
    # (test_process_runner.py has the host namespace's chain)
    pidns = os.geteuid() == 0
    script = RUNNER.format(src=SRC, root=str(tmp_path), pidns=pidns, job=f"j-k{int(pidns)}")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        for line in parent.stdout:  # structlog's output may come first
            if line.startswith("started"):
                server, task = (int(x) for x in line.split()[1:])
                break
        assert alive(server) and alive(task)
    finally:
        parent.kill()
        parent.wait()
    assert wait_until(lambda: not alive(server) and not alive(task), timeout=10, step=0.02)
