"""The gRPC API on a real loopback server: the same scenarios as REST, with the same answers
(parity), streaming WatchJobs, health and reflection; and the generated code is reproducible."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from dependency_injector import providers
from fastapi.testclient import TestClient
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2_grpc as pb_grpc
from gpu_platform.domain.model.node import Inventory
from gpu_platform.infrastructure.config import Settings
from gpu_platform.infrastructure.container import Container
from gpu_platform.testing.fakes import (
    FakeJobRunner,
    InMemoryGpuDiscovery,
    InMemoryJobStore,
    ManualClock,
    SequentialJobIds,
)

ROOT = Path(__file__).resolve().parents[3]


class Both:
    def __init__(self, rest: TestClient, channel: grpc.Channel, runner: FakeJobRunner) -> None:
        self.rest, self.runner = rest, runner
        self.jobs = pb_grpc.JobServiceStub(channel)
        self.cluster = pb_grpc.ClusterServiceStub(channel)
        self.channel = channel

    def wait_state(self, job_id: str, state: str) -> pb.Job:
        for _ in range(500):
            job = self.jobs.GetJob(pb.GetJobRequest(id=job_id), timeout=5)
            if job.state == state:
                return job
            self.runner.deliver()
            time.sleep(0.01)
        raise AssertionError(f"{job_id} never reached {state}")


@pytest.fixture(params=[0, 2], ids=["direct", "api-workers"])
def both(request: pytest.FixtureRequest, inventory: Inventory) -> Iterator[Both]:
    """Each scenario twice: the server on the port itself, and behind two API workers
    (real processes relaying to its Unix socket: the answers must not differ)."""
    workers = int(request.param)
    with tempfile.TemporaryDirectory(prefix="grpc-") as tmp:  # a short Unix socket path
        yield from _both(Path(tmp), inventory, workers)


def _both(data_dir: Path, inventory: Inventory, workers: int) -> Iterator[Both]:
    container = Container(
        settings=Settings(
            server_id=0,
            data_dir=data_dir,
            schedule_interval_seconds=0.05,
            grpc_port=0,
            api_workers=workers,
        )
    )
    runner = FakeJobRunner()
    container.adapters.discovery.override(providers.Object(InMemoryGpuDiscovery(inventory)))
    container.adapters.store.override(providers.Object(InMemoryJobStore()))
    container.adapters.runner.override(providers.Object(runner))
    container.adapters.clock.override(providers.Object(ManualClock()))
    container.adapters.ids.override(providers.Object(SequentialJobIds()))
    container.init_resources()
    server = container.grpc_server()
    assert server is not None
    try:
        with TestClient(container.rest_app()) as rest, grpc.insecure_channel(server.address) as ch:
            yield Both(rest, ch, runner)
    finally:
        container.shutdown_resources()


def rest_job(both: Both, job_id: str) -> dict[str, object]:
    return both.rest.get(f"/v1/jobs/{job_id}").json()  # type: ignore[no-any-return]


def test_a_job_submitted_over_grpc_is_the_same_job_over_rest(both: Both) -> None:
    job = both.jobs.SubmitJob(
        pb.SubmitJobRequest(
            command=["fake-exit", "0", "hi"], gpus=2, tenant="team-a", env={"K": "v"}
        ),
        timeout=5,
    )
    done = both.wait_state(job.id, "COMPLETED")
    r = rest_job(both, job.id)
    assert (r["state"], r["tenant"], r["gpus"], r["exit_code"]) == (done.state, "team-a", 2, 0)
    assert r["allocation"]["gpu_indices"] == list(done.allocation.gpu_indices) == [0, 1]  # type: ignore[index]
    assert [h["state"] for h in r["history"]] == [h.state for h in done.history]  # type: ignore[union-attr]
    logs = both.jobs.GetLogs(pb.GetLogsRequest(id=job.id), timeout=5)
    assert logs.data.decode() == both.rest.get(f"/v1/jobs/{job.id}/logs").text == "hi\n"
    listed = both.jobs.ListJobs(pb.ListJobsRequest(state="COMPLETED"), timeout=5)
    assert [j.id for j in listed.jobs] == [
        j["id"] for j in both.rest.get("/v1/jobs", params={"state": "COMPLETED"}).json()
    ]


@pytest.mark.parametrize(
    ("rest_body", "grpc_request", "field"),
    [
        ({"command": ["x"], "gpus": 9}, pb.SubmitJobRequest(command=["x"], gpus=9), "gpus"),
        ({"command": [], "gpus": 1}, pb.SubmitJobRequest(command=[], gpus=1), "command"),
        ({"command": ["x"], "gpus": -1}, pb.SubmitJobRequest(command=["x"], gpus=-1), "gpus"),
        # one validator for both (issue 19 item 9): env keys, NUL bytes, non-finite numbers
        (
            {"command": ["x"], "env": {"1BAD": "v"}},
            pb.SubmitJobRequest(command=["x"], env={"1BAD": "v"}),
            "env",
        ),
        (
            {"command": ["x"], "env": {"OK": "a\0b"}},
            pb.SubmitJobRequest(command=["x"], env={"OK": "a\0b"}),
            "env",
        ),
        ({"command": ["x\0y"]}, pb.SubmitJobRequest(command=["x\0y"]), "command"),
        (
            {"command": ["x"], "time_limit_s": math.inf},
            pb.SubmitJobRequest(command=["x"], time_limit_s=math.inf),
            "time_limit_s",
        ),
        (
            {"command": ["x"], "time_limit_s": math.nan},
            pb.SubmitJobRequest(command=["x"], time_limit_s=math.nan),
            "time_limit_s",
        ),
    ],
)
def test_bad_input_is_refused_by_both_naming_the_field(
    both: Both, rest_body: dict[str, object], grpc_request: pb.SubmitJobRequest, field: str
) -> None:
    body = json.dumps(rest_body)  # Infinity / NaN as Python's json writes them
    r = both.rest.post("/v1/jobs", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422 and field in r.text
    with pytest.raises(grpc.RpcError) as err:
        both.jobs.SubmitJob(grpc_request, timeout=5)
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert field in err.value.details()


def test_unknown_ids_and_conflicts_map_to_the_same_outcomes(both: Both) -> None:
    assert both.rest.get("/v1/jobs/j-nope").status_code == 404
    with pytest.raises(grpc.RpcError) as err:
        both.jobs.GetJob(pb.GetJobRequest(id="j-nope"), timeout=5)
    assert err.value.code() is grpc.StatusCode.NOT_FOUND
    job = both.jobs.SubmitJob(pb.SubmitJobRequest(command=["fake-exit", "0"]), timeout=5)
    both.wait_state(job.id, "COMPLETED")
    assert both.rest.post(f"/v1/jobs/{job.id}/cancel").status_code == 409
    with pytest.raises(grpc.RpcError) as err:
        both.jobs.CancelJob(pb.CancelJobRequest(id=job.id), timeout=5)
    assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION


def test_cancel_gpus_and_status_agree(both: Both) -> None:
    job = both.jobs.SubmitJob(pb.SubmitJobRequest(command=["fake-forever"], gpus=3), timeout=5)
    both.wait_state(job.id, "RUNNING")
    status = both.cluster.GetStatus(pb.GetStatusRequest(), timeout=5)
    rest_status = both.rest.get("/v1/status").json()
    assert (status.gpus_free, dict(status.jobs_by_state)) == (
        rest_status["gpus_free"],
        rest_status["jobs_by_state"],
    )
    gpus = both.cluster.ListGpus(pb.ListGpusRequest(), timeout=5).gpus
    assert [(g.index, g.state, g.job_id) for g in gpus] == [
        (g["index"], g["state"], g["job_id"] or "") for g in both.rest.get("/v1/gpus").json()
    ]
    assert both.jobs.CancelJob(pb.CancelJobRequest(id=job.id), timeout=5).state == "CANCELLED"


def test_watch_jobs_streams_every_event_of_a_job_in_order(both: Both) -> None:
    events: list[pb.JobEvent] = []
    stream = both.jobs.WatchJobs(pb.WatchJobsRequest(), timeout=20)

    def read() -> None:
        for event in stream:
            events.append(event)
            if event.type == "JobFinished":
                stream.cancel()
                return

    reader = threading.Thread(target=read)
    reader.start()
    time.sleep(0.3)  # let the subscription start before the first event
    job = both.jobs.SubmitJob(pb.SubmitJobRequest(command=["fake-exit", "0"], gpus=1), timeout=5)
    both.wait_state(job.id, "COMPLETED")
    reader.join(timeout=10)
    assert [e.type for e in events] == ["JobSubmitted", "JobBound", "JobStarted", "JobFinished"]
    assert {e.job_id for e in events} == {job.id}
    assert events[-1].job.state == "COMPLETED"


def test_watching_an_unknown_job_is_not_found(both: Both) -> None:
    with pytest.raises(grpc.RpcError) as err:
        list(both.jobs.WatchJobs(pb.WatchJobsRequest(job_id="j-nope"), timeout=5))
    assert err.value.code() is grpc.StatusCode.NOT_FOUND


def test_a_deadline_shorter_than_the_stream_ends_it_with_deadline_exceeded(both: Both) -> None:
    with pytest.raises(grpc.RpcError) as err:
        list(both.jobs.WatchJobs(pb.WatchJobsRequest(), timeout=0.5))
    assert err.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED


def test_health_and_reflection_are_served(both: Both) -> None:
    health = health_pb2_grpc.HealthStub(both.channel)
    for service in ("", "gpu_platform.v1.JobService"):
        reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    stub = reflection_pb2_grpc.ServerReflectionStub(both.channel)
    responses = stub.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
    )
    names = {s.name for r in responses for s in r.list_services_response.service}
    assert {
        "gpu_platform.v1.JobService",
        "gpu_platform.v1.ClusterService",
        "grpc.health.v1.Health",
    } <= names


def test_the_generated_code_matches_the_proto(tmp_path: Path) -> None:
    proto = "gpu_platform/adapters/inbound/grpc/v1/gpu_platform.proto"
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{ROOT / 'src'}", f"--python_out={tmp_path}",
         f"--grpc_python_out={tmp_path}", str(ROOT / "src" / proto)],
        check=True,
    )  # fmt: skip
    for name in ("gpu_platform_pb2.py", "gpu_platform_pb2_grpc.py"):
        generated = (tmp_path / Path(proto).parent / name).read_text()
        committed = (ROOT / "src" / Path(proto).parent / name).read_text()
        assert generated == committed, f"{name} is stale: run `make proto`"


def test_every_unary_rpc_is_traced(tmp_path: Path, inventory: Inventory) -> None:
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from gpu_platform.adapters.inbound.grpc import GrpcServer
    from gpu_platform.application.control_plane import ControlPlane
    from gpu_platform.infrastructure.tracing import configure_tracing
    from gpu_platform.testing.fakes import RecordingPublisher

    spans = InMemorySpanExporter()
    plane = ControlPlane(
        inventory,
        InMemoryJobStore(),
        FakeJobRunner(),
        ManualClock(),
        SequentialJobIds(),
        RecordingPublisher(),
    )
    server = GrpcServer(
        plane, port=0, tracer_provider=configure_tracing(None, SimpleSpanProcessor(spans))
    )
    server.start()
    try:
        with grpc.insecure_channel(server.address) as channel:
            pb_grpc.ClusterServiceStub(channel).GetStatus(pb.GetStatusRequest(), timeout=5)
            with pytest.raises(grpc.RpcError):
                pb_grpc.JobServiceStub(channel).GetJob(pb.GetJobRequest(id="j-x"), timeout=5)
    finally:
        server.stop(0)
    names = [s.name for s in spans.get_finished_spans()]
    assert names == [
        "/gpu_platform.v1.ClusterService/GetStatus",
        "/gpu_platform.v1.JobService/GetJob",
    ]
