"""Job arrays in the CLI: pending tasks grouped into one row (squeue's `123_[5-999%64]`) and
an array's summary for `jobs describe`. Pure functions over the REST API's JSON."""

from __future__ import annotations

from typing import Any

__all__ = ["array_fields", "group_pending_tasks"]

_WAITING = ("PENDING", "QUEUED")


def group_pending_tasks(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`rows` (jobs, oldest first) with the waiting tasks of each array folded into one row at
    the first one's place, its id `<array>_[<indices>%<throttle>]`; every other job, running
    tasks included, stays a row of its own."""
    waiting: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        task = row.get("array")
        if task and row["state"] in _WAITING:
            waiting.setdefault(task["id"], []).append(row)
    out: list[dict[str, Any]] = []
    for row in rows:
        task = row.get("array")
        if not (task and row["state"] in _WAITING):
            out.append(row)
            continue
        group = waiting.pop(task["id"], None)
        if group is None:  # folded into its array's row already
            continue
        if len(group) == 1:
            out.append(row)
            continue
        # imported here: the domain package costs a CLI call that lists no array its time
        from gpu_platform.domain.model.job_array import ArraySpec, format_array, parse_stored_array

        throttle = parse_stored_array(task["array"]).throttle
        indices = tuple(sorted(r["array"]["index"] for r in group))
        text = format_array(ArraySpec(indices, throttle))
        out.append({**row, "id": f"{task['id']}_[{text}]", "allocation": None})
    return out


def array_fields(a: dict[str, Any]) -> list[tuple[str, str]]:
    """`jobs describe` of an array: (label, value) lines."""
    states = ", ".join(f"{n} {s}" for s, n in sorted(a["tasks_by_state"].items())) or "-"
    return [
        ("Array", a["id"]),
        ("Name", a["name"] or "-"),
        ("Indices", a["array"]),
        ("Tasks", f"{a['count']} (job ids {a['id']}_<index>)"),
        ("Throttle", f"at most {a['throttle']} at once" if a["throttle"] else "none"),
        ("By state", states),
        ("Waiting", a["waiting"] or "-"),
        ("Command", " ".join(a["command"])),
        ("GPUs requested", str(a["gpus"]) + (f" x {a['tasks']} tasks" if a["tasks"] > 1 else "")),
        ("Tenant", a["tenant"]),
        ("Priority", str(a["priority"])),
    ]
