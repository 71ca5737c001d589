"""The scheduler policies in a real server, through the real CLI: a waiting job says why it
waits, a higher-priority job preempts a lower one (a real process stopped and re-queued), and
quotas set at run time survive a restart."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

import grpc

from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2_grpc as pb_grpc
from tests.integration.conftest import Server

SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]


def submit(server: Server, *args: str) -> str:
    done = server.cli("submit", "-q", *args, "--", *SLEEP)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_describe_explains_a_waiting_job_and_priority_preempts(
    server_factory: Callable[..., Server],
) -> None:
    server = server_factory(
        GPU_PLATFORM_STOP_GRACE_SECONDS="1", GPU_PLATFORM_SCHEDULER_PREEMPT_EXEMPT_SECONDS="0"
    )
    low = submit(server, "--gpus", "8", "--priority", "0")
    server.wait_job(low, lambda j: j["state"] == "RUNNING")

    big = submit(server, "--gpus", "8", "--priority", "0")  # same priority: cannot preempt
    server.wait_job(big, lambda j: (j.get("pending") or {}).get("code") == "capacity")
    described = server.cli("jobs", "describe", big)
    assert described.returncode == 0, described.stderr
    assert "Waiting:" in described.stdout and "capacity: needs 8 GPUs, 0 free" in described.stdout
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        got = pb_grpc.JobServiceStub(channel).GetJob(pb.GetJobRequest(id=big), timeout=10)
    assert got.pending.code == "capacity"
    assert got.pending.message.startswith("needs 8 GPUs, 0 free")

    urgent = submit(server, "--gpus", "8", "--priority", "100")
    server.wait_job(urgent, lambda j: j["state"] == "RUNNING")
    victim = server.wait_job(low, lambda j: j["state"] == "QUEUED")
    assert victim["reason"] == f"preempted: priority (for job {urgent})"
    assert victim["attempt"] == 1
    listed = json.loads(server.cli("jobs", "list", "-o", "json").stdout)
    waiting = {j["id"]: j["pending"]["code"] for j in listed if j["state"] == "QUEUED"}
    assert set(waiting) == {low, big}


def test_quotas_set_with_the_cli_are_enforced_and_survive_a_restart(
    server_factory: Callable[..., Server],
) -> None:
    server = server_factory()
    done = server.cli("quotas", "set", "team-a", "--gpus", "2", "--borrowing-limit", "0")
    assert done.returncode == 0, done.stderr
    jobs = [submit(server, "--gpus", "1", "--tenant", "team-a") for _ in range(3)]
    server.wait_job(jobs[1], lambda j: j["state"] == "RUNNING")
    third = server.wait_job(jobs[2], lambda j: (j.get("pending") or {}).get("code") == "quota")
    assert third["state"] == "QUEUED"

    server.stop()
    server.start()
    listed = json.loads(server.cli("quotas", "list", "-o", "json").stdout)
    assert [(q["tenant"], q["gpus"], q["borrowing_limit"]) for q in listed] == [("team-a", 2, 0)]
    gone = server.cli("quotas", "delete", "nobody")
    assert gone.returncode != 0 and "nobody" in gone.stderr


def test_a_tenant_without_a_quota_runs_on_idle_gpus_and_is_reclaimed(
    server_factory: Callable[..., Server],
) -> None:
    """No guarantee and no cap (`quotas delete --help`): `default` is not starved once another
    tenant has a quota, and that tenant takes its guarantee back when it needs it."""
    server = server_factory(
        GPU_PLATFORM_STOP_GRACE_SECONDS="1", GPU_PLATFORM_SCHEDULER_PREEMPT_EXEMPT_SECONDS="0"
    )
    done = server.cli("quotas", "set", "team-a", "--gpus", "4")
    assert done.returncode == 0, done.stderr
    free_rider = submit(server, "--gpus", "8", "--priority", "100")  # tenant `default`
    server.wait_job(free_rider, lambda j: j["state"] == "RUNNING")
    owner = submit(server, "--gpus", "4", "--tenant", "team-a")
    server.wait_job(owner, lambda j: j["state"] == "RUNNING")
    victim = server.wait_job(free_rider, lambda j: j["state"] == "QUEUED")
    assert victim["reason"] == f"preempted: reclaim (for job {owner})"
