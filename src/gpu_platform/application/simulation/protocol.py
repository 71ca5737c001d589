"""Run the FGD protocol (`domain.simulation.fgd`) for several policies and seeds, and reduce
the runs to the summary `gpu-platform simulate` writes: per policy, the means over the seeds
of the allocation % at 100 % and 130 % arrived demand and of the unallocated GPUs at 130 %.

`runner` maps (policy, seed) to a `SimResult`; the default runs in-process, and the entry
point may pass a parallel map. Pure apart from what `runner` does.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from gpu_platform.domain.placement.fragmentation import TaskShape
from gpu_platform.domain.simulation.fgd import SimNode, SimResult, simulate

__all__ = ["PolicySummary", "ProtocolRun", "published_means", "run_protocol"]

Runner = Callable[[Sequence[tuple[str, int]]], list[SimResult]]


@dataclass(frozen=True, slots=True)
class PolicySummary:
    """Means over `seeds` (population std of the 130 % figure beside them)."""

    alloc_pct_at_100: float
    alloc_pct_at_130: float
    alloc_pct_at_130_std: float
    unallocated_gpus_at_130: float
    seeds: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ProtocolRun:
    """Every run, and the per-policy summary in the order the policies were asked for."""

    results: tuple[SimResult, ...]
    summary: tuple[tuple[str, PolicySummary], ...]

    def summary_json(self) -> dict[str, object]:
        """`{"policies": {NAME: {alloc_pct_at_100, alloc_pct_at_130, unallocated_gpus_at_130,
        seeds, ...}}}`, figures rounded to 2 decimals."""
        return {
            "policies": {
                name: {
                    "alloc_pct_at_100": round(s.alloc_pct_at_100, 2),
                    "alloc_pct_at_130": round(s.alloc_pct_at_130, 2),
                    "alloc_pct_at_130_std": round(s.alloc_pct_at_130_std, 2),
                    "unallocated_gpus_at_130": round(s.unallocated_gpus_at_130, 1),
                    "seeds": list(s.seeds),
                }
                for name, s in self.summary
            }
        }


def run_protocol(
    nodes: Sequence[SimNode],
    tasks: Sequence[TaskShape],
    policies: Sequence[str],
    seeds: Sequence[int],
    tune: float = 1.3,
    runner: Runner | None = None,
) -> ProtocolRun:
    """All (policy, seed) runs and their summary."""
    if not policies or not seeds:
        raise ValueError("need at least one policy and one seed")
    jobs = [(p, s) for p in policies for s in seeds]
    if runner is None:
        results = [simulate(nodes, tasks, p, s, tune) for p, s in jobs]
    else:
        results = runner(jobs)
    summary = []
    for policy in policies:
        mine = [r for r in results if r.policy == policy]
        at130 = [r.alloc_pct_at_130 for r in mine]
        summary.append(
            (
                policy,
                PolicySummary(
                    alloc_pct_at_100=statistics.fmean(r.alloc_pct_at_100 for r in mine),
                    alloc_pct_at_130=statistics.fmean(at130),
                    alloc_pct_at_130_std=statistics.pstdev(at130),
                    unallocated_gpus_at_130=statistics.fmean(
                        r.unallocated_gpus_at_130 for r in mine
                    ),
                    seeds=tuple(r.seed for r in mine),
                ),
            )
        )
    return ProtocolRun(tuple(results), tuple(summary))


_PUBLISHED_NAMES = {
    "01-Random": "random",
    "02-DotProd": "dotprod",
    "03-GpuClustering": "gpuclustering",
    "04-GpuPacking": "packing",
    "05-BestFit": "bestfit",
    "06-FGD": "fgd",
}


def published_means(rows: Iterable[dict[str, str]], workload: str) -> dict[str, dict[str, float]]:
    """FGD's published means for `workload` (rows of `DERIVED_summary_by_workload_policy.csv`),
    keyed by our policy names: {name: {alloc_pct_at_100, alloc_pct_at_130,
    unallocated_gpus_at_130}}."""
    out: dict[str, dict[str, float]] = {}
    for row in rows:
        if row.get("workload") != workload:
            continue
        name = _PUBLISHED_NAMES.get(row.get("sc_policy", ""), row.get("sc_policy", ""))
        out[name] = {
            "alloc_pct_at_100": float(row["alloc_pct_at_arrival100"]),
            "alloc_pct_at_130": float(row["alloc_pct_at_arrival130"]),
            "unallocated_gpus_at_130": float(row["unallocated_gpus_at_arrival130"]),
        }
    return out
