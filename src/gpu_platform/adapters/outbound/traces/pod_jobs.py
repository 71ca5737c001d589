"""Jobs with arrival and run times from an openb pod list, for the arrivals simulation.

Columns used: `name`, `num_gpu`, `qos`, `creation_time`, `deletion_time` and, when set,
`scheduled_time` (seconds). A job arrives at `creation_time` and runs for `deletion_time -
scheduled_time` (`deletion_time - creation_time` for a pod that was never scheduled), at least
1 s. The arrivals simulation allocates whole GPUs, so a pod sharing a GPU (`gpu_milli` < 1000)
asks for one whole GPU. Pods without GPUs are left out. The trace names no tenants: the QoS
class stands in (`LS`, `BE`, `Burstable`, `Guaranteed`), and `LS`/`Guaranteed` get priority 1,
the rest 0. No time limits are declared. A file without the time columns, or a malformed row,
raises ValueError naming it.
"""

from __future__ import annotations

import csv
from pathlib import Path

from gpu_platform.domain.simulation.workload import SimJob

__all__ = ["TIME_COLUMNS", "read_pod_jobs"]

TIME_COLUMNS = ("creation_time", "deletion_time")
_HIGH = frozenset({"LS", "Guaranteed"})


def _num(row: dict[str, str], key: str, where: str) -> float:
    try:
        return float(row[key])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{where}: bad or missing {key!r}: {row.get(key)!r}") from exc


def read_pod_jobs(path: Path) -> list[SimJob]:
    """The GPU pods of `path` as jobs, in file order."""
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in TIME_COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise ValueError(
                f"{path.name}: no {', '.join(missing)} column (the arrivals protocol needs "
                "creation and deletion times; use a generator spec instead)"
            )
        rows = list(reader)
    jobs = []
    for i, row in enumerate(rows, start=2):
        where = f"{path.name}:{i}"
        gpus = int(_num(row, "num_gpu", where))
        if gpus <= 0:
            continue
        created = _num(row, "creation_time", where)
        started = _num(row, "scheduled_time", where) if row.get("scheduled_time") else created
        duration = _num(row, "deletion_time", where) - started
        qos = (row.get("qos") or "").strip() or "default"
        jobs.append(
            SimJob(
                row.get("name") or f"pod-{i}",
                qos,
                created,
                1,
                gpus,
                max(1.0, duration),
                1 if qos in _HIGH else 0,
                None,
            )
        )
    return jobs
