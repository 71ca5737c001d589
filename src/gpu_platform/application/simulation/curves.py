"""Allocation curves for plotting: the band (mean, min, max over seeds) of our per-seed curves,
and FGD's published per-seed curves for one workload (rows of the simulator's
`analysis_allo_discrete.csv`: `workload,sc_policy,tune,seed,[total_gpus,]0,1,...,130`, the
allocation % at each arrived-demand %), keyed by our policy names. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpu_platform.application.simulation.protocol import _PUBLISHED_NAMES

__all__ = ["CurveBand", "curve_band", "published_curves"]


@dataclass(frozen=True, slots=True)
class CurveBand:
    """Point-wise mean, min and max of equally long curves (allocation % per demand %)."""

    mean: tuple[float, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]


def curve_band(curves: Sequence[Sequence[float]]) -> CurveBand:
    """The band over `curves` (at least one; all the same length, else ValueError)."""
    if not curves:
        raise ValueError("no curves to average")
    n = len(curves[0])
    if any(len(c) != n for c in curves):
        raise ValueError(f"curves differ in length: {sorted({len(c) for c in curves})}")
    columns = list(zip(*curves, strict=True))
    return CurveBand(
        mean=tuple(sum(col) / len(col) for col in columns),
        low=tuple(min(col) for col in columns),
        high=tuple(max(col) for col in columns),
    )


def published_curves(
    rows: Iterable[Mapping[str, str]], workload: str
) -> dict[str, list[tuple[float, ...]]]:
    """Per policy (our names; unknown labels kept as published), the per-seed curves of
    `workload`, each `curve[k]` = allocation % at k % arrived demand, k = 0, 1, ...
    A row with a non-numeric point raises ValueError naming the workload and seed."""
    out: dict[str, list[tuple[float, ...]]] = {}
    for row in rows:
        if row.get("workload") != workload:
            continue
        label = row.get("sc_policy", "")
        points = sorted((int(k), v) for k, v in row.items() if k is not None and k.isdigit())
        try:
            curve = tuple(float(v) for _, v in points)
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"published curve {workload}/{label} seed {row.get('seed')}: {exc}"
            ) from None
        out.setdefault(_PUBLISHED_NAMES.get(label, label), []).append(curve)
    return out
