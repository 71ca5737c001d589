"""The span tree of one job (submit -> commit -> place -> bind -> start -> finish) under the API
span that submitted it, over REST and gRPC, read back from an in-memory span exporter; and
the gRPC API's latency series."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from dependency_injector import providers
from fastapi.testclient import TestClient
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2_grpc as pb_grpc
from gpu_platform.adapters.outbound.observability import OtelJobTracer, StructlogEventPublisher
from gpu_platform.adapters.outbound.sim.profiles import ProfileGpuDiscovery
from gpu_platform.domain.events import JobStarted, JobSubmitted
from gpu_platform.infrastructure.config import Settings
from gpu_platform.infrastructure.container import Container
from gpu_platform.infrastructure.tracing import configure_tracing
from gpu_platform.testing.fakes import (
    FakeJobRunner,
    InMemoryJobStore,
    ManualClock,
    SequentialJobIds,
)

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
STEPS = ["job.submit", "job.commit", "job.place", "job.bind", "job.start", "job.finish"]


@dataclass
class Rig:
    container: Container
    client: TestClient
    runner: FakeJobRunner
    clock: ManualClock
    spans: InMemorySpanExporter

    def wait(self, cond: Callable[[], bool]) -> None:
        for _ in range(1000):
            if cond():
                return
            time.sleep(0.01)
        raise AssertionError("condition not reached")

    def state(self, job_id: str) -> str:
        return str(self.client.get(f"/v1/jobs/{job_id}").json()["state"])


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    container = Container(
        settings=Settings(
            server_id=0,  # the embedded core: these test the APIs over in-process fakes
            data_dir=tmp_path,
            schedule_interval_seconds=0.05,
            grpc_port=0,
            health_source="none",
        )
    )
    runner, clock, spans = FakeJobRunner(), ManualClock(1_000_000.0), InMemorySpanExporter()
    container.adapters.discovery.override(providers.Object(ProfileGpuDiscovery("dgx-a100")))
    container.adapters.store.override(providers.Object(InMemoryJobStore()))
    container.adapters.runner.override(providers.Object(runner))
    container.adapters.clock.override(providers.Object(clock))
    container.adapters.ids.override(providers.Object(SequentialJobIds()))
    container.observability.tracer_provider.override(
        providers.Object(configure_tracing(None, SimpleSpanProcessor(spans)))
    )
    container.init_resources()
    try:
        with TestClient(container.rest_app()) as client:
            yield Rig(container, client, runner, clock, spans)
    finally:
        container.shutdown_resources()


def tree(spans: InMemorySpanExporter, job_id: str) -> tuple[ReadableSpan, list[ReadableSpan]]:
    """The job's `job.submit` span and its children, in the order they ended."""
    finished = spans.get_finished_spans()
    (root,) = [
        s
        for s in finished
        if s.name == "job.submit" and (s.attributes or {}).get("gpu_platform.job_id") == job_id
    ]
    kids = [
        s for s in finished if s.parent is not None and s.parent.span_id == root.context.span_id
    ]
    return root, kids


def hexid(n: int, width: int) -> str:
    return format(n, f"0{width}x")


def test_a_rest_submitted_job_is_one_trace_under_the_callers_span(rig: Rig) -> None:
    r = rig.client.post(
        "/v1/jobs",
        json={"command": ["fake-exit", "0"], "gpus": 2},
        headers={"traceparent": TRACEPARENT},
    )
    job_id = r.json()["id"]
    rig.wait(lambda: rig.state(job_id) == "RUNNING")
    rig.runner.deliver()
    rig.wait(lambda: rig.state(job_id) == "COMPLETED")

    (request,) = [s for s in rig.spans.get_finished_spans() if s.name == "POST /v1/jobs"]
    assert hexid(request.context.trace_id, 32) == CALLER_TRACE  # continues the caller's trace
    assert request.parent is not None and hexid(request.parent.span_id, 16) == CALLER_SPAN
    root, steps = tree(rig.spans, job_id)
    assert root.parent is not None and root.parent.span_id == request.context.span_id
    assert [s.name for s in steps] == STEPS[1:]
    assert {s.context.trace_id for s in steps} == {request.context.trace_id}
    starts = [s.start_time or 0 for s in [root, *steps]]
    assert starts == sorted(starts)
    by_name = {s.name: s for s in steps}
    bind = by_name["job.bind"].attributes or {}
    assert bind["gpu_platform.node"] == "node-0" and bind["gpu_platform.attempt"] == 1
    assert list(bind["gpu_platform.gpus"]) == [0, 1]  # type: ignore[arg-type]
    assert (by_name["job.finish"].attributes or {})["gpu_platform.state"] == "COMPLETED"
    tracer = rig.container.observability.job_tracer()
    assert tracer.traceparent(job_id) == (f"00-{CALLER_TRACE}-{hexid(root.context.span_id, 16)}-01")


def test_a_job_moved_by_a_fault_gets_a_requeue_and_a_second_attempt_in_the_same_trace(
    rig: Rig,
) -> None:
    job_id = rig.client.post("/v1/jobs", json={"command": ["fake-forever"], "gpus": 1}).json()["id"]
    rig.wait(lambda: rig.state(job_id) == "RUNNING")
    gpu = rig.client.get(f"/v1/jobs/{job_id}").json()["allocation"]["gpu_indices"][0]
    rig.client.post("/v1/debug/inject", json={"script": f"xid 79 on gpu {gpu}"})
    rig.wait(lambda: rig.state(job_id) == "QUEUED")
    rig.runner.deliver()
    rig.wait(lambda: rig.client.get(f"/v1/jobs/{job_id}").json()["attempt"] == 2)
    rig.wait(lambda: rig.state(job_id) == "RUNNING")
    rig.client.post(f"/v1/jobs/{job_id}/cancel")
    rig.wait(lambda: rig.state(job_id) == "CANCELLED")

    _, steps = tree(rig.spans, job_id)
    assert [s.name for s in steps] == [
        "job.commit",
        *("job.place", "job.bind", "job.start", "job.requeue"),
        *("job.place", "job.bind", "job.start", "job.finish"),
    ]
    attempts = [(s.attributes or {})["gpu_platform.attempt"] for s in steps if s.name == "job.bind"]
    assert attempts == [1, 2]
    assert (steps[-1].attributes or {})["gpu_platform.state"] == "CANCELLED"


def test_a_grpc_submitted_job_hangs_under_the_rpc_span_and_the_rpc_is_measured(
    rig: Rig,
) -> None:
    server = rig.container.grpc_server()
    assert server is not None
    with grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.JobServiceStub(channel)
        job = stub.SubmitJob(
            pb.SubmitJobRequest(command=["fake-forever"], gpus=1),
            metadata=(("traceparent", TRACEPARENT),),
            timeout=5,
        )
        with pytest.raises(grpc.RpcError):
            stub.GetJob(pb.GetJobRequest(id="j-nope"), timeout=5)
    rig.wait(lambda: rig.state(job.id) == "RUNNING")

    (rpc,) = [
        s
        for s in rig.spans.get_finished_spans()
        if s.name == "/gpu_platform.v1.JobService/SubmitJob"
    ]
    assert hexid(rpc.context.trace_id, 32) == CALLER_TRACE
    root, steps = tree(rig.spans, job.id)
    assert root.parent is not None and root.parent.span_id == rpc.context.span_id
    assert [s.name for s in steps] == ["job.commit", "job.place", "job.bind", "job.start"]

    text = rig.client.get("/metrics").text
    counts = {
        (s.labels["method"], s.labels["code"]): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "gpu_platform_grpc_request_duration_seconds_count"
    }
    assert counts == {
        ("/gpu_platform.v1.JobService/SubmitJob", "OK"): 1,
        ("/gpu_platform.v1.JobService/GetJob", "NOT_FOUND"): 1,
    }


def test_job_event_lines_carry_the_jobs_trace_id_off_the_request_thread() -> None:
    spans = InMemorySpanExporter()
    tracer = OtelJobTracer(configure_tracing(None, SimpleSpanProcessor(spans)))
    logs = StructlogEventPublisher(tracer.trace_id)
    with capture_logs() as lines:
        for event in (JobSubmitted("j-1", 1), JobStarted("j-1", 1)):
            tracer.publish(event)
            logs.publish(event)
    (submit,) = [s for s in spans.get_finished_spans() if s.name == "job.submit"]
    expected = hexid(submit.context.trace_id, 32)
    assert [(line["event"], line["trace_id"]) for line in lines] == [
        ("JobSubmitted", expected),
        ("JobStarted", expected),
    ]


def test_a_gang_is_one_trace_with_one_bind_for_all_its_tasks(rig: Rig) -> None:
    body = {"command": ["fake-exit", "0"], "gpus": 2, "tasks": 2}
    job_id = rig.client.post("/v1/jobs", json=body).json()["id"]
    rig.wait(lambda: rig.state(job_id) == "RUNNING")
    rig.runner.deliver()
    rig.wait(lambda: rig.state(job_id) == "COMPLETED")
    _, steps = tree(rig.spans, job_id)
    assert [s.name for s in steps] == STEPS[1:]
    bind = next(s for s in steps if s.name == "job.bind").attributes or {}
    assert bind["gpu_platform.tasks"] == 2
