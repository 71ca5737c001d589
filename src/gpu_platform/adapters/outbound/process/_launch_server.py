"""Launch server for job processes: one per runner, forks each task with the shim preloaded.

Run as `python -I -S _launch_server.py RUNNER_PID FD` (the client: `launch_server.py`). FD is
this end of a SOCK_SEQPACKET Unix socket pair. It dies with the runner's launcher thread
(PR_SET_PDEATHSIG, as `_shim.py` does), answers ("ready", pid), then serves, single-threaded:

- ("spawn", options, argv, env, cwd) with the task's stdout pipe (SCM_RIGHTS): forks; the child
  does what `subprocess.Popen(start_new_session=True, stdin=DEVNULL, stdout=pipe,
  stderr=STDOUT, cwd=cwd, close_fds=True)` did — a new session, stdin from /dev/null, stdout and
  stderr to the pipe, no other descriptor, `cwd` — then runs `_shim.main` with this process as
  its parent (each task dies with this server, which dies with the runner) and `env`. Answers
  ("started", pid) once the job has executed (or the child has ended), as Popen returns once
  its child has executed, or ("failed", reason) when it cannot fork. The job's environment is
  `env` plus what the standalone shim's interpreter added to it (`with_coerced_locale`);
- watches each child through a pidfd and, when it has ended, sends ("exit", pid, returncode)
  (Popen's convention: -N for a signal), leaving it a zombie, so its pid (and process group) is
  not reused until the runner has seen the exit: ("reap", pid) reaps it;
- at EOF (the runner closed the socket or died) SIGKILLs what is left of its children's process
  groups and exits. It ignores SIGTERM, SIGINT and SIGHUP (a service manager's stop signal to
  the agent's whole cgroup must not kill every task at once; the agent stops them with their
  grace); each child gets the handlers back before anything else.

A request is one or more packets: the first starts with its total length (4 bytes) and carries
the pipe, the rest continue it. Standalone: stdlib only, like `_shim.py`.
"""

import _locale
import array
import contextlib
import marshal
import os
import selectors
import signal
import socket
import struct
import sys
import traceback
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _shim  # beside this file (-I leaves the script's directory off sys.path)

PACKET = 32768
LocaleError = _locale.Error  # type: ignore[attr-defined]  # (locale.Error; not in typeshed)
HEADER = struct.Struct("!I")


def returncode(pid: int) -> int:
    """The ended child's exit as Popen reports it, leaving it unreaped (WNOWAIT)."""
    info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    if info is None:
        raise RuntimeError(f"pidfd of {pid} readable but it has not ended")
    if info.si_code == os.CLD_EXITED:
        return info.si_status
    return -info.si_status


#: Stop signals and their handlers at start-up; ignored here, restored in each child.
HANDLERS = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
LOCALE_VARS = ("LC_ALL", "LC_CTYPE", "LANG", "LOCPATH")  # what setlocale(LC_CTYPE, "") reads
_coerced: dict[tuple[str | None, ...], str | None] = {}


def with_coerced_locale(env: dict[str, str]) -> dict[str, str]:
    """`env` as a job received it from the standalone shim: that interpreter coerced a C or
    POSIX LC_CTYPE (unset, or a locale this host lacks) to C.UTF-8 at its start (PEP 538)
    and exported LC_CTYPE, which the job inherited. Decided once per distinct setting."""
    if env.get("LC_ALL"):
        return env
    key = tuple(env.get(name) for name in LOCALE_VARS)
    if key not in _coerced:
        _coerced[key] = coerced_ctype(key)
    target = _coerced[key]
    return env if target is None else {**env, "LC_CTYPE": target}


def coerced_ctype(values: tuple[str | None, ...]) -> str | None:
    """The LC_CTYPE a fresh interpreter would export with these locale variables, if any;
    this process's own variables and locale are put back afterwards."""
    saved = {name: os.environ.get(name) for name in LOCALE_VARS}
    before = _locale.setlocale(_locale.LC_CTYPE)
    try:
        for name, value in zip(LOCALE_VARS, values, strict=True):
            set_variable(name, value)
        try:
            current = _locale.setlocale(_locale.LC_CTYPE, "")
        except LocaleError:
            current = "C"  # a fresh interpreter keeps the C locale then
        if current not in ("C", "POSIX"):
            return None
        for target in ("C.UTF-8", "C.utf8", "UTF-8"):  # CPython's order
            try:
                _locale.setlocale(_locale.LC_CTYPE, target)
            except LocaleError:
                continue
            return target
        return None
    finally:
        for name, value in saved.items():
            set_variable(name, value)
        _locale.setlocale(_locale.LC_CTYPE, before)


def set_variable(name: str, value: str | None) -> None:
    """Set (None: unset) a variable of this process's environment (os.environ and C's)."""
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def child(me: int, null: int, pipe: int, done: int, request: tuple[Any, ...]) -> None:
    """In the forked child: become what Popen made, then the shim. Never returns. `done`
    (close-on-exec) is closed once the job has executed, or this child has ended."""
    _, options, argv, env, cwd = request
    try:
        for sig, handler in HANDLERS.items():  # the shim starts as a fresh interpreter would
            signal.signal(sig, handler)
        os.setsid()
        os.dup2(null, 0)
        os.dup2(pipe, 1)
        os.dup2(pipe, 2)
        os.closerange(3, done)
        os.closerange(done + 1, os.sysconf("SC_OPEN_MAX"))
        try:
            os.chdir(cwd)
        except OSError as exc:
            _shim.fail(f"cannot enter {cwd!r}: {exc.strerror}")
        _shim.main([str(me), *options, "--", *argv], env, done)
    except BaseException:  # a bug here: say it in the job's log, never return to the loop
        traceback.print_exc()
        sys.stderr.flush()
    os._exit(126)


class Server:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.me = os.getpid()
        self.null = os.open(os.devnull, os.O_RDWR)  # as Popen opens it for stdin=DEVNULL
        self.selector = selectors.DefaultSelector()
        self.selector.register(sock, selectors.EVENT_READ)
        self.children: dict[int, int] = {}  # pid -> pidfd, until its exit is sent
        self.zombies: set[int] = set()  # exit sent, not reaped yet

    def send(self, message: tuple[Any, ...]) -> None:
        self.sock.send(marshal.dumps(message))

    def receive(self) -> tuple[tuple[Any, ...], int | None] | None:
        """The next request and its descriptor (None at EOF)."""
        fds = array.array("i")
        data, ancillary, _, _ = self.sock.recvmsg(
            PACKET, socket.CMSG_SPACE(fds.itemsize), socket.MSG_CMSG_CLOEXEC
        )
        if not data:
            return None
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
        (size,) = HEADER.unpack_from(data)
        body = [data[HEADER.size :]]
        got = len(body[0])
        while got < size:
            more = self.sock.recv(PACKET)
            if not more:
                return None
            body.append(more)
            got += len(more)
        return marshal.loads(b"".join(body)), (fds[0] if fds else None)

    def spawn(self, request: tuple[Any, ...], pipe: int | None) -> None:
        """Fork the task; answer once it has executed the job (or ended), as Popen returns
        once its child has executed."""
        request = (*request[:3], with_coerced_locale(request[3]), *request[4:])
        if pipe is None:
            self.send(("failed", "no output pipe came with the request"))
            return
        wait_end, done = os.pipe()
        try:
            pid = os.fork()
        except OSError as exc:
            for fd in (pipe, wait_end, done):
                os.close(fd)
            self.send(("failed", f"cannot fork: {exc.strerror}"))
            return
        if pid == 0:
            child(self.me, self.null, pipe, done, request)
        os.close(pipe)
        os.close(done)
        os.read(wait_end, 1)  # EOF: nothing is ever written
        os.close(wait_end)
        pidfd = os.pidfd_open(pid)
        self.children[pid] = pidfd
        self.selector.register(pidfd, selectors.EVENT_READ, pid)
        self.send(("started", pid))

    def ended(self, pid: int) -> None:
        pidfd = self.children.pop(pid)
        self.selector.unregister(pidfd)
        os.close(pidfd)
        self.zombies.add(pid)
        self.send(("exit", pid, returncode(pid)))

    def reap(self, pid: int) -> None:
        if pid in self.zombies:
            self.zombies.discard(pid)
            os.waitpid(pid, 0)

    def serve(self) -> None:
        self.send(("ready", self.me))
        while True:
            for key, _ in self.selector.select():
                if key.data is not None:
                    self.ended(key.data)
                    continue
                got = self.receive()
                if got is None:
                    return
                request, pipe = got
                if request[0] == "spawn":
                    self.spawn(request, pipe)
                elif request[0] == "reap":
                    self.reap(request[1])

    def kill_all(self) -> None:
        for pid in self.children:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)


def main() -> None:
    runner, fd = int(sys.argv[1]), int(sys.argv[2])
    _shim.die_with_parent(runner)
    unpinned = os.environ.get("GPU_PLATFORM_CPUS_UNPINNED")  # adapters/outbound/cpu_affinity
    if unpinned:  # the server runs on its own core (cpu_affinity): jobs get what it was given
        os.sched_setaffinity(0, {int(cpu) for cpu in unpinned.split(",")})
    _shim.libc()  # loaded here once, not in every child
    for sig in HANDLERS:  # a stop signal to the agent's whole cgroup (systemd) leaves it be:
        signal.signal(sig, signal.SIG_IGN)  # it ends with the runner, and the tasks with it
    server = Server(socket.socket(fileno=fd))
    try:
        server.serve()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the runner is gone
    finally:
        server.kill_all()


if __name__ == "__main__":
    main()
