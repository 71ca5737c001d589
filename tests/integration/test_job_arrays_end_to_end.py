"""Job arrays against a real `gpu-platform serve` (one-voter Raft, its own agent): a small
array runs real processes that print their task index, over the CLI, REST and gRPC; pending
tasks are grouped in `jobs list`; one task or the whole array is cancelled; bad specs are
refused naming `array` (422, INVALID_ARGUMENT, one CLI line and a non-zero exit)."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import httpx
import pytest

from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2_grpc as pb_grpc
from tests.integration.conftest import Server, wait_for

PRINT_INDEX = 'echo "task $ARRAY_TASK_ID slurm $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_TASK_COUNT"'


def ended(server: Server, array_id: str) -> Callable[[], bool]:
    def check() -> bool:
        states = server.get(f"/v1/arrays/{array_id}")["tasks_by_state"]
        return sum(states.get(s, 0) for s in ("COMPLETED", "FAILED", "CANCELLED")) == sum(
            states.values()
        )

    return check


def test_a_cli_array_runs_each_task_with_its_index_and_is_described_as_one(
    server_factory: Callable[..., Server],
) -> None:
    server = server_factory()
    r = server.cli(
        "submit", "-q", "--array", "0-6:3%2", "--gpus", "1", "--", "sh", "-c", PRINT_INDEX
    )
    assert r.returncode == 0, r.stderr
    array_id = r.stdout.strip()
    assert wait_for(ended(server, array_id), 60)
    for index in (0, 3, 6):
        task = server.get(f"/v1/jobs/{array_id}_{index}")
        assert task["state"] == "COMPLETED", task
        assert task["array"] == {"id": array_id, "index": index, "array": "0-6:3%2"}
        logs = httpx.get(f"{server.url}/v1/jobs/{array_id}_{index}/logs", timeout=10).text
        assert logs == f"task {index} slurm {index} of 3\n"
    described = server.cli("jobs", "describe", array_id)
    assert described.returncode == 0, described.stderr
    assert "Indices:        0-6:3%2" in described.stdout
    assert "By state:       3 COMPLETED" in described.stdout


def test_pending_tasks_are_one_row_and_cancel_takes_one_task_or_all(
    server_factory: Callable[..., Server],
) -> None:
    server = server_factory()
    r = server.cli("submit", "-q", "--array", "0-9%2", "--gpus", "1", "--", "sleep", "600")
    array_id = r.stdout.strip()
    assert wait_for(
        lambda: server.get(f"/v1/arrays/{array_id}")["tasks_by_state"].get("RUNNING") == 2
    )
    listed = server.cli("jobs", "list")
    assert f"{array_id}_[2-9%2]" in listed.stdout, listed.stdout
    assert f"{array_id}_0 " in listed.stdout and f"{array_id}_1 " in listed.stdout
    assert "array_throttle" in listed.stdout
    one = server.cli("jobs", "cancel", f"{array_id}_5")
    assert one.returncode == 0 and "CANCELLED" in one.stdout, one
    assert server.get(f"/v1/jobs/{array_id}_5")["state"] == "CANCELLED"
    assert server.get(f"/v1/jobs/{array_id}_6")["state"] == "QUEUED"
    everything = server.cli("jobs", "cancel", array_id)
    assert everything.returncode == 0, everything.stderr
    assert wait_for(ended(server, array_id), 30)
    assert server.get(f"/v1/arrays/{array_id}")["tasks_by_state"] == {"CANCELLED": 10}


def test_rest_and_grpc_create_arrays_and_refuse_bad_ones_naming_the_field(
    server_factory: Callable[..., Server],
) -> None:
    server = server_factory()
    made = httpx.post(
        f"{server.url}/v1/arrays",
        json={"command": ["sh", "-c", PRINT_INDEX], "array": "1,3,5"},
        timeout=10,
    )
    assert made.status_code == 201, made.text
    array_id = made.json()["id"]
    assert made.json()["count"] == 3
    assert wait_for(ended(server, array_id), 60)
    assert server.get(f"/v1/jobs/{array_id}_3")["state"] == "COMPLETED"
    for bad in ("5-3", "0-2000000", "0-3%0", ""):
        refused = httpx.post(
            f"{server.url}/v1/arrays", json={"command": ["true"], "array": bad}, timeout=10
        )
        assert refused.status_code == 422, (bad, refused.text)
        assert "array" in refused.json()["detail"], refused.json()
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        jobs = pb_grpc.JobServiceStub(channel)
        request = pb.SubmitArrayRequest(
            job=pb.SubmitJobRequest(command=["sh", "-c", PRINT_INDEX]), array="0-1"
        )
        array = jobs.SubmitArray(request, timeout=10)
        assert (array.count, array.array) == (2, "0-1")
        task = jobs.GetJob(pb.GetJobRequest(id=f"{array.id}_1"), timeout=10)
        assert (task.array_id, task.array_index) == (array.id, 1)
        assert jobs.GetArray(pb.GetArrayRequest(id=array.id), timeout=10).id == array.id
        with pytest.raises(grpc.RpcError) as caught:
            jobs.SubmitArray(
                pb.SubmitArrayRequest(job=pb.SubmitJobRequest(command=["true"]), array="9-1"),
                timeout=10,
            )
        assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert caught.value.details().startswith("array: ")
        cancelled = jobs.CancelArray(pb.CancelArrayRequest(id=array.id), timeout=10)
        assert cancelled.id == array.id
    r = server.cli("submit", "--array", "3-1", "--", "true")
    assert r.returncode == 6 and "array: range 3-1 runs backwards" in r.stderr, r
    assert len(r.stderr.strip().splitlines()) == 1
