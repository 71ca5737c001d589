"""The Alibaba "openb" trace format (clusterdata `cluster-trace-gpu-v2023`, the FGD paper's).

Nodes: `sn,cpu_milli,memory_mib,gpu,model`. Pods: `name,cpu_milli,memory_mib,num_gpu,gpu_milli`
plus an optional `gpu_spec` (`V100M16|V100M32`: accepted models; empty = any). Nodes without
GPUs are kept (CPU-only tasks may land there). A malformed row raises ValueError naming it.
"""

from __future__ import annotations

import csv
from pathlib import Path

from gpu_platform.domain.placement.fragmentation import MILLI, TaskShape
from gpu_platform.domain.simulation.fgd import SimNode

__all__ = ["read_nodes", "read_tasks"]


def _int(row: dict[str, str], key: str, where: str) -> int:
    try:
        return int(float(row[key] or 0))
    except (KeyError, ValueError) as exc:
        raise ValueError(f"{where}: bad or missing {key!r}: {row.get(key)!r}") from exc


def read_nodes(path: Path) -> list[SimNode]:
    """The nodes of an openb node list."""
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    nodes = []
    for i, row in enumerate(rows, start=2):
        where = f"{path.name}:{i}"
        model = (row.get("model") or "").strip()
        nodes.append(
            SimNode(
                name=row.get("sn") or f"node-{i}",
                cpu_milli=_int(row, "cpu_milli", where),
                memory_mib=_int(row, "memory_mib", where),
                gpus=_int(row, "gpu", where),
                model="" if model == "nan" else model,
            )
        )
    return nodes


def read_tasks(path: Path) -> list[TaskShape]:
    """The task shapes of an openb pod list, in file order."""
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    tasks = []
    for i, row in enumerate(rows, start=2):
        where = f"{path.name}:{i}"
        gpus = _int(row, "num_gpu", where)
        milli = _int(row, "gpu_milli", where) if gpus else 0
        if gpus > 1 and milli != MILLI:
            raise ValueError(f"{where}: {gpus} GPUs with gpu_milli {milli} (whole GPUs expected)")
        spec = (row.get("gpu_spec") or "").strip()
        models = frozenset(m for m in spec.split("|") if m and m != "nan")
        tasks.append(
            TaskShape(
                cpu_milli=_int(row, "cpu_milli", where),
                memory_mib=_int(row, "memory_mib", where),
                gpus=gpus,
                gpu_milli=milli,
                models=models,
            )
        )
    return tasks
