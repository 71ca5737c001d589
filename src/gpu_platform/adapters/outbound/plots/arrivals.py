"""The arrivals-protocol plots of `gpu-platform simulate --protocol arrivals --plots`, drawn
with the generic charts (one PNG each, file names below):

- `utilization.png`: allocated GPUs % over simulated time per policy, the mean over the seeds
  as a line with a min..max band;
- `queue_delay_cdf.png`, `jct_cdf.png`: CDFs of every job's queueing delay and JCT per policy
  (all seeds pooled; log x);
- `tenant_share_<policy>.png`: GPUs held per tenant over time, stacked, for the first seed
  of each policy (the eight largest tenants, the rest as "other");
- `preemptions.png`: preemptions per policy, mean with a min..max range over the seeds.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gpu_platform.adapters.outbound.plots.charts import (
    Series,
    bar_chart,
    cdf_chart,
    line_chart,
    stacked_chart,
)
from gpu_platform.application.simulation.arrivals import (
    ArrivalsRun,
    samples_of,
    tenant_share,
    utilization_grid,
)

__all__ = ["write_arrivals_plots"]

_TOP_TENANTS = 8  # the rest are summed as "other"


def write_arrivals_plots(out: Path, runs: Sequence[ArrivalsRun]) -> list[Path]:
    """Write every PNG above into `out` and return their paths (ValueError: no runs)."""
    if not runs:
        raise ValueError("no runs to plot")
    by_policy = {
        p: [r for r in runs if r.policy == p] for p in dict.fromkeys(r.policy for r in runs)
    }
    seeds = len(next(iter(by_policy.values())))
    paths = []
    for what, name, title, ylabel in (
        ("allocated_gpus", "utilization.png", "GPU allocation", "GPUs allocated (% of cluster)"),
        ("fragmented_gpus", "fragmentation.png", "Fragmented free GPUs (FGD)",
         "free GPUs the typical task mix cannot use (% of cluster)"),
    ):  # fmt: skip
        series = []
        for policy, mine in by_policy.items():
            times, mean, low, high = utilization_grid(mine, what=what)
            hours = [t / 3600 for t in times]
            series.append(Series(policy, hours, mean, low, high))
        paths.append(
            line_chart(
                out / name,
                series,
                title=f"{title} over time (mean of {seeds} seed{'s' * (seeds != 1)}, "
                "band = min..max)",
                xlabel="simulated time (hours)",
                ylabel=ylabel,
                ylim=(0.0, 100.0),
            )
        )
    for what, name, label in (
        ("delay", "queue_delay_cdf.png", "queueing delay (s, first start - submit)"),
        ("jct", "jct_cdf.png", "job completion time (s, completion - submit)"),
    ):
        samples = {p: [max(1.0, x) for x in xs] for p, xs in samples_of(by_policy, what).items()}
        paths.append(
            cdf_chart(
                out / name,
                samples,
                title=f"{label.split(' (')[0].capitalize()} per policy (all seeds pooled; "
                "values under 1 s shown at 1 s)",
                xlabel=label,
                log_x=True,
            )
        )
    for policy, mine in by_policy.items():
        x, groups = tenant_share(mine[0])
        top = dict(list(groups.items())[:_TOP_TENANTS])
        rest = list(groups.values())[_TOP_TENANTS:]
        if rest:
            top["other"] = [sum(v) for v in zip(*rest, strict=True)]
        paths.append(
            stacked_chart(
                out / f"tenant_share_{policy}.png",
                [t / 3600 for t in x],
                top,
                title=f"GPUs held per tenant: {policy}, seed {mine[0].seed}",
                xlabel="simulated time (hours)",
                ylabel="GPUs (mean over the bin)",
            )
        )
    values, errors = {}, {}
    for policy, mine in by_policy.items():
        counts = [r.detail.result.preemptions for r in mine]
        values[policy] = sum(counts) / len(counts)
        errors[policy] = (float(min(counts)), float(max(counts)))
    paths.append(
        bar_chart(
            out / "preemptions.png",
            values,
            title="Preemptions per policy (mean, range = min..max over seeds)",
            ylabel="preemptions per run",
            errors=errors,
        )
    )
    return paths
