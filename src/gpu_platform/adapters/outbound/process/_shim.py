"""Exec shim for job processes: die with the control plane, then become the job.

Run as `python -I -S _shim.py PARENT_PID [--fence DIR] [--join FILE]... [--pidns]
[--user UID:GID] [--cwd DIR] -- ARGV...`. With `--fence` it first names itself in the node's
lease fence (`DIR/PID-START`, as the runner does once the launch returns), so a task whose
agent froze mid-launch is still stopped when the lease ends. It asks the kernel to SIGKILL
this process when its parent thread dies (PR_SET_PDEATHSIG), checks the parent is still the
one that launched it (closing the fork/prctl race), writes its pid into each FILE (the
attempt's cgroup.procs: the job starts confined), and then:

- with `--pidns` (root only) unshares a PID and a mount namespace and forks: this process
  stays outside and, once the namespace's init has ended, exits as the job did (same code, or
  killed by the same signal); the child is pid 1 of the namespace, mounts its own /proc (so the
  job sees no process but its own: no other job's /proc/PID/environ), forks the job and reaps
  whatever is left in the namespace. When init ends, the kernel kills everything in the
  namespace. The shim and init ignore SIGTERM, SIGINT and SIGHUP: the runner signals the whole
  process group, the job included, and the job decides;
- drops to UID:GID with no supplementary groups when asked (after joining: only root may move
  itself between cgroups), enters DIR (as that account: a directory it may not use is refused
  with "permission denied"), and execs the job.

Standalone: stdlib only, no package imports, because it runs before (and instead of) anything
else in the child. The runner's launch server (`_launch_server.py`) imports it once and calls
`main(args, env)` in each forked child; `python _shim.py ...` runs the same code on its own.
"""

import contextlib
import ctypes
import os
import resource
import signal
import struct
import sys
import warnings  # noqa: F401  os.execvp imports it lazily; after setuid the stdlib may be unreadable

PR_SET_PDEATHSIG = 1
CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 0x4000, 1 << 18
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def fail(message: str, code: int = 126) -> None:
    sys.stderr.write(f"gpu-platform: {message}\n")
    sys.stderr.flush()
    for path in REGISTERED:  # it never ran: nothing for the fence to stop
        with contextlib.suppress(OSError):
            os.unlink(path)
    os._exit(code)


_LIBC: list[ctypes.CDLL] = []  # made once (the launch server makes it before it forks)


def libc() -> ctypes.CDLL:
    if not _LIBC:
        lib = ctypes.CDLL(None, use_errno=True)
        for name in ("prctl", "unshare", "mount"):
            getattr(lib, name)  # each function's wrapper is made on its first lookup
        _LIBC.append(lib)
    return _LIBC[0]


def set_death_signal() -> None:
    with contextlib.suppress(OSError):  # not Linux: reap() on restart removes leftovers
        libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def die_with_parent(parent: int) -> None:
    """Ask for SIGKILL when the parent thread dies; exit now if it already has."""
    set_death_signal()
    if os.getppid() != parent:
        os._exit(137)


def call(result: int, what: str) -> None:
    if result != 0:
        fail(f"{what}: {os.strerror(ctypes.get_errno())}")


def exit_like(status: int) -> None:
    """Exit as a process with wait status `status` did (killed by its signal, else its code)."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the job's core, not the shim's
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status))


def close_quietly(fd: int | None) -> None:
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


def enter_pid_namespace(exec_fd: int | None = None) -> None:
    """Return in the job's process, pid 2 of a new PID namespace with its own /proc; the
    processes above it (outside: this one; inside: init) never return, and close `exec_fd`
    (close-on-exec: its end tells the launch server the job has executed)."""
    lib = libc()
    for sig in FORWARDED:
        signal.signal(sig, signal.SIG_IGN)
    call(lib.unshare(CLONE_NEWNS | CLONE_NEWPID), "cannot make a PID namespace")
    read_end, write_end = os.pipe()
    init = os.fork()
    if init:  # outside the namespace
        os.close(write_end)
        close_quietly(exec_fd)
        os.waitpid(init, 0)
        data = os.read(read_end, 4)
        exit_like(struct.unpack("i", data)[0] if len(data) == 4 else signal.SIGKILL)
    os.close(read_end)
    set_death_signal()  # init dies with the shim outside, and takes the namespace with it
    call(lib.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "cannot make mounts private")
    flags = MS_NOSUID | MS_NODEV | MS_NOEXEC
    call(lib.mount(b"proc", b"/proc", b"proc", flags, None), "cannot mount /proc")
    job = os.fork()
    if job == 0:
        os.close(write_end)
        set_death_signal()
        return
    close_quietly(exec_fd)
    while True:  # init: reap everything; the job's end ends the namespace
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(0)
        if pid == job:
            os.write(write_end, struct.pack("i", status))
            os._exit(0)


REGISTERED: list[str] = []  # this task's file in the lease fence (removed if it fails)


def register_with_fence(folder: str) -> None:
    """Name this process (a process-group leader) in the fence's task folder before it runs."""
    try:
        with open("/proc/self/stat") as f:
            start = f.read().rsplit(")", 1)[1].split()[19]
        path = os.path.join(folder, f"{os.getpid()}-{start}")
        open(path, "w").close()  # an empty marker
    except OSError as exc:
        fail(f"cannot register with the lease fence in {folder}: {exc.strerror}")
    REGISTERED.append(path)


def main(args: list[str], env: dict[str, str] | None = None, exec_fd: int | None = None) -> None:
    """Run the shim on `args` (`PARENT_PID [options] -- ARGV...`) and exec the job with `env`
    (None: this process's own environment). `exec_fd` (close-on-exec) stays open until the
    job's exec or the end of every process here that does not become the job. Never returns."""
    parent = int(args[0])
    sep = args.index("--")
    options, argv = args[1:sep], args[sep + 1 :]
    pidns = "--pidns" in options
    options = [o for o in options if o != "--pidns"]
    pairs = [(options[i], options[i + 1]) for i in range(0, len(options), 2)]
    joins = [value for key, value in pairs if key == "--join"]
    user = next((value for key, value in pairs if key == "--user"), None)
    cwd = next((value for key, value in pairs if key == "--cwd"), None)
    die_with_parent(parent)
    for folder in (value for key, value in pairs if key == "--fence"):
        register_with_fence(folder)
    for path in joins:
        try:
            with open(path, "w") as f:
                f.write(str(os.getpid()))
        except OSError as exc:
            fail(f"cannot join {path}: {exc.strerror}")
    if pidns:
        enter_pid_namespace(exec_fd)
        for sig in FORWARDED:
            signal.signal(sig, signal.SIG_DFL)
    if user is not None:
        uid, gid = (int(x) for x in user.split(":"))
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
        except OSError as exc:
            fail(f"cannot become {uid}:{gid}: {exc.strerror}")
        set_death_signal()  # a credential change clears the death signal: set it again
        if not pidns and os.getppid() != parent:
            os._exit(137)
    if cwd is not None:
        try:
            os.chdir(cwd)
        except OSError as exc:
            fail(f"cannot use working directory {cwd!r}: {exc.strerror}")
    try:
        if env is None:
            os.execvp(argv[0], argv)
        else:
            os.execvpe(argv[0], argv, env)
    except OSError as exc:
        fail(f"cannot exec {argv[0]!r}: {exc.strerror}", 127)


if __name__ == "__main__":
    main(sys.argv[1:])
