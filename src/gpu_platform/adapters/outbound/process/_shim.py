"""Exec shim for job processes: die with the control plane, then become the job.

Run as `python -I -S _shim.py PARENT_PID -- ARGV...`. It asks the kernel to SIGKILL this
process when its parent thread dies (PR_SET_PDEATHSIG), checks the parent is still the one that
launched it (closing the fork/prctl race), and execs the job. Standalone: stdlib only, no
package imports, because it runs before (and instead of) anything else in the child.
"""

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def main() -> None:
    parent = int(sys.argv[1])
    argv = sys.argv[3:]
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except OSError:
        pass  # not Linux: the runner's reap() on restart still removes leftovers
    if os.getppid() != parent:
        os._exit(137)
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        sys.stderr.write(f"gpu-platform: cannot exec {argv[0]!r}: {exc.strerror}\n")
        os._exit(127)


main()
