"""`LaunchServer`: the runner's side of its launch server (`_launch_server.py`, a zygote).

Starting a Python shim per task costs ~20 ms of CPU (an interpreter and its imports); the
launch server is one small Python process per runner, started on the runner's launcher thread
at its first launch, with the shim already imported. Each task is forked from it and runs the
shim's own code (`_shim.main`), so every guarantee of the shim holds: the task dies with the
launch server (PR_SET_PDEATHSIG), which dies with the launcher thread, so a runner killed with
SIGKILL leaves no task behind.

`spawn` sends the request with the task's stdout pipe (SCM_RIGHTS) and returns a
`LaunchedProcess` — the part of `subprocess.Popen` the runner uses: `pid`, `stdout`, `wait`,
`poll`, `returncode`, `kill` (the task's process group). A task stays a zombie of the launch
server until its `wait` (or `poll`) has seen its exit, as a Popen child does.

If the launch server dies, its tasks die with it and are reported killed by SIGKILL; the next
`spawn` starts a new one (logged as an error) and, should that one not answer, fails with a
LaunchError — one restart per launch, never a silent change of mechanism. A launch whose request
may have reached a server that then died is not retried: it fails.
Thread-safe.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

import structlog

from gpu_platform.ports.outbound.job_runner import LaunchError

__all__ = ["SERVER", "LaunchServer", "LaunchedProcess"]

log = structlog.get_logger(__name__)
SERVER = str(Path(__file__).with_name("_launch_server.py"))
_PACKET = 32768  # as _launch_server.PACKET
_READY_S = 30.0


class LaunchedProcess:
    """A task forked by the launch server: Popen's `pid`, `stdout`, `returncode`, `wait`,
    `poll` (same codes: -N when killed by signal N), and `kill` of its process group."""

    def __init__(self, pid: int, link: _Link) -> None:
        self.pid = pid
        self.stdout: IO[bytes] | None = None
        self.returncode: int | None = None
        self._link = link
        self._ended = threading.Event()
        self._reaped = False

    def _exited(self, code: int) -> None:
        self.returncode = code
        self._ended.set()

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(f"task {self.pid}", timeout or 0.0)
        return self._collect()

    def poll(self) -> int | None:
        return self._collect() if self._ended.is_set() else None

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)

    def _collect(self) -> int:
        if not self._reaped:  # free the pid (and process group id) only now
            self._reaped = True
            with contextlib.suppress(OSError):  # a dead server's children went to init
                self._link.send(("reap", self.pid))
        assert self.returncode is not None
        return self.returncode


class _Link:
    """One launch server process and its socket; a reader thread dispatches its messages."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = ours
        self.tasks: dict[int, LaunchedProcess] = {}
        self.replies: queue.Queue[tuple[Any, ...] | None] = queue.Queue()
        self.dead = threading.Event()
        self._send_lock = threading.Lock()
        try:
            self.proc = subprocess.Popen(
                [*argv, str(os.getpid()), str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                env=env,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a signal to the runner's group does not reach it
            )
        except OSError as exc:
            ours.close()
            raise LaunchError(f"cannot start the launch server: {exc.strerror or exc}") from exc
        finally:
            theirs.close()
        self.reader = threading.Thread(target=self._read, name="launch-server-reader", daemon=True)
        self.reader.start()

    def ready(self) -> None:
        try:
            reply = self.replies.get(timeout=_READY_S)
        except queue.Empty:
            reply = None
        if reply is None or reply[0] != "ready":
            self.close()
            raise LaunchError(f"the launch server did not start ({self.status(5)})")

    def status(self, settle_s: float = 0.0) -> str:
        """How the server ended, waiting up to `settle_s` for it (its socket closes first)."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=settle_s)
        code = self.proc.returncode
        if code is None:
            return "still running"
        return f"killed by signal {-code}" if code < 0 else f"exit status {code}"

    def alive(self) -> bool:
        return not self.dead.is_set() and self.proc.poll() is None

    def send(self, message: tuple[Any, ...], pipe: int | None = None) -> None:
        """Send one request (the first packet carries `pipe`); OSError if the server is gone."""
        data = marshal.dumps(message)
        data = len(data).to_bytes(4, "big") + data
        fds = []
        if pipe is not None:
            fds.append((socket.SOL_SOCKET, socket.SCM_RIGHTS, pipe.to_bytes(4, sys.byteorder)))
        with self._send_lock:
            self.sock.sendmsg([data[:_PACKET]], fds)
            for at in range(_PACKET, len(data), _PACKET):
                self.sock.sendall(data[at : at + _PACKET])

    def _read(self) -> None:
        try:
            while data := self.sock.recv(_PACKET):
                message = marshal.loads(data)
                if message[0] == "exit":
                    task = self.tasks.pop(message[1], None)
                    if task is not None:
                        task._exited(message[2])
                elif message[0] == "started":
                    task = LaunchedProcess(message[1], self)
                    self.tasks[task.pid] = task  # before its exit can be read
                    self.replies.put(("started", task))
                else:
                    self.replies.put(message)
        except OSError:
            pass  # the server is gone (or closed)
        except Exception:  # a message this side cannot read: end the server, loudly
            log.exception("unreadable message from the launch server; stopping it")
            self.proc.kill()
        self.dead.set()
        for task in list(self.tasks.values()):  # killed with it by their death signal
            task._reaped = True
            task._exited(-signal.SIGKILL)
        self.tasks.clear()
        self.replies.put(None)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(timeout=5)
        self.sock.close()


class LaunchServer:
    """Forks tasks from one long-lived launch server. `spawn` must be called on the thread
    whose death should kill every task (the runner's launcher thread): the server's death
    signal follows the thread that started it. `argv`: the server's command (tests)."""

    def __init__(self, env: dict[str, str], argv: list[str] | None = None) -> None:
        self._argv = argv or [sys.executable, "-I", "-S", SERVER]
        self._env = env
        self._lock = threading.Lock()
        self._link: _Link | None = None
        self.starts = 0  # launch servers started so far

    @property
    def pid(self) -> int | None:
        """The running launch server's pid (None before the first launch or after close)."""
        link = self._link
        return link.proc.pid if link is not None and link.alive() else None

    def ready(self) -> None:
        """Start (or restart) the launch server now, on the launcher thread, so a launch that
        follows is one message: a caller that checks the lease first leaves no gap of a
        server's start-up between that check and the fork."""
        with self._lock:
            self._running()

    def spawn(
        self, options: list[str], argv: list[str], env: dict[str, str], cwd: str
    ) -> LaunchedProcess:
        """Start `_shim.main(options + ["--"] + argv)` in a new session in `cwd`, with `env`,
        stdin from /dev/null and stdout and stderr into a new pipe (the handle's `stdout`).
        LaunchError if the launch server cannot be (re)started or dies meanwhile; ValueError
        for what Popen refuses (a NUL byte, "=" in a variable's name)."""
        _check_exec_args(argv, env)
        with self._lock:
            link = self._running()
            read_end, write_end = os.pipe()
            try:
                link.send(("spawn", options, argv, env, cwd), write_end)
            except OSError as exc:
                os.close(read_end)
                raise LaunchError(f"the launch server is gone ({link.status(5)})") from exc
            finally:
                os.close(write_end)
            reply = link.replies.get()
            if reply is None:
                os.close(read_end)
                raise LaunchError(
                    f"the launch server died while starting the task ({link.status(5)})"
                )
            if reply[0] != "started":
                os.close(read_end)
                raise LaunchError(f"cannot start the task: {reply[1]}")
            task: LaunchedProcess = reply[1]
            task.stdout = os.fdopen(read_end, "rb")
            return task

    def _running(self) -> _Link:
        link = self._link
        if link is not None and link.alive():
            return link
        if link is not None:
            status = link.status()
            link.close()
            log.error(
                "the launch server died; its tasks died with it; starting another", status=status
            )
        self._link = None
        link = _Link(self._argv, self._env)
        self.starts += 1
        link.ready()
        self._link = link
        return link

    def close(self) -> None:
        """Stop the launch server; tasks still running are killed (their process groups)."""
        with self._lock:
            if self._link is not None:
                self._link.close()
                self._link = None


def _check_exec_args(argv: list[str], env: dict[str, str]) -> None:
    """Refuse what Popen refused, with its words."""
    for key, value in env.items():
        if "=" in key or not key:
            raise ValueError("illegal environment variable name")
        if "\0" in key or "\0" in value:
            raise ValueError("embedded null byte")
    if any("\0" in arg for arg in argv):
        raise ValueError("embedded null byte")
