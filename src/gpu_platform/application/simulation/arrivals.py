"""The arrivals protocol over policies x seeds: inputs parsed, runs made, figures summarised.

Inputs: a cluster profile `NxG` (N nodes of G GPUs) or node sizes read from a node list; a
generator spec `generate[:key=value,...]` (keys in `GENERATOR_KEYS`) or jobs read from a trace.
Policies are named compositions of `SchedulerPolicy` (`ARRIVAL_POLICIES`, docs/simulation.md).
Everything here is deterministic for a seed: the generator and the failure draws use
`random.Random` seeded from it.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_platform.domain.model.node import Node
from gpu_platform.domain.scheduling import QueueOrder, SchedulerPolicy
from gpu_platform.domain.simulation.arrivals import (
    ArrivalsDetail,
    Failures,
    Outcome,
    simulate_detailed,
)
from gpu_platform.domain.simulation.arrivals_model import sim_node
from gpu_platform.domain.simulation.workload import SimJob, WorkloadParams, generate

__all__ = [
    "ARRIVAL_POLICIES",
    "GENERATOR_KEYS",
    "JOB_COLUMNS",
    "ArrivalsRun",
    "GeneratorSpec",
    "check_failure_flags",
    "cluster_from_sizes",
    "generated_jobs",
    "job_rows",
    "parse_generator_spec",
    "parse_profile",
    "run_arrivals",
    "samples_of",
    "summary_json",
    "tenant_share",
    "utilization_grid",
]


def _composed(
    *, fair_share: bool = False, backfill: bool = False, preemption: bool = False
) -> SchedulerPolicy:
    """Priority order with aging (1 point per 10 min waited, a 6 h bound) plus the parts."""
    return SchedulerPolicy(
        order=QueueOrder.PRIORITY,
        aging_rate=1 / 600,
        aging_bound_s=6 * 3600.0,
        fair_share=fair_share,
        backfill=backfill,
        preemption=preemption,
    )


ARRIVAL_POLICIES: dict[str, SchedulerPolicy] = {
    "fifo": SchedulerPolicy(),
    "priority": _composed(),
    "drf": _composed(fair_share=True),
    "backfill": _composed(fair_share=True, backfill=True),
    "preempt": _composed(fair_share=True, backfill=True, preemption=True),
}

# generator spec key -> (WorkloadParams field or "n", converter)
GENERATOR_KEYS: dict[str, Callable[[str], float]] = {
    "n": float,
    "load": float,
    "duration_mu": float,
    "duration_sigma": float,
    "max_duration_s": float,
    "no_limit_fraction": float,
}
_DEFAULT_JOBS = 1000


@dataclass(frozen=True, slots=True)
class GeneratorSpec:
    """`n` synthetic jobs drawn with `params` (see `workload.generate`)."""

    n: int
    params: WorkloadParams


def parse_profile(text: str) -> tuple[int, int] | None:
    """`"128x8"` -> (128, 8); None when `text` is not of that form (it may be a file);
    ValueError when it is but a count is below 1."""
    nodes, sep, gpus = text.lower().partition("x")
    if not sep or not nodes.isdigit() or not gpus.isdigit():
        return None
    if int(nodes) < 1 or int(gpus) < 1:
        raise ValueError(f"cluster profile {text!r}: nodes and GPUs per node must be >= 1")
    return int(nodes), int(gpus)


def parse_generator_spec(text: str) -> GeneratorSpec | None:
    """`generate` or `generate:n=2000,load=1.2` -> a spec; None when `text` does not start
    with `generate` (it may be a file); ValueError naming a bad key or value."""
    head, _, rest = text.partition(":")
    if head != "generate":
        return None
    values: dict[str, float] = {}
    for item in (i.strip() for i in rest.split(",")):
        if not item:
            continue
        key, eq, raw = item.partition("=")
        key = key.strip()
        if not eq or key not in GENERATOR_KEYS:
            known = ", ".join(GENERATOR_KEYS)
            raise ValueError(f"generator spec {text!r}: bad item {item!r} (keys: {known})")
        try:
            values[key] = GENERATOR_KEYS[key](raw.strip())
        except ValueError:
            raise ValueError(f"generator spec {text!r}: {key} must be a number") from None
    n = values.pop("n", _DEFAULT_JOBS)
    if n < 1 or n != int(n):
        raise ValueError(f"generator spec {text!r}: n must be a whole number >= 1")
    if values.get("load", 1.0) <= 0:
        raise ValueError(f"generator spec {text!r}: load must be > 0")
    params: Any = dataclasses.replace  # the keys above are all float fields
    return GeneratorSpec(int(n), params(WorkloadParams(), **values))


def cluster_from_sizes(sizes: Sequence[tuple[str, int]], nodes_per_rack: int = 16) -> list[Node]:
    """Nodes named and sized as given ((name, GPUs)); nodes without GPUs are left out. Same
    shape as `uniform_cluster` otherwise (80 GiB GPUs, two NUMA nodes, racks of 16)."""
    present = (s for s in sizes if s[1] > 0)
    return [
        sim_node(name, i, gpus, "sim", nodes_per_rack) for i, (name, gpus) in enumerate(present)
    ]


@dataclass(frozen=True, slots=True)
class ArrivalsRun:
    """One (policy, seed) run: its jobs and what happened to them."""

    policy: str
    seed: int
    jobs: tuple[SimJob, ...]
    detail: ArrivalsDetail


def run_arrivals(
    nodes: Sequence[Node],
    jobs_for: Callable[[int], Sequence[SimJob]],
    policies: Sequence[str],
    seeds: Sequence[int],
    *,
    fail_rate: float = 0.0,
    repair_s: float = 3600.0,
    node_fail_rate: float = 0.0,
    node_repair_s: float = 3600.0,
    preempt_exempt_s: float = 300.0,
    done: Callable[[str], None] = lambda _label: None,
) -> list[ArrivalsRun]:
    """Every (policy, seed) in that order; `jobs_for(seed)` gives the jobs (the same for
    every policy of a seed); `done(label)` after each run. GPU failures per GPU-hour and node
    failures per node-hour (0 = none) with their repair times; `preempt_exempt_s` is every
    policy's `min_runtime_s` (production's `scheduler_preempt_exempt_seconds`). ValueError for
    an unknown policy or a bad number, naming its flag."""
    unknown = [p for p in policies if p not in ARRIVAL_POLICIES]
    if unknown:
        known = ", ".join(ARRIVAL_POLICIES)
        raise ValueError(f"unknown policy {', '.join(unknown)} (known: {known})")
    check_failure_flags(fail_rate, repair_s, node_fail_rate, node_repair_s, preempt_exempt_s)
    runs = []
    for seed in seeds:
        jobs = tuple(jobs_for(seed))
        for policy in policies:
            failures = None
            if fail_rate > 0 or node_fail_rate > 0:
                failures = Failures(
                    fail_rate,
                    repair_s,
                    seed,
                    node_rate_per_hour=node_fail_rate,
                    node_repair_s=node_repair_s,
                )
            rules = dataclasses.replace(ARRIVAL_POLICIES[policy], min_runtime_s=preempt_exempt_s)
            detail = simulate_detailed(nodes, jobs, rules, failures=failures)
            runs.append(ArrivalsRun(policy, seed, jobs, detail))
            done(f"{policy} seed {seed}")
    order = {p: i for i, p in enumerate(policies)}
    return sorted(runs, key=lambda r: (order[r.policy], seeds.index(r.seed)))


def check_failure_flags(
    fail_rate: float,
    repair_s: float,
    node_fail_rate: float,
    node_repair_s: float,
    preempt_exempt_s: float,
) -> None:
    """ValueError naming the first bad flag: rates and the exempt time >= 0, repairs > 0."""
    for flag, value, positive in (
        ("--fail-rate", fail_rate, False),
        ("--repair-s", repair_s, True),
        ("--node-fail-rate", node_fail_rate, False),
        ("--node-repair-s", node_repair_s, True),
        ("--preempt-exempt-s", preempt_exempt_s, False),
    ):
        if positive and not value > 0:
            raise ValueError(f"{flag} must be > 0, got {value}")
        if not positive and not value >= 0:
            raise ValueError(f"{flag} must be >= 0, got {value}")


def generated_jobs(spec: GeneratorSpec, cluster_gpus: int) -> Callable[[int], list[SimJob]]:
    """`jobs_for(seed)` drawing `spec` for a cluster of `cluster_gpus` GPUs."""
    return lambda seed: generate(spec.n, cluster_gpus, random.Random(seed), spec.params)


JOB_COLUMNS = (
    "policy",
    "seed",
    "id",
    "tenant",
    "gpus",
    "tasks",
    "submit_s",
    "start_s",
    "end_s",
    "queue_delay_s",
    "preemptions",
    "failures",
    "outcome",
    "node_failures",
)


def job_rows(run: ArrivalsRun) -> list[dict[str, Any]]:
    """One row per job (`JOB_COLUMNS`): start = first start, end = completion (empty when
    the job never ran or never finished), preemptions and failures it suffered, and how it
    ended (`finished`, `abandoned` after too many failures, or empty: never ended);
    `failures` counts GPU and node failures, `node_failures` the node failures alone."""
    first: dict[str, float] = {}
    end: dict[str, float] = {}
    outcome: dict[str, str] = {}
    count: dict[tuple[str, str], int] = {}
    for a in run.detail.attempts:
        first[a.job_id] = min(first.get(a.job_id, a.start_s), a.start_s)
        if a.outcome == Outcome.FINISHED:
            end[a.job_id] = a.end_s
        if a.outcome in (Outcome.FINISHED, Outcome.ABANDONED):
            outcome[a.job_id] = a.outcome
        count[(a.job_id, a.outcome)] = count.get((a.job_id, a.outcome), 0) + 1
    rows = []
    for j in run.jobs:
        start = first.get(j.id)
        rows.append(
            {
                "policy": run.policy,
                "seed": run.seed,
                "id": j.id,
                "tenant": j.tenant,
                "gpus": j.gpus,
                "tasks": j.tasks,
                "submit_s": j.submit_s,
                "start_s": "" if start is None else start,
                "end_s": end.get(j.id, ""),
                "queue_delay_s": "" if start is None else round(start - j.submit_s, 3),
                "preemptions": count.get((j.id, Outcome.PREEMPTED), 0),
                "failures": count.get((j.id, Outcome.FAILED), 0)
                + count.get((j.id, Outcome.NODE_FAILED), 0)
                + count.get((j.id, Outcome.ABANDONED), 0),
                "outcome": outcome.get(j.id, ""),
                "node_failures": count.get((j.id, Outcome.NODE_FAILED), 0),
            }
        )
    return rows


def _mean(values: Sequence[float]) -> float:
    return round(sum(values) / len(values), 3) if values else 0.0


def summary_json(runs: Sequence[ArrivalsRun]) -> dict[str, Any]:
    """`{"protocol": "arrivals", "policies": {NAME: figures}}`: per policy the means over its
    seeds of each figure, and `seeds` with each seed's own figures."""
    policies: dict[str, Any] = {}
    for policy in dict.fromkeys(r.policy for r in runs):
        mine = [r for r in runs if r.policy == policy]
        per_seed = [_figures(r) for r in mine]
        means = {k: _mean([s[k] for s in per_seed]) for k in per_seed[0] if k != "seed"}
        policies[policy] = {**means, "seeds": per_seed}
    return {"protocol": "arrivals", "policies": policies}


def _figures(run: ArrivalsRun) -> dict[str, Any]:
    r, d = run.detail.result, run.detail
    return {
        "seed": run.seed,
        "alloc_pct": r.alloc_pct,
        "queue_delay_p50_s": round(r.queue_delay_p50_s, 3),
        "queue_delay_p99_s": round(r.queue_delay_p99_s, 3),
        "jct_p50_s": round(r.jct_p50_s, 3),
        "jct_p99_s": round(r.jct_p99_s, 3),
        "preemptions": r.preemptions,
        "jobs": r.jobs,
        "finished": r.finished,
        "failures": d.failures,
        "lost_gpu_hours": d.lost_gpu_hours,
        "down_gpu_hours": d.down_gpu_hours,
        "abandoned": d.abandoned,
        "node_failures": d.node_failures,
        "jobs_requeued_by_node_failure": d.jobs_requeued_by_node_failure,
        "end_s": round(r.end_s, 3),
    }


def utilization_grid(
    runs: Sequence[ArrivalsRun], points: int = 200, what: str = "allocated_gpus"
) -> tuple[list[float], list[float], list[float], list[float]]:
    """A sample field (`allocated_gpus`, or `fragmented_gpus`) as % of the cluster's GPUs on
    `points` evenly spaced times over the longest run: (times, mean, min, max) over `runs`
    (a run holds its last value after it ended)."""
    end = max(r.detail.result.end_s for r in runs)
    times = [end * i / (points - 1) for i in range(points)]
    curves = []
    for r in runs:
        samples, gpus = r.detail.samples, r.detail.gpus
        curve, k, value = [], 0, 0.0
        for t in times:
            while k < len(samples) and samples[k].t_s <= t:
                value = 100.0 * getattr(samples[k], what) / gpus
                k += 1
            curve.append(value)
        curves.append(curve)
    cols = list(zip(*curves, strict=True))
    return times, [sum(c) / len(c) for c in cols], [min(c) for c in cols], [max(c) for c in cols]


def tenant_share(run: ArrivalsRun, bins: int = 50) -> tuple[list[float], dict[str, list[float]]]:
    """Mean GPUs held by each tenant in each of `bins` equal time bins (bin centres, then
    per tenant the values), from the run's attempts; tenants by total GPU-time, largest first."""
    end = run.detail.result.end_s or 1.0
    width = end / bins
    per: dict[str, list[float]] = {}
    for a in run.detail.attempts:
        row = per.setdefault(a.tenant, [0.0] * bins)
        first, last = int(a.start_s // width), min(bins - 1, int(a.end_s // width))
        for b in range(first, last + 1):
            lo, hi = max(a.start_s, b * width), min(a.end_s, (b + 1) * width)
            if hi > lo:
                row[b] += a.gpus * (hi - lo) / width
    ranked = sorted(per, key=lambda t: -sum(per[t]))
    return [width * (b + 0.5) for b in range(bins)], {t: per[t] for t in ranked}


def samples_of(values: Mapping[str, Sequence[ArrivalsRun]], what: str) -> dict[str, list[float]]:
    """Per policy, every job's queueing delay (`what="delay"`) or JCT (`"jct"`) in seconds
    over all its seeds (jobs that never started or finished are left out)."""
    out: dict[str, list[float]] = {}
    for policy, runs in values.items():
        xs: list[float] = []
        for run in runs:
            for row in job_rows(run):
                if what == "delay" and row["queue_delay_s"] != "":
                    xs.append(float(row["queue_delay_s"]))
                elif what == "jct" and row["end_s"] != "":
                    xs.append(float(row["end_s"]) - float(row["submit_s"]))
        out[policy] = xs
    return out
