"""The arrivals protocol's node failures and preemption exempt time: the settings reach every
run, the figures name them, bad values are refused naming the flag, and the exempt time ends
preempt's thrashing on a one-node cluster."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from gpu_platform.adapters.inbound.cli import SimulateOptions
from gpu_platform.application.simulation.arrivals import (
    ArrivalsRun,
    GeneratorSpec,
    generated_jobs,
    job_rows,
    run_arrivals,
    summary_json,
)
from gpu_platform.domain.simulation.arrivals import Outcome, uniform_cluster
from gpu_platform.domain.simulation.workload import SimJob, WorkloadParams, generate
from gpu_platform.infrastructure.config import Settings


def early_preemptions(runs: list[ArrivalsRun], exempt_s: float) -> int:
    """Preemptions of a job started less than `exempt_s` before (decide's own test)."""
    return sum(
        a.outcome == Outcome.PREEMPTED and not a.start_s <= a.end_s - exempt_s
        for r in runs
        for a in r.detail.attempts
    )


def test_preempt_on_two_nodes_evicts_young_jobs_without_the_exempt_time_not_with_it() -> None:
    def jobs_for(seed: int) -> list[SimJob]:
        return generate(100, 16, random.Random(seed))

    thrash = run_arrivals(uniform_cluster(2), jobs_for, ["preempt"], [1], preempt_exempt_s=0)
    calm = run_arrivals(uniform_cluster(2), jobs_for, ["preempt"], [1])  # default: 300 s
    assert early_preemptions(thrash, 300.0) > 0
    assert early_preemptions(calm, 300.0) == 0
    assert calm[0].detail.result.preemptions < thrash[0].detail.result.preemptions
    assert calm[0].detail.result.finished == thrash[0].detail.result.finished


def test_the_exempt_time_defaults_to_production_s_setting() -> None:
    production = Settings.model_fields["scheduler_preempt_exempt_seconds"].default
    options = SimulateOptions("arrivals", Path("8x8"), Path("generate"), (), (), Path("out"))
    assert options.preempt_exempt_s == production


def test_node_failures_are_counted_in_the_summary_and_the_job_rows() -> None:
    jobs_for = generated_jobs(GeneratorSpec(40, WorkloadParams()), 32)
    runs = run_arrivals(
        uniform_cluster(4), jobs_for, ["fifo"], [1, 2], node_fail_rate=0.1, node_repair_s=900
    )
    summary = summary_json(runs)["policies"]["fifo"]
    seeds = summary["seeds"]
    assert sum(s["node_failures"] for s in seeds) > 0
    assert sum(s["jobs_requeued_by_node_failure"] for s in seeds) > 0
    assert all(s["failures"] == 0 for s in seeds)  # only node failures were asked for
    for run, figures in zip(runs, seeds, strict=True):
        rows = job_rows(run)
        assert sum(r["node_failures"] for r in rows) == figures["jobs_requeued_by_node_failure"]
        assert all(r["failures"] >= r["node_failures"] for r in rows)


@pytest.mark.parametrize(
    ("kwargs", "flag"),
    [
        ({"node_fail_rate": -0.1}, "--node-fail-rate must be >= 0"),
        ({"node_fail_rate": float("nan")}, "--node-fail-rate must be >= 0"),
        ({"node_repair_s": 0.0}, "--node-repair-s must be > 0"),
        ({"preempt_exempt_s": -1.0}, "--preempt-exempt-s must be >= 0"),
    ],
)
def test_bad_node_failure_and_exempt_settings_are_refused_naming_the_flag(
    kwargs: dict[str, Any], flag: str
) -> None:
    jobs_for = generated_jobs(GeneratorSpec(5, WorkloadParams()), 8)
    with pytest.raises(ValueError, match=flag):
        run_arrivals(uniform_cluster(1), jobs_for, ["fifo"], [1], **kwargs)
