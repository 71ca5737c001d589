"""The `jobs list` table: one line per job, full ids, at any width from 80 columns up.

Like `squeue`, the columns that identify a job (ID, STATE, GPUS, AGE) never shrink or wrap;
the free-text ones (NAME, TENANT, ASSIGNED, REASON) share what is left and end in `…` when
cut. The full values are in `jobs describe` and `-o json`.
"""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from rich.table import Table
from rich.text import Text

from gpu_platform.adapters.inbound.cli.sharing_opts import gpus_text

__all__ = ["age", "jobs_table"]


def age(seconds: float) -> str:
    """kubectl's AGE: `42s`, `7m`, `3h`, `12d` (whole units, never negative)."""
    s = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{s}s"


def _assigned(job: dict[str, Any]) -> str:
    a = job.get("allocation")
    if not a:
        return "-"
    tasks = a.get("tasks") or [a]
    return " ".join(
        f"{t['node']}:{','.join(str(i) for i in t['gpu_indices'])}"
        if t["gpu_indices"]
        else t["node"]
        for t in tasks
    )


def _reason(job: dict[str, Any]) -> str:
    p = job.get("pending")
    if p:
        return f"{p['code']}: {p['message']}"
    return str(job.get("reason") or "-")


_FIXED = ("ID", "STATE", "GPUS", "AGE")
_FLEX = ("NAME", "TENANT", "ASSIGNED", "REASON")
_ORDER = ("ID", "NAME", "TENANT", "STATE", "GPUS", "ASSIGNED", "AGE", "REASON")
_GAP = 2  # spaces between columns


def _share(natural: dict[str, int], budget: int) -> dict[str, int]:
    """Widths for the free-text columns: each its natural width when all fit, else an even
    share of `budget` (never below its header), what a narrow column leaves going to the rest."""
    widths = {name: len(name) for name in natural}
    left = budget - sum(widths.values())
    pending = sorted(natural, key=lambda n: natural[n])
    while pending and left > 0:
        name = pending.pop(0)
        grant = min(natural[name] - widths[name], left // (len(pending) + 1))
        widths[name] += max(0, grant)
        left -= max(0, grant)
    if left > 0:  # the rounding remainder
        widths["REASON"] += min(left, natural["REASON"] - widths["REASON"])
    return widths


def jobs_table(rows: list[dict[str, Any]], now: float, width: int = 80) -> Table:
    """`rows` as `GET /v1/jobs` returns them; `now` in epoch seconds (for AGE); the table
    is at most `width` columns wide whenever width >= 80 (each row one line)."""
    cells = [
        {
            "ID": j["id"],
            "NAME": j.get("name") or "-",
            "TENANT": str(j["tenant"]),
            "STATE": str(j["state"]),
            "GPUS": gpus_text(j),
            "ASSIGNED": _assigned(j),
            "AGE": age(now - j["submitted_at"]),
            "REASON": _reason(j).replace("\n", " "),
        }
        for j in rows
    ]
    natural = {c: max([len(c)] + [cell_len(r[c]) for r in cells]) for c in _ORDER}
    fixed = sum(natural[c] for c in _FIXED) + _GAP * (len(_ORDER) - 1)
    widths = natural | _share({c: natural[c] for c in _FLEX}, width - fixed)
    table = Table(box=None, pad_edge=False, padding=(0, _GAP // 2), header_style="bold")
    for c in _ORDER:
        table.add_column(
            c,
            width=widths[c],
            no_wrap=True,
            overflow="ellipsis",
            justify="right" if c in ("GPUS", "AGE") else "left",
        )
    for r in cells:
        table.add_row(*(Text(r[c]) for c in _ORDER))  # Text: a name is never markup
    return table
