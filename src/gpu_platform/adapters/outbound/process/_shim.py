"""Exec shim for job processes: die with the control plane, then become the job.

Run as `python -I -S _shim.py PARENT_PID [--join FILE]... [--user UID:GID] -- ARGV...`. It
asks the kernel to SIGKILL this process when its parent thread dies (PR_SET_PDEATHSIG), checks
the parent is still the one that launched it (closing the fork/prctl race), writes its pid into
each FILE (the attempt's cgroup.procs: the job starts confined), drops to UID:GID with no
supplementary groups when asked (after joining: only root may move itself between cgroups),
and execs the job. Standalone: stdlib only, no
package imports, because it runs before (and instead of) anything else in the child.
"""

import ctypes
import os
import signal
import sys
import warnings  # noqa: F401  os.execvp imports it lazily; after setuid the stdlib may be unreadable

PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """Ask for SIGKILL when the parent thread dies; exit now if it already has."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except OSError:
        pass  # not Linux: the runner's reap() on restart still removes leftovers
    if os.getppid() != parent:
        os._exit(137)


def main() -> None:
    parent = int(sys.argv[1])
    sep = sys.argv.index("--")
    options, argv = sys.argv[2:sep], sys.argv[sep + 1 :]
    pairs = [(options[i], options[i + 1]) for i in range(0, len(options), 2)]
    joins = [value for key, value in pairs if key == "--join"]
    user = next((value for key, value in pairs if key == "--user"), None)
    die_with_parent(parent)
    for path in joins:
        try:
            with open(path, "w") as f:
                f.write(str(os.getpid()))
        except OSError as exc:
            sys.stderr.write(f"gpu-platform: cannot join {path}: {exc.strerror}\n")
            os._exit(126)
    if user is not None:
        uid, gid = (int(x) for x in user.split(":"))
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
        except OSError as exc:
            sys.stderr.write(f"gpu-platform: cannot become {uid}:{gid}: {exc.strerror}\n")
            os._exit(126)
        die_with_parent(parent)  # a credential change clears the death signal: set it again
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        sys.stderr.write(f"gpu-platform: cannot exec {argv[0]!r}: {exc.strerror}\n")
        os._exit(127)


main()
