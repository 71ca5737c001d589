"""`gpu-platform simulate --protocol arrivals`: read or build the cluster and the jobs, run
policies x seeds with the production scheduler on simulated time (with optional GPU and node
failure injection and production's preemption exempt time), write DIR/summary.json,
DIR/jobs.csv, DIR/utilization.csv and, with `plots`, the PNGs; return the table for the
terminal. A progress bar advances per (policy, seed) run."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Sequence
from pathlib import Path

from gpu_platform.adapters.inbound.cli import SimulateOptions
from gpu_platform.adapters.outbound.plots import require_matplotlib, write_arrivals_plots
from gpu_platform.adapters.outbound.traces import read_nodes, read_pod_jobs
from gpu_platform.application.simulation.arrivals import (
    ARRIVAL_POLICIES,
    JOB_COLUMNS,
    check_failure_flags,
    cluster_from_sizes,
    generated_jobs,
    job_rows,
    parse_generator_spec,
    parse_profile,
    run_arrivals,
    summary_json,
)
from gpu_platform.domain.model.node import Node
from gpu_platform.domain.simulation.arrivals import uniform_cluster
from gpu_platform.domain.simulation.workload import SimJob
from gpu_platform.infrastructure.progress import progress_bar

__all__ = ["arrivals_command"]


def _cluster(spec: str) -> list[Node]:
    profile = parse_profile(spec)
    if profile is not None:
        return uniform_cluster(*profile)
    path = Path(spec)
    if not path.is_file():
        raise ValueError(f"{spec}: neither a profile like 128x8 nor a node list file")
    nodes = cluster_from_sizes([(n.name, n.gpus) for n in read_nodes(path)])
    if not nodes:
        raise ValueError(f"{spec}: the cluster has no GPUs")
    return nodes


def _jobs(spec: str, cluster_gpus: int) -> Callable[[int], Sequence[SimJob]]:
    generator = parse_generator_spec(spec)
    if generator is not None:
        return generated_jobs(generator, cluster_gpus)
    path = Path(spec)
    if not path.is_file():
        raise ValueError(f"{spec}: neither a generator spec (generate[:n=..]) nor a pod list file")
    jobs = read_pod_jobs(path)
    if not jobs:
        raise ValueError(f"{spec}: no GPU pods in this trace")
    return lambda _seed: jobs


def arrivals_command(options: SimulateOptions) -> str:
    """Run and write the files; ValueError with a one-line reason on bad input."""
    policies = options.policies
    if policies == ("default",):
        policies = tuple(ARRIVAL_POLICIES)
    unknown = [p for p in policies if p not in ARRIVAL_POLICIES]
    if unknown:
        known = ", ".join(ARRIVAL_POLICIES)
        raise ValueError(f"unknown policy {', '.join(unknown)} (known: {known})")
    if not options.seeds:
        raise ValueError("no seeds given")
    if options.expected is not None or options.workers > 1:
        raise ValueError("--expected and --workers belong to the fgd protocol")
    check_failure_flags(
        options.fail_rate,
        options.repair_s,
        options.node_fail_rate,
        options.node_repair_s,
        options.preempt_exempt_s,
    )
    nodes = _cluster(str(options.cluster))
    gpus = sum(len(n.gpus) for n in nodes)
    jobs_for = _jobs(str(options.trace), gpus)
    if options.plots:
        require_matplotlib()  # fail before the runs, not after
    total = len(policies) * len(options.seeds)
    with progress_bar(total, "simulate", enabled=not options.quiet) as advance:
        runs = run_arrivals(
            nodes,
            jobs_for,
            policies,
            options.seeds,
            fail_rate=options.fail_rate,
            repair_s=options.repair_s,
            node_fail_rate=options.node_fail_rate,
            node_repair_s=options.node_repair_s,
            preempt_exempt_s=options.preempt_exempt_s,
            done=advance,
        )
    out = options.out
    out.mkdir(parents=True, exist_ok=True)
    summary = summary_json(runs)
    summary.update(
        cluster=str(options.cluster),
        trace=str(options.trace),
        gpus=gpus,
        fail_rate=options.fail_rate,
        repair_s=options.repair_s,
        node_fail_rate=options.node_fail_rate,
        node_repair_s=options.node_repair_s,
        preempt_exempt_s=options.preempt_exempt_s,
    )
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    with (out / "jobs.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, JOB_COLUMNS)
        writer.writeheader()
        for run in runs:
            writer.writerows(job_rows(run))
    with (out / "utilization.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(
            ["policy", "seed", "t_s", "allocated_gpus", "down_gpus", "pending", "running",
             "fragmented_gpus", "down_nodes"]
        )  # fmt: skip
        for run in runs:
            for s in run.detail.samples:
                w.writerow(
                    [
                        run.policy,
                        run.seed,
                        s.t_s,
                        s.allocated_gpus,
                        s.down_gpus,
                        s.pending,
                        s.running,
                        s.fragmented_gpus,
                        s.down_nodes,
                    ]
                )
    plots: list[Path] = write_arrivals_plots(out, runs) if options.plots else []
    failures = options.fail_rate > 0 or options.node_fail_rate > 0
    return _table(summary, failures, options.node_fail_rate > 0) + "".join(
        f"wrote {p}\n"
        for p in [out / "summary.json", out / "jobs.csv", out / "utilization.csv", *plots]
    )


def _table(summary: dict[str, object], failures: bool, nodes: bool) -> str:
    head = f"{'policy':<10} {'alloc %':>8} {'delay p50 s':>12} {'delay p99 s':>12} "
    head += f"{'JCT p50 s':>10} {'JCT p99 s':>10} {'preempt':>8}"
    if failures:
        head += f" {'failures':>8} {'lost GPU-h':>10}"
    if nodes:
        head += f" {'node fail':>9} {'requeued':>8}"
    lines = [head]
    policies = summary["policies"]
    assert isinstance(policies, dict)
    for name, s in policies.items():
        line = (
            f"{name:<10} {s['alloc_pct']:>8.2f} {s['queue_delay_p50_s']:>12.0f} "
            f"{s['queue_delay_p99_s']:>12.0f} {s['jct_p50_s']:>10.0f} {s['jct_p99_s']:>10.0f} "
            f"{s['preemptions']:>8.1f}"
        )
        if failures:
            line += f" {s['failures']:>8.1f} {s['lost_gpu_hours']:>10.1f}"
        if nodes:
            line += f" {s['node_failures']:>9.1f} {s['jobs_requeued_by_node_failure']:>8.1f}"
        lines.append(line)
    return "\n".join(lines) + "\n"
