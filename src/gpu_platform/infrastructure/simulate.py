"""The `simulate` hook of the CLI: read an openb cluster and trace, run the FGD protocol over
policies x seeds (optionally in worker processes), write DIR/summary.json, DIR/runs.json
(per-seed figures) and DIR/curves.csv (allocation % at each arrived-demand % per seed), and
return a table for the terminal (with FGD's published means when `expected` is given)."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from functools import partial

from gpu_platform.adapters.inbound.cli import SimulateOptions
from gpu_platform.adapters.outbound.traces import read_nodes, read_tasks
from gpu_platform.application.simulation import published_means, run_protocol
from gpu_platform.domain.placement.fragmentation import TaskShape
from gpu_platform.domain.simulation import POLICIES, SimNode, SimResult, simulate

__all__ = ["simulate_command"]


def _one(
    nodes: Sequence[SimNode], tasks: Sequence[TaskShape], tune: float, job: tuple[str, int]
) -> SimResult:
    policy, seed = job
    return simulate(nodes, tasks, policy, seed, tune)


def simulate_command(options: SimulateOptions) -> str:
    """Run and write the files; ValueError with a one-line reason on bad input."""
    if options.protocol != "fgd":
        raise ValueError(f"unknown protocol {options.protocol!r} (known: fgd)")
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

    def parallel(jobs: Sequence[tuple[str, int]]) -> list[SimResult]:
        with ProcessPoolExecutor(max_workers=options.workers) as pool:
            return list(pool.map(partial(_one, nodes, tasks, options.tune), jobs))

    run = run_protocol(
        nodes,
        tasks,
        options.policies,
        options.seeds,
        options.tune,
        runner=parallel if options.workers > 1 else None,
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
    if options.expected is not None:
        with options.expected.open(newline="") as fh:
            published = published_means(csv.DictReader(fh), options.trace.stem)
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
    return "\n".join(lines) + "\n"
