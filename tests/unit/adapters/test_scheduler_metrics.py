"""Scheduler and API series after a scripted scenario (jobs run, fail, are cancelled, wait, and
one is moved off a GPU by an injected XID), scraped from /metrics and parsed as Prometheus
would; the real container with a fake runner and a manual clock, so values are exact."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from gpu_platform.adapters.outbound.observability.scheduler_metrics import (
    PrometheusSchedulerMetrics,
    failure_reason,
    preemption_reason,
)
from gpu_platform.domain.events import JobStarted, JobSubmitted
from gpu_platform.domain.model.job import Job, JobSpec, JobState
from gpu_platform.domain.placement import Unschedulable
from gpu_platform.testing.fakes import FakeJobRunner, ManualClock
from tests.unit.adapters.test_observability import rig, scrape

__all__ = ["rig"]

Series = dict[str, list[tuple[dict[str, str], float]]]


def wait_until(cond: Callable[[], bool]) -> None:
    for _ in range(1000):
        if cond():
            return
        time.sleep(0.01)
    raise AssertionError("condition not reached")


def value(series: Series, name: str, **labels: str) -> float:
    found = [v for lb, v in series.get(name, []) if all(lb.get(k) == x for k, x in labels.items())]
    assert len(found) == 1, (name, labels, series.get(name))
    return found[0]


def run_scenario(client: TestClient, runner: FakeJobRunner, clock: ManualClock) -> dict[str, str]:
    """a (team-a, 2 GPUs) runs 30 min, is moved off a GPU by XID 79 and runs 1 h more after a
    30 s recovery; b (team-b) fails after 30 min; c (team-a) is cancelled after 30 min;
    d (team-b, 8 GPUs, priority 5) never fits and waits."""

    def submit(tenant: str, gpus: int, *argv: str, priority: int = 0) -> str:
        body = {"command": list(argv), "gpus": gpus, "tenant": tenant, "priority": priority}
        r = client.post("/v1/jobs", json=body)
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    def state(job_id: str) -> str:
        return str(client.get(f"/v1/jobs/{job_id}").json()["state"])

    ids = {
        "a": submit("team-a", 2, "fake-forever"),
        "b": submit("team-b", 1, "fake-exit", "1"),
        "c": submit("team-a", 1, "fake-forever"),
    }
    wait_until(lambda: all(state(j) == "RUNNING" for j in ids.values()))
    clock.advance(1800)
    runner.deliver()  # b exits 1
    assert client.post(f"/v1/jobs/{ids['c']}/cancel").status_code == 200
    runner.deliver()  # c's process ends
    ids["d"] = submit("team-b", 8, "fake-forever", priority=5)
    gpu = client.get(f"/v1/jobs/{ids['a']}").json()["allocation"]["gpu_indices"][0]
    r = client.post("/v1/debug/inject", json={"script": f"xid 79 on gpu {gpu}"})
    assert r.status_code == 200, r.text
    wait_until(lambda: state(ids["a"]) == "QUEUED")
    wait_until(lambda: scrape(client).get("gpu_platform_placement_failures_total") is not None)
    clock.advance(30)
    runner.deliver()  # a's stopped attempt ends; it is placed again
    wait_until(lambda: client.get(f"/v1/jobs/{ids['a']}").json()["attempt"] == 2)
    wait_until(lambda: state(ids["a"]) == "RUNNING")
    clock.advance(3600)
    assert client.get("/v1/jobs/nope").status_code == 404
    return ids


def test_scheduler_series_match_the_scenario(rig) -> None:  # type: ignore[no-untyped-def]
    client, runner, clock = rig
    ids = run_scenario(client, runner, clock)
    s = scrape(client)

    assert value(s, "gpu_platform_queue_depth", tenant="team-b", priority="5") == 1
    assert len(s["gpu_platform_queue_depth"]) == 1
    assert value(s, "gpu_platform_placement_failures_total", reason="free_gpus") >= 1
    placed = "gpu_platform_placement_decision_microseconds_count"
    assert value(s, placed, outcome="placed") == 4  # a, b, c, then a again
    # The waiting job needs more GPUs than are free: the scheduler refuses it before asking
    # the engine, so it is a failure (above) without a latency sample.
    assert not [lb for lb, _ in s[placed] if lb["outcome"] == "unschedulable"]
    buckets = {lb["le"] for lb, _ in s["gpu_platform_placement_decision_microseconds_bucket"]}
    assert {"5.0", "100.0", "1000.0", "5000.0", "+Inf"} <= buckets

    moves = {
        (lb["from_state"], lb["to_state"]): v for lb, v in s["gpu_platform_job_transitions_total"]
    }
    assert moves == {
        ("PENDING", "QUEUED"): 4,
        ("QUEUED", "SCHEDULED"): 4,
        ("SCHEDULED", "RUNNING"): 4,
        ("RUNNING", "FAILED"): 1,
        ("RUNNING", "CANCELLED"): 1,
        ("RUNNING", "PREEMPTED"): 1,
        ("PREEMPTED", "QUEUED"): 1,
    }
    assert value(s, "gpu_platform_preemptions_total", reason="gpu_fault") == 1
    assert value(s, "gpu_platform_recovery_seconds_count") == 1
    assert value(s, "gpu_platform_recovery_seconds_sum") == 30.0
    assert value(s, "gpu_platform_recovery_seconds_bucket", le="10.0") == 0
    assert value(s, "gpu_platform_recovery_seconds_bucket", le="30.0") == 1

    # a holds 2 of 8 GPUs; 5 free on one node: only the 8-GPU share (15%) of the typical
    # task mix cannot use them
    assert value(s, "gpu_platform_gpu_allocation_ratio") == 0.25
    assert value(s, "gpu_platform_fragmentation_ratio") == pytest.approx(0.15)

    http = "gpu_platform_http_request_duration_seconds_count"
    assert value(s, http, method="POST", route="/v1/jobs", status="201") == 4
    assert value(s, http, method="POST", route="/v1/jobs/{job_id}/cancel", status="200") == 1
    assert value(s, http, method="GET", route="/v1/jobs/{job_id}", status="404") == 1
    assert value(s, http, method="POST", route="/v1/debug/inject", status="200") == 1
    routes = {lb["route"] for lb, _ in s[http]}
    assert not any(job_id in r for r in routes for job_id in ids.values())  # templates only

    hours = {lb["tenant"]: v for lb, v in s["gpu_platform_tenant_gpu_hours"]}
    assert hours == {"team-a": 3.5, "team-b": 0.5}  # a 2x(0.5h+1h), c 0.5h; b 0.5h
    usage = client.get("/v1/usage").json()
    assert usage["gpu_hours_by_tenant"] == hours
    assert {j["job_id"]: j["gpu_hours"] for j in usage["jobs"]}[ids["a"]] == 3.0


def test_an_idle_cluster_reports_no_queue_no_allocation_and_no_fragmentation(rig) -> None:  # type: ignore[no-untyped-def]
    client, _, _ = rig
    s = scrape(client)
    assert "gpu_platform_queue_depth" not in s
    assert value(s, "gpu_platform_gpu_allocation_ratio") == 0
    assert value(s, "gpu_platform_fragmentation_ratio") == 0


@given(
    st.lists(
        st.tuples(st.sampled_from(["free gpus", "cpu", "gpu model", "memory"]), st.integers(1, 9)),
        min_size=1,
        max_size=4,
        unique_by=lambda c: c[0],
    )
)
def test_a_failure_is_labelled_with_the_constraint_that_ruled_out_most_nodes(
    constraints: list[tuple[str, int]],
) -> None:
    label = failure_reason(Unschedulable("no placement", tuple(constraints)))
    worst = max(n for _, n in constraints)
    assert label in {what.replace(" ", "_") for what, n in constraints if n == worst}


def test_failure_and_preemption_labels_stay_bounded() -> None:
    assert failure_reason(Unschedulable("no placement for 1 x 1 GPU: no nodes")) == "no_nodes"
    assert failure_reason(Unschedulable("something new")) == "other"
    assert preemption_reason("gpu node-0:3: xid 79 (reboot)") == "gpu_fault"
    assert preemption_reason("node node-0: heartbeat lost") == "node_fault"
    assert preemption_reason("attempt 1 lost: control plane restarted") == "restart"
    assert preemption_reason("control plane shut down") == "shutdown"
    assert preemption_reason("anything else") == "other"


def test_a_submit_published_after_its_jobs_bind_and_start_counts_its_own_move() -> None:
    """The scheduler may bind and start an applied job before the submitting thread has
    published the submit: each event still counts the move it stands for."""
    history = tuple(
        (0.0, state, "") for state in (JobState.QUEUED, JobState.SCHEDULED, JobState.RUNNING)
    )
    job = Job("j1", JobSpec(command=("true",), gpus=0), JobState.RUNNING, 0.0, history=history)
    metrics = PrometheusSchedulerMetrics(CollectorRegistry())
    metrics.watch_jobs(lambda _: job, lambda: 0.0)
    metrics.publish(JobStarted("j1", 1))
    metrics.publish(JobSubmitted("j1", 0))
    counted = {
        (s.labels["from_state"], s.labels["to_state"]): s.value
        for family in metrics.transitions.collect()
        for s in family.samples
        if s.name.endswith("_total")
    }
    assert counted == {("PENDING", "QUEUED"): 1.0, ("SCHEDULED", "RUNNING"): 1.0}
