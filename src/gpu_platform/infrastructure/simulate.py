"""The `simulate` hook of the CLI (`--protocol arrivals` is in `simulate_arrivals.py`): read an
openb cluster and trace, run the FGD protocol over
policies x seeds (optionally in worker processes), write DIR/summary.json, DIR/runs.json
(per-seed figures) and DIR/curves.csv (allocation % at each arrived-demand % per seed), and
return a table for the terminal (with FGD's published means when `expected` is given).
`plots` also writes PNGs (adapters/outbound/plots); a progress bar on a terminal advances as
each (policy, seed) run finishes, unless `quiet`."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict
from pathlib import Path

from gpu_platform.adapters.inbound.cli import SimulateOptions
from gpu_platform.adapters.outbound.plots import require_matplotlib, write_fgd_plots
from gpu_platform.adapters.outbound.traces import read_nodes, read_tasks
from gpu_platform.application.simulation import published_curves, published_means, run_protocol
from gpu_platform.domain.placement.fragmentation import TaskShape
from gpu_platform.domain.simulation import POLICIES, SimNode, SimResult, simulate
from gpu_platform.infrastructure.progress import progress_bar
from gpu_platform.infrastructure.simulate_arrivals import arrivals_command

__all__ = ["simulate_command"]


def _one(
    nodes: Sequence[SimNode], tasks: Sequence[TaskShape], tune: float, job: tuple[str, int]
) -> SimResult:
    policy, seed = job
    return simulate(nodes, tasks, policy, seed, tune)


def simulate_command(options: SimulateOptions) -> str:
    """Run and write the files; ValueError with a one-line reason on bad input."""
    if options.protocol == "arrivals":
        return arrivals_command(options)
    if options.protocol != "fgd":
        raise ValueError(f"unknown protocol {options.protocol!r} (known: fgd, arrivals)")
    unknown = [p for p in options.policies if p not in POLICIES]
    if unknown:
        raise ValueError(f"unknown policy {', '.join(unknown)} (known: {', '.join(POLICIES)})")
    for path in (options.cluster, options.trace):
        if not path.is_file():
            raise ValueError(f"{path}: no such file")
    nodes = read_nodes(options.cluster)
    tasks = read_tasks(options.trace)
    if not sum(n.gpus for n in nodes):
        raise ValueError(f"{options.cluster}: the cluster has no GPUs")

    means_csv, curves_csv = _expected_files(options.expected)
    if options.plots:
        require_matplotlib()  # fail before the runs, not after
    total = len(options.policies) * len(options.seeds)
    with progress_bar(total, "simulate", enabled=not options.quiet) as advance:
        run = run_protocol(
            nodes,
            tasks,
            options.policies,
            options.seeds,
            options.tune,
            runner=_runner(nodes, tasks, options.tune, options.workers, advance),
        )
    options.out.mkdir(parents=True, exist_ok=True)
    summary = run.summary_json()
    summary.update(
        protocol="fgd",
        cluster=str(options.cluster),
        trace=str(options.trace),
        tune=options.tune,
    )
    (options.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    runs = [{k: v for k, v in asdict(r).items() if k != "curve"} for r in run.results]
    (options.out / "runs.json").write_text(json.dumps(runs, indent=2) + "\n")
    with (options.out / "curves.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        top = len(run.results[0].curve)
        writer.writerow(["policy", "seed", *range(top)])
        for r in run.results:
            writer.writerow([r.policy, r.seed, *r.curve])
    published: dict[str, dict[str, float]] = {}
    if means_csv is not None:
        with means_csv.open(newline="") as fh:
            published = published_means(csv.DictReader(fh), options.trace.stem)
    plots: list[Path] = []
    if options.plots:
        plots = _plots(options, run.results, published, curves_csv)
    lines = [f"{'policy':<22} {'alloc@100%':>10} {'alloc@130%':>10} {'unalloc GPUs':>12}"]
    for name, s in run.summary:
        lines.append(
            f"{name:<22} {s.alloc_pct_at_100:>10.2f} {s.alloc_pct_at_130:>10.2f} "
            f"{s.unallocated_gpus_at_130:>12.1f}"
        )
    for name, p in published.items():
        lines.append(
            f"{'published ' + name:<22} {p['alloc_pct_at_100']:>10.2f} "
            f"{p['alloc_pct_at_130']:>10.2f} {p['unallocated_gpus_at_130']:>12.1f}"
        )
    lines.append(f"wrote {options.out / 'summary.json'}")
    lines.extend(f"wrote {p}" for p in plots)
    return "\n".join(lines) + "\n"


def _runner(
    nodes: Sequence[SimNode],
    tasks: Sequence[TaskShape],
    tune: float,
    workers: int,
    advance: Callable[[str], None],
) -> Callable[[Sequence[tuple[str, int]]], list[SimResult]]:
    """Run the jobs in order (in-process, or in `workers` processes), calling `advance` as
    each one finishes; results come back in job order."""

    def run(jobs: Sequence[tuple[str, int]]) -> list[SimResult]:
        if workers <= 1:
            done = []
            for job in jobs:
                done.append(_one(nodes, tasks, tune, job))
                advance(f"{job[0]} seed {job[1]}")
            return done
        results: dict[int, SimResult] = {}
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(_one, nodes, tasks, tune, job): i for i, job in enumerate(jobs)}
            for future in as_completed(futures):
                i = futures[future]
                results[i] = future.result()
                advance(f"{jobs[i][0]} seed {jobs[i][1]}")
        return [results[i] for i in range(len(jobs))]

    return run


_MEANS_CSV = "DERIVED_summary_by_workload_policy.csv"
_CURVES_CSV = "analysis_allo_discrete.csv"


def _expected_files(expected: Path | None) -> tuple[Path | None, Path | None]:
    """The published means CSV and the per-seed curves CSV beside it (if there): `expected`
    is the means CSV itself or the expected-results folder holding both."""
    if expected is None:
        return None, None
    if expected.is_dir():
        means = expected / _MEANS_CSV
        if not means.is_file():
            raise ValueError(f"{expected}: no {_MEANS_CSV} in this folder")
    elif expected.is_file():
        means = expected
    else:
        raise ValueError(f"{expected}: no such file or folder")
    curves = means.parent / _CURVES_CSV
    return means, curves if curves.is_file() else None


def _plots(
    options: SimulateOptions,
    results: Sequence[SimResult],
    published: dict[str, dict[str, float]],
    curves_csv: Path | None,
) -> list[Path]:
    curves: dict[str, list[tuple[float, ...]]] = {}
    if curves_csv is not None:
        with curves_csv.open(newline="") as fh:
            curves = published_curves(csv.DictReader(fh), options.trace.stem)
    return write_fgd_plots(
        options.out,
        results,
        options.policies,
        workload=options.trace.stem,
        published=curves,
        published_unallocated={k: v["unallocated_gpus_at_130"] for k, v in published.items()},
    )
