"""When a pinned server's CPU is crowded, which CPU to move to (`cpu_affinity = auto`, issue 21).

`auto` pins every thread of the server to one CPU (cpu_affinity.py). The kernel then cannot
move the server off that CPU when other programs crowd it: a busy job, another server on the
same host (tests start many), a batch of compiles. So `FollowRole` takes a `Sample` of the
CPUs' time (`/proc/stat`) and of the server's own (`/proc/self/stat`) every second, and
`crowded_move` says where to go: when others than the server took at least `others_at` of
its CPU over the window, and another CPU it may use was idle for at least `margin` more of
that window, to the idlest such CPU. Both figures are shares of one CPU's time (0 to 1).
`FollowRole` moves only after two such windows in a row, and not again for a while, so a
short burst does not shuffle servers around.

Everything here reads figures and decides; the move itself is `cpu_affinity.pin_threads`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Sample", "crowded_move", "read_sample"]

# /proc/stat's per-CPU columns: user nice system idle iowait irq softirq steal (guest time is
# already in user). Idle time is idle + iowait.
_IDLE_COLUMNS = (3, 4)
_COUNTED = 8


@dataclass(frozen=True)
class Sample:
    """CPU time in clock ticks: each CPU's busy and total time, and this process's own."""

    busy: dict[int, int]
    total: dict[int, int]
    own: int


def parse_proc_stat(text: str) -> tuple[dict[int, int], dict[int, int]]:
    """Busy and total ticks per CPU from the text of /proc/stat."""
    busy: dict[int, int] = {}
    total: dict[int, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu":
            continue
        ticks = [int(v) for v in rest.split()[:_COUNTED]]
        idle = sum(ticks[i] for i in _IDLE_COLUMNS if i < len(ticks))
        cpu = int(name[3:])
        total[cpu] = sum(ticks)
        busy[cpu] = total[cpu] - idle
    return busy, total


def parse_own_ticks(text: str) -> int:
    """User plus system ticks of every thread of a process, from its /proc/PID/stat text."""
    fields = text.rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)


def read_sample(proc: Path = Path("/proc")) -> Sample:
    busy, total = parse_proc_stat((proc / "stat").read_text())
    return Sample(busy, total, parse_own_ticks((proc / "self" / "stat").read_text()))


def _idle(before: Sample, after: Sample, cpu: int) -> float | None:
    if cpu not in before.total or cpu not in after.total:
        return None  # offline in one of the samples
    span = after.total[cpu] - before.total[cpu]
    if span <= 0:
        return None
    return 1.0 - (after.busy[cpu] - before.busy[cpu]) / span


def crowded_move(
    before: Sample,
    after: Sample,
    mine: int,
    candidates: Iterable[int],
    *,
    others_at: float = 0.5,
    margin: float = 0.25,
) -> int | None:
    """The CPU of `candidates` to move to from `mine` (where every thread of this process
    ran between the samples), or None to stay (the module docstring)."""
    idle_mine = _idle(before, after, mine)
    if idle_mine is None:
        return None
    span = after.total[mine] - before.total[mine]
    own = (after.own - before.own) / span
    if 1.0 - idle_mine - own < others_at:
        return None
    best: tuple[float, int] | None = None
    for cpu in sorted(set(candidates) - {mine}):
        idle = _idle(before, after, cpu)
        if idle is not None and (best is None or idle > best[0]):
            best = (idle, cpu)
    if best is None or best[0] < idle_mine + margin:
        return None
    return best[1]
