"""The server's CPU affinity (`cpu_affinity`, issue 21; docs/operations.md, "CPU affinity").

Why. The server is one Python process with many threads (API calls, the Raft loop and its
transport, the applier, the scheduling cycle, the agents' streams), and the GIL lets one of
them run Python at a time. When the kernel spreads those threads over several cores, every
hand-off of the GIL is a wake-up on another core, with its caches cold. Measured on the
2-vCPU machine (docs/performance.md, "One core for the server"): with the server's threads
on one core, a held gRPC submit cost 0.33 ms of server CPU at 64 clients instead of 0.69 ms,
and the server took 1.9x the submits per second.

`pin_process(spec, server_id)` restricts every thread of this process (and the threads it
starts later, which inherit the mask) to the CPUs `spec` names: `auto` = one CPU of those
this process may use, picked by `server_id` (so servers sharing a host spread out), or a
list such as `2` or `0,4-5`; `off` leaves the process as it is. It records the mask it
started with in the environment (`UNPINNED_ENV`: CPU numbers, comma-separated), and what
the server starts that should not share its core restores that mask first (`unpin_self`:
the API workers; the launch server that forks jobs, so jobs keep every CPU they were given).
A program the server runs directly that outlives the call (the MPS control daemon) is started
through `unpinned(argv)`, which sets the mask back before it executes the program.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys

__all__ = [
    "UNPINNED_ENV",
    "format_cpus",
    "parse_cpus",
    "pin_process",
    "unpin_self",
    "unpinned",
]

log = logging.getLogger(__name__)

UNPINNED_ENV = "GPU_PLATFORM_CPUS_UNPINNED"
_EXEC_UNPINNED = (  # argv: CPUS PROGRAM ARGS...
    "import os, sys; os.sched_setaffinity(0, {int(c) for c in sys.argv[1].split(',')}); "
    "os.execvp(sys.argv[2], sys.argv[2:])"
)


def parse_cpus(spec: str) -> set[int]:
    """CPU numbers from a list such as `0,2-3` (the kernel's cpulist format); ValueError
    with the offending part when it is not one."""
    cpus: set[int] = set()
    for raw in spec.split(","):
        part = raw.strip()
        first, dash, last = part.partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ValueError(f"{part!r} is not a CPU number or range (e.g. 2 or 0,4-5)")
        low, high = int(first), int(last) if dash else int(first)
        if high < low:
            raise ValueError(f"{part!r}: a range runs from low to high")
        cpus.update(range(low, high + 1))
    return cpus


def format_cpus(cpus: set[int]) -> str:
    """The kernel's cpulist format of `cpus` (ranges merged)."""
    out: list[str] = []
    run: list[int] = []
    for cpu in sorted(cpus):
        if run and cpu == run[-1] + 1:
            run.append(cpu)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [cpu]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def chosen_cpus(spec: str, server_id: int, allowed: set[int]) -> set[int] | None:
    """The CPUs `spec` gives a server of `server_id` that may use `allowed`: None for `off`;
    ValueError when it names a CPU outside `allowed`."""
    if spec == "off":
        return None
    if spec == "auto":
        ordered = sorted(allowed)
        return {ordered[max(server_id - 1, 0) % len(ordered)]}
    wanted = parse_cpus(spec)
    outside = wanted - allowed
    if outside:
        raise ValueError(
            f"cpu_affinity: CPU {format_cpus(outside)} is not one this process may use "
            f"(it may use {format_cpus(allowed)})"
        )
    return wanted


def pin_process(spec: str, server_id: int) -> set[int] | None:
    """Restrict every thread of this process to the CPUs `spec` gives (see module docstring);
    the CPUs now used, or None when `spec` is `off`."""
    allowed = os.sched_getaffinity(0)
    cpus = chosen_cpus(spec, server_id, allowed)
    if cpus is None:
        return None
    os.environ.setdefault(UNPINNED_ENV, ",".join(map(str, sorted(allowed))))
    for tid in os.listdir("/proc/self/task"):  # threads started by imports, if any
        try:
            os.sched_setaffinity(int(tid), cpus)
        except ProcessLookupError:  # it ended meanwhile
            continue
    log.info("cpu_affinity: the server's threads run on CPU %s", format_cpus(cpus))
    return cpus


def unpin_self() -> None:
    """Give this process back the mask its pinned server started with (a child that should
    not share the server's core); nothing when the server was not pinned."""
    cpus = os.environ.get(UNPINNED_ENV)
    if not cpus:
        return
    try:
        os.sched_setaffinity(0, {int(cpu) for cpu in cpus.split(",")})
    except (OSError, ValueError) as exc:  # a CPU went offline meanwhile: keep what we have
        log.warning("cpu_affinity: could not restore CPUs %s: %s", cpus, exc)


def unpinned(argv: list[str]) -> list[str]:
    """`argv` run with the mask the pinned server started with: a short Python sets it, then
    executes the program. `argv` itself when the server is not pinned, or when the program
    is not found (the caller then gets the usual FileNotFoundError)."""
    cpus = os.environ.get(UNPINNED_ENV)
    if not cpus or shutil.which(argv[0]) is None:
        return list(argv)
    return [sys.executable, "-I", "-S", "-c", _EXEC_UNPINNED, cpus, *argv]
