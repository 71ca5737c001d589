"""/metrics of a real `gpu-platform serve` after a scripted scenario with real processes: a job
completes, one fails, one is cancelled, one is moved off a GPU by an injected XID 79 and runs
again, one waits for GPUs it cannot get; parsed with prometheus-client's text parser."""

from __future__ import annotations

import sys
from collections.abc import Callable

import grpc
import httpx
from prometheus_client.parser import text_string_to_metric_families

from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2_grpc as pb_grpc
from tests.integration.conftest import Server, wait_for

SLEEPER = "import time; time.sleep(600)"
Series = dict[str, list[tuple[dict[str, str], float]]]


def scrape(server: Server) -> Series:
    out: Series = {}
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def one(series: Series, name: str, **labels: str) -> float:
    found = [v for lb, v in series.get(name, []) if all(lb.get(k) == x for k, x in labels.items())]
    assert len(found) == 1, (name, labels, series.get(name))
    return found[0]


def test_scheduler_series_of_a_running_server_match_a_scripted_scenario(
    server_factory: Callable[..., Server],
) -> None:
    server = server_factory()

    def submit(tenant: str, gpus: int, code: str, priority: int = 0) -> str:
        argv = ["submit", "-q", "--gpus", str(gpus), "--tenant", tenant]
        argv += ["--priority", str(priority), "--", sys.executable, "-c", code]
        r = server.cli(*argv)
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()

    ok = submit("team-a", 1, "pass")
    server.wait_job(ok, lambda j: j["state"] == "COMPLETED")
    failed = submit("team-b", 1, "raise SystemExit(3)")
    server.wait_job(failed, lambda j: j["state"] == "FAILED")
    cancelled = submit("team-a", 1, SLEEPER)
    server.wait_job(cancelled, lambda j: j["state"] == "RUNNING")
    assert server.cli("jobs", "cancel", cancelled).returncode == 0
    server.wait_job(cancelled, lambda j: j["state"] == "CANCELLED")
    moved = submit("team-b", 2, SLEEPER)
    first = server.wait_job(moved, lambda j: j["state"] == "RUNNING")
    gpu = first["allocation"]["gpu_indices"][0]
    r = server.cli("debug", "inject", f"xid 79 on gpu {gpu}", "--actor", "metrics-test")
    assert r.returncode == 0, r.stderr
    server.wait_job(moved, lambda j: j["state"] == "RUNNING" and j["attempt"] == 2)
    waiting = submit("team-c", 8, SLEEPER, priority=3)  # 1 GPU offline, 2 held: never fits
    assert wait_for(lambda: "gpu_platform_placement_failures_total" in scrape(server))
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        pb_grpc.ClusterServiceStub(channel).GetStatus(pb.GetStatusRequest(), timeout=10)
    s = scrape(server)

    moves = {
        (lb["from_state"], lb["to_state"]): v for lb, v in s["gpu_platform_job_transitions_total"]
    }
    assert moves == {
        ("PENDING", "QUEUED"): 5,
        ("QUEUED", "SCHEDULED"): 5,
        ("SCHEDULED", "RUNNING"): 5,
        ("RUNNING", "COMPLETED"): 1,
        ("RUNNING", "FAILED"): 1,
        ("RUNNING", "CANCELLED"): 1,
        ("RUNNING", "PREEMPTED"): 1,
        ("PREEMPTED", "QUEUED"): 1,
    }
    assert one(s, "gpu_platform_preemptions_total", reason="gpu_fault") == 1
    assert one(s, "gpu_platform_recovery_seconds_count") == 1
    assert one(s, "gpu_platform_recovery_seconds_sum") > 0
    assert one(s, "gpu_platform_queue_depth", tenant="team-c", priority="3") == 1
    assert one(s, "gpu_platform_placement_failures_total", reason="free_gpus") >= 1
    placed = one(s, "gpu_platform_placement_decision_microseconds_count", outcome="placed")
    assert placed == 5
    assert one(s, "gpu_platform_gpu_allocation_ratio") == 2 / 8
    assert one(s, "gpu_platform_fragmentation_ratio") == 0.15  # 5 free: only 8-GPU tasks miss
    finished = {lb["state"]: v for lb, v in s["gpu_platform_jobs_finished_total"]}
    assert finished == {"COMPLETED": 1, "FAILED": 1}

    http = "gpu_platform_http_request_duration_seconds_count"
    assert one(s, http, method="POST", route="/v1/jobs", status="201") == 5
    assert one(s, http, method="POST", route="/v1/jobs/{job_id}/cancel", status="200") == 1
    assert one(s, http, method="POST", route="/v1/debug/inject", status="200") == 1
    assert one(s, http, method="GET", route="/v1/jobs/{job_id}", status="200") >= 5
    assert all("{" in lb["route"] or lb["route"].count("/") <= 3 for lb, _ in s[http])
    grpc_count = "gpu_platform_grpc_request_duration_seconds_count"
    assert one(s, grpc_count, method="/gpu_platform.v1.ClusterService/GetStatus", code="OK") == 1

    usage = server.get("/v1/usage")
    by_job = {j["job_id"]: j["gpu_hours"] for j in usage["jobs"]}
    assert by_job.get(waiting, 0) == 0  # never ran
    assert by_job[moved] > 0 and by_job[cancelled] > 0
    hours = {lb["tenant"]: v for lb, v in s["gpu_platform_tenant_gpu_hours"]}
    assert set(hours) == {"team-a", "team-b"}
