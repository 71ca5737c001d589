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
this process may use, or a list such as `2` or `0,4-5`; `off` leaves the process as it is.
With `auto` the last of those CPUs is the leader's (the embedded server, `server_id` 0,
always leads) and a replicated server starts on one of the others, picked by `server_id` so
that servers sharing a host spread out; on a host whose cores differ (P- and E-cores), the
last of the fastest (`cpu_capacities`); `FollowRole` moves it to the leader's CPU while it
leads and back when it stops. On a host shared by several servers the leader then has a core
of its own: the cluster's throughput is bound by the leader's core. The last CPU, not the
first: CPU 0 is where a host's interrupts usually land, and on the 2-vCPU machine a leader on
CPU 0 bound 832 to 993 jobs/s at 1,100 offered where one on CPU 1 bound 973 to 1,069
(docs/performance.md, "A leader with a core of its own"). `FollowRole` also moves the
server off a CPU other programs crowd (cpu_crowding.py): the kernel no longer can.

`pin_process` records the mask the server started with in the environment (`UNPINNED_ENV`:
CPU numbers, comma-separated), and what the server starts that should not share its core
restores that mask first (`unpin_self`: the API workers; the launch server that forks jobs,
so jobs keep every CPU they were given).
A program the server runs directly that outlives the call (the MPS control daemon) is started
through `unpinned(argv)`, which sets the mask back before it executes the program.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from gpu_platform.adapters.outbound.cpu_crowding import Sample, crowded_move, read_sample

__all__ = [
    "UNPINNED_ENV",
    "FollowRole",
    "cpu_capacities",
    "format_cpus",
    "parse_cpus",
    "pin_process",
    "pin_threads",
    "role_cpus",
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
    """The CPUs `spec` gives a server of `server_id` that may use `allowed` when it starts:
    None for `off`; ValueError when it names a CPU outside `allowed`."""
    if spec == "off":
        return None
    if spec == "auto":
        return role_cpus(server_id, allowed, leading=server_id == 0)
    wanted = parse_cpus(spec)
    outside = wanted - allowed
    if outside:
        raise ValueError(
            f"cpu_affinity: CPU {format_cpus(outside)} is not one this process may use "
            f"(it may use {format_cpus(allowed)})"
        )
    return wanted


def role_cpus(
    server_id: int, allowed: set[int], leading: bool, capacity: Mapping[int, int] | None = None
) -> set[int]:
    """`auto`'s CPU for a server in its role: the leader the last of the fastest of `allowed`,
    a follower one of the others by `server_id`, fastest first (the leader's too, when there
    is no other). `capacity` ranks the CPUs (default: `cpu_capacities`); on a host whose
    CPUs are alike it is empty, and the order is the CPU numbers'."""
    rank = cpu_capacities(frozenset(allowed)) if capacity is None else capacity
    ordered = sorted(allowed, key=lambda cpu: (rank.get(cpu, 0), cpu))
    rest = sorted(ordered[:-1], key=lambda cpu: (-rank.get(cpu, 0), cpu))
    if leading or not rest:
        return {ordered[-1]}
    return {rest[max(server_id - 1, 0) % len(rest)]}


@functools.cache
def cpu_capacities(cpus: frozenset[int], root: str = "/sys/devices/system/cpu") -> dict[int, int]:
    """How fast each CPU of `cpus` is, where the host's CPUs differ (hybrid P- and E-cores,
    big.LITTLE): the kernel's `cpu_capacity`, else `cpufreq/cpuinfo_max_freq`. Empty when
    every CPU reads the same or one cannot be read: then no CPU is preferred."""
    for name in ("cpu_capacity", "cpufreq/cpuinfo_max_freq"):
        try:
            found = {cpu: int(Path(root, f"cpu{cpu}", name).read_text()) for cpu in cpus}
        except (OSError, ValueError):
            continue
        return found if len(set(found.values())) > 1 else {}
    return {}


def pin_threads(cpus: set[int]) -> None:
    """Restrict every thread of this process, and those started later, to `cpus`."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except ProcessLookupError:  # it ended meanwhile
            continue


class FollowRole:
    """With `auto`, the server's threads on the leader's CPU while `leading()` says it leads,
    on its follower CPU otherwise (`role_cpus`), checked every `every_s` seconds on a thread
    of its own; and off a crowded CPU (cpu_crowding.py): every `crowd_every_s` seconds it
    compares the CPUs' time, and after two crowded windows in a row moves the threads to the
    idlest CPU that has room, then stays put for `settle_s` seconds. A follower never moves
    to the leader's CPU; a change of role goes back to the role's CPU."""

    def __init__(
        self,
        server_id: int,
        leading: Callable[[], bool],
        *,
        allowed: set[int] | None = None,
        every_s: float = 0.1,
        crowd_every_s: float = 1.0,
        settle_s: float = 5.0,
        sample: Callable[[], Sample] = read_sample,
    ) -> None:
        unpinned = os.environ.get(UNPINNED_ENV, "")
        self._allowed = allowed or {int(c) for c in unpinned.split(",") if c}
        self._server_id = server_id
        self._leading = leading
        self._every_s = every_s
        self._crowd_every_s = crowd_every_s
        self._settle_s = settle_s
        self._sample = sample
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-role", daemon=True)
        self.moves = 0  # how often the threads were moved (a change of role or a crowded CPU)
        self.escapes = 0  # of those, moves off a crowded CPU

    def start(self) -> None:
        if self._allowed:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        was = self._server_id == 0  # where `chosen_cpus` started this server
        cpu = min(role_cpus(self._server_id, self._allowed, was))
        last = time.monotonic()
        quiet_until = last  # no move before then
        before: Sample | None = None
        crowded = 0  # crowded windows in a row
        while not self._stop.wait(self._every_s):
            try:
                now = self._leading()
            except Exception:  # the server is stopping: keep the CPUs it has
                log.debug("cpu_affinity: role unknown", exc_info=True)
                continue
            if now != was:
                role_cpu = min(role_cpus(self._server_id, self._allowed, now))
                if self._move(role_cpu, "it leads" if now else "it follows"):
                    was, cpu = now, role_cpu
                    quiet_until, before, crowded = time.monotonic() + self._settle_s, None, 0
                continue
            if time.monotonic() - last < self._crowd_every_s:
                continue
            last = time.monotonic()
            try:
                after = self._sample()
            except (OSError, ValueError, IndexError):
                log.debug("cpu_affinity: no CPU figures", exc_info=True)
                continue
            target = None if before is None else self._escape(before, after, cpu, now)
            before = after
            crowded = crowded + 1 if target is not None else 0
            if target is None or crowded < 2 or time.monotonic() < quiet_until:
                continue
            if self._move(target, f"others crowded CPU {cpu}"):
                self.escapes += 1
                cpu, crowded, before = target, 0, None
                quiet_until = time.monotonic() + self._settle_s

    def _escape(self, before: Sample, after: Sample, cpu: int, leading: bool) -> int | None:
        candidates = set(self._allowed)
        if not leading and len(candidates) > 1:  # the leader's CPU stays the leader's
            candidates -= role_cpus(self._server_id, self._allowed, True)
        return crowded_move(before, after, cpu, candidates)

    def _move(self, cpu: int, why: str) -> bool:
        try:
            pin_threads({cpu})
        except OSError as exc:  # a CPU went offline meanwhile: keep what we have
            log.warning("cpu_affinity: could not move to CPU %s: %s", cpu, exc)
            return False
        self.moves += 1
        log.info("cpu_affinity: %s, so the server's threads run on CPU %s", why, cpu)
        return True


def pin_process(spec: str, server_id: int) -> set[int] | None:
    """Restrict every thread of this process to the CPUs `spec` gives (see module docstring);
    the CPUs now used, or None when `spec` is `off`."""
    allowed = os.sched_getaffinity(0)
    cpus = chosen_cpus(spec, server_id, allowed)
    if cpus is None:
        return None
    os.environ.setdefault(UNPINNED_ENV, ",".join(map(str, sorted(allowed))))
    pin_threads(cpus)  # threads started by imports, if any
    # debug: the default does this on every start, and a refused start prints one line
    log.debug("cpu_affinity: the server's threads run on CPU %s", format_cpus(cpus))
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
