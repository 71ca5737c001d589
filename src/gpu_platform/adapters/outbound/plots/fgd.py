"""The FGD-protocol plots of `gpu-platform simulate --plots`, drawn with the generic charts:

- `alloc_vs_demand.png`: GPU allocation % against arrived demand % per policy, the mean over
  the seeds as a line with a min..max band; FGD's published mean curves for the same workload
  dashed in the same colour (and FGD's own policy, `fgd`, always when published).
- `unallocated_at_130.png`: unallocated GPUs at the end of the run (130 % arrived demand at
  the default `tune`) per policy, mean with a min..max range, published means hatched.

Fragmentation per step is not recorded by the protocol run, so no fragmentation plot yet.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from gpu_platform.adapters.outbound.plots.charts import Series, bar_chart, line_chart
from gpu_platform.application.simulation import curve_band
from gpu_platform.domain.simulation import SimResult

__all__ = ["ALLOC_PNG", "UNALLOCATED_PNG", "write_fgd_plots"]

ALLOC_PNG = "alloc_vs_demand.png"
UNALLOCATED_PNG = "unallocated_at_130.png"
_REFERENCE = "fgd"  # FGD's own policy: its published curve is the bar to beat
_PUB = " (FGD published)"


def _colors(names: Sequence[str]) -> dict[str, str]:
    """A stable matplotlib cycle colour per policy name, in first-seen order."""
    out: dict[str, str] = {}
    for name in names:
        out.setdefault(name, f"C{len(out) % 10}")
    return out


def write_fgd_plots(
    out: Path,
    results: Sequence[SimResult],
    policies: Sequence[str],
    *,
    workload: str,
    published: Mapping[str, Sequence[Sequence[float]]] | None = None,
    published_unallocated: Mapping[str, float] | None = None,
) -> list[Path]:
    """Write both PNGs into `out` and return their paths. `published` = per policy FGD's
    per-seed curves for `workload`; `published_unallocated` = its mean unallocated GPUs."""
    published = published or {}
    published_unallocated = published_unallocated or {}
    by_policy = {p: [r for r in results if r.policy == p] for p in policies}
    missing = [p for p, runs in by_policy.items() if not runs]
    if missing:
        raise ValueError(f"no runs for policy {', '.join(missing)}")
    shown = [p for p in (*policies, _REFERENCE) if p in published]
    colors = _colors([*policies, *shown])
    seeds = len(next(iter(by_policy.values())))
    series = []
    for policy, runs in by_policy.items():
        band = curve_band([r.curve for r in runs])
        x = list(range(len(band.mean)))
        series.append(Series(policy, x, band.mean, band.low, band.high, color=colors[policy]))
    for policy in shown:
        mean = curve_band(published[policy]).mean
        series.append(
            Series(policy + _PUB, list(range(len(mean))), mean, dashed=True, color=colors[policy])
        )
    alloc = line_chart(
        out / ALLOC_PNG,
        series,
        title=f"GPU allocation vs arrived demand: {workload}\n"
        f"ours: mean of {seeds} seed{'s' * (seeds != 1)}, band = min..max; "
        "dashed: FGD published mean",
        xlabel="arrived GPU demand (% of capacity)",
        ylabel="GPU allocation ratio (%)",
        zoom=(80.0, float(len(results[0].curve) - 1)),
    )
    values: dict[str, float] = {}
    errors: dict[str, tuple[float, float]] = {}
    for policy, runs in by_policy.items():
        left = [r.unallocated_gpus_at_130 for r in runs]
        values[policy] = sum(left) / len(left)
        errors[policy] = (min(left), max(left))
    hatched = []
    for policy in (*policies, _REFERENCE):
        if policy in published_unallocated and policy + _PUB not in values:
            values[policy + _PUB] = published_unallocated[policy]
            hatched.append(policy + _PUB)
    top = len(results[0].curve) - 1
    unallocated = bar_chart(
        out / UNALLOCATED_PNG,
        values,
        title=f"Unallocated GPUs at {top} % arrived demand: {workload}\n"
        "ours: mean, range = min..max over seeds; hatched: FGD published mean (lower is better)",
        ylabel="unallocated GPUs",
        errors=errors,
        hatched=hatched,
        colors={**colors, **{p + _PUB: c for p, c in colors.items()}},
    )
    return [alloc, unallocated]
