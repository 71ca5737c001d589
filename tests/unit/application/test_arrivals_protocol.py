"""The arrivals protocol's inputs (cluster profiles, generator specs, policy names), its runs
over policies x seeds, and the figures it derives (summary, per-job rows, tenant share)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_platform.application.simulation.arrivals import (
    ARRIVAL_POLICIES,
    GeneratorSpec,
    cluster_from_sizes,
    generated_jobs,
    job_rows,
    parse_generator_spec,
    parse_profile,
    run_arrivals,
    summary_json,
    tenant_share,
    utilization_grid,
)
from gpu_platform.domain.simulation.arrivals import uniform_cluster
from gpu_platform.domain.simulation.workload import WorkloadParams


def test_a_profile_names_nodes_times_gpus_and_anything_else_is_not_a_profile() -> None:
    assert parse_profile("128x8") == (128, 8)
    assert parse_profile("4X2") == (4, 2)
    for text in ("nodes.csv", "x8", "12x", "axb", "3x4x5", ""):
        assert parse_profile(text) is None
    with pytest.raises(ValueError, match="must be >= 1"):
        parse_profile("0x8")


def test_a_generator_spec_sets_the_job_count_and_workload_parameters() -> None:
    assert parse_generator_spec("generate") == GeneratorSpec(1000, WorkloadParams())
    spec = parse_generator_spec("generate:n=50, load=1.5,max_duration_s=3600")
    assert spec is not None
    assert spec.n == 50 and spec.params.load == 1.5 and spec.params.max_duration_s == 3600
    assert parse_generator_spec("pods.csv") is None
    assert parse_generator_spec("generated.csv") is None


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("generate:size=3", "bad item 'size=3'"),
        ("generate:n", "bad item 'n'"),
        ("generate:n=ten", "n must be a number"),
        ("generate:n=0", "n must be a whole number"),
        ("generate:n=2.5", "n must be a whole number"),
        ("generate:load=-1", "load must be > 0"),
    ],
)
def test_a_bad_generator_spec_is_refused_naming_the_item(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_generator_spec(text)


@given(n=st.integers(1, 10**6), load=st.floats(0.01, 10, allow_nan=False))
def test_any_valid_spec_round_trips(n: int, load: float) -> None:
    spec = parse_generator_spec(f"generate:n={n},load={load!r}")
    assert spec is not None and spec.n == n and spec.params.load == load


def test_node_sizes_become_nodes_and_gpu_less_nodes_are_left_out() -> None:
    nodes = cluster_from_sizes([("a", 8), ("cpu", 0), ("b", 2)])
    assert [(n.name, len(n.gpus)) for n in nodes] == [("a", 8), ("b", 2)]


def test_the_five_policies_are_nested_compositions() -> None:
    p = ARRIVAL_POLICIES
    assert list(p) == ["fifo", "priority", "drf", "backfill", "preempt"]
    assert not p["priority"].fair_share and p["drf"].fair_share
    assert p["backfill"].backfill and not p["backfill"].preemption
    assert p["preempt"].preemption and p["preempt"].backfill


def test_runs_cover_every_policy_and_seed_and_the_figures_add_up() -> None:
    nodes = uniform_cluster(2)
    jobs_for = generated_jobs(
        parse_generator_spec("generate:n=40") or GeneratorSpec(0, WorkloadParams()), 16
    )
    seen: list[str] = []
    runs = run_arrivals(nodes, jobs_for, ["fifo", "preempt"], [1, 2], done=seen.append)
    assert [(r.policy, r.seed) for r in runs] == [
        ("fifo", 1),
        ("fifo", 2),
        ("preempt", 1),
        ("preempt", 2),
    ]
    assert sorted(seen) == sorted(f"{r.policy} seed {r.seed}" for r in runs)
    assert runs[0].jobs == runs[2].jobs != runs[1].jobs  # jobs per seed, same for policies
    summary = summary_json(runs)
    assert summary["protocol"] == "arrivals"
    fifo = summary["policies"]["fifo"]
    assert [s["seed"] for s in fifo["seeds"]] == [1, 2]
    assert fifo["alloc_pct"] == pytest.approx(
        (runs[0].detail.result.alloc_pct + runs[1].detail.result.alloc_pct) / 2, abs=0.001
    )
    for key in ("queue_delay_p50_s", "queue_delay_p99_s", "jct_p50_s", "jct_p99_s", "preemptions"):
        assert key in fifo
    rows = job_rows(runs[0])
    assert len(rows) == 40 and all(r["outcome"] in ("finished", "") for r in rows)
    done = [r for r in rows if r["outcome"] == "finished"]
    assert all(r["queue_delay_s"] == pytest.approx(r["start_s"] - r["submit_s"]) for r in done)
    times, mean, low, high = utilization_grid(runs[:2], points=20)
    assert len(times) == len(mean) == 20
    assert all(lo <= m <= hi <= 100 for lo, m, hi in zip(low, mean, high, strict=True))


def test_tenant_share_spreads_each_attempt_over_the_bins_it_covers() -> None:
    runs = run_arrivals(
        uniform_cluster(2),
        generated_jobs(GeneratorSpec(30, WorkloadParams()), 16),
        ["fifo"],
        [4],
    )
    x, groups = tenant_share(runs[0], bins=10)
    width = runs[0].detail.result.end_s / 10
    assert len(x) == 10
    gpu_seconds = sum(a.gpus * (a.end_s - a.start_s) for a in runs[0].detail.attempts)
    assert sum(sum(v) for v in groups.values()) * width == pytest.approx(gpu_seconds)
    totals = [sum(v) for v in groups.values()]
    assert totals == sorted(totals, reverse=True)


def test_unknown_policies_and_bad_failure_settings_are_refused() -> None:
    jobs_for = generated_jobs(GeneratorSpec(5, WorkloadParams()), 8)
    with pytest.raises(ValueError, match="unknown policy nosuch"):
        run_arrivals(uniform_cluster(1), jobs_for, ["nosuch"], [1])
    with pytest.raises(ValueError, match="--fail-rate"):
        run_arrivals(uniform_cluster(1), jobs_for, ["fifo"], [1], fail_rate=-1)
    with pytest.raises(ValueError, match="--repair-s"):
        run_arrivals(uniform_cluster(1), jobs_for, ["fifo"], [1], fail_rate=1, repair_s=0)
