"""The REST API, built through the real container with in-memory fakes swapped in."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from dependency_injector import providers
from fastapi.testclient import TestClient
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gpu_platform.domain.model.node import Inventory
from gpu_platform.infrastructure.config import Settings
from gpu_platform.infrastructure.container import Container
from gpu_platform.infrastructure.tracing import configure_tracing
from gpu_platform.testing.fakes import (
    FakeJobRunner,
    InMemoryGpuDiscovery,
    InMemoryJobStore,
    ManualClock,
    SequentialJobIds,
)


class Api:
    def __init__(self, client: TestClient, runner: FakeJobRunner, spans: InMemorySpanExporter):
        self.client, self.runner, self.spans = client, runner, spans

    def wait_state(self, job_id: str, state: str) -> dict[str, object]:
        for _ in range(500):
            job = self.client.get(f"/v1/jobs/{job_id}").json()
            if job["state"] == state:
                return job  # type: ignore[no-any-return]
            self.runner.deliver()
            time.sleep(0.01)
        raise AssertionError(f"{job_id} never reached {state}: {job}")


@pytest.fixture
def api(tmp_path: Path, inventory: Inventory) -> Iterator[Api]:
    container = Container(
        settings=Settings(
            server_id=0, data_dir=tmp_path, schedule_interval_seconds=0.05, grpc_port=-1
        )
    )
    runner = FakeJobRunner()
    spans = InMemorySpanExporter()
    container.adapters.discovery.override(providers.Object(InMemoryGpuDiscovery(inventory)))
    container.adapters.store.override(providers.Object(InMemoryJobStore()))
    container.adapters.runner.override(providers.Object(runner))
    container.adapters.clock.override(providers.Object(ManualClock()))
    container.adapters.ids.override(providers.Object(SequentialJobIds()))
    container.observability.tracer_provider.override(
        providers.Object(configure_tracing(None, SimpleSpanProcessor(spans)))
    )
    container.init_resources()
    try:
        with TestClient(container.rest_app()) as client:
            yield Api(client, runner, spans)
    finally:
        container.shutdown_resources()


def test_a_submitted_job_runs_and_completes(api: Api) -> None:
    r = api.client.post("/v1/jobs", json={"command": ["fake-exit", "0", "hi"], "gpus": 2})
    assert r.status_code == 201
    job = r.json()
    assert job["state"] == "QUEUED" and job["id"] == "j-000001"
    done = api.wait_state(job["id"], "COMPLETED")
    assert done["exit_code"] == 0
    assert done["allocation"]["gpu_indices"] == [0, 1]  # type: ignore[index]
    assert api.client.get(f"/v1/jobs/{job['id']}/logs").text == "hi\n"
    assert [j["id"] for j in api.client.get("/v1/jobs").json()] == [job["id"]]
    assert api.client.get("/v1/jobs", params={"state": "QUEUED"}).json() == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"gpus": 1}, "command"),
        ({"command": [], "gpus": 1}, "command"),
        ({"command": [""], "gpus": 1}, "command"),
        ({"command": ["x"], "gpus": -1}, "gpus"),
        ({"command": ["x"], "gpus": "two"}, "gpus"),
        ({"command": ["x"], "gpus": 9}, "gpus"),  # more than any node has: never placeable
        ({"command": ["x"], "env": {"1BAD": "v"}}, "env"),
        ({"command": ["x"], "tenant": "a b"}, "tenant"),
        ({"command": ["x"], "surprise": 1}, "surprise"),
        ({"command": ["x"], "image": "\x1f"}, "image"),  # blank to the domain, not to \S
    ],
)
def test_bad_submissions_are_422_naming_the_field(
    api: Api, body: dict[str, object], field: str
) -> None:
    r = api.client.post("/v1/jobs", json=body)
    assert r.status_code == 422, r.text
    problem = r.json()
    assert r.headers["content-type"] == "application/problem+json", r.text
    assert field in [e["field"].split(".")[0] for e in problem["errors"]], r.text
    assert api.client.get("/v1/jobs").json() == []
    as_array = api.client.post("/v1/arrays", json={**body, "array": "0-1"})
    assert as_array.status_code == 422, as_array.text


def test_a_malformed_body_is_422(api: Api) -> None:
    r = api.client.post(
        "/v1/jobs", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert r.status_code == 422


def test_unknown_ids_are_404_and_cancelling_an_ended_job_is_409(api: Api) -> None:
    assert api.client.get("/v1/jobs/j-nope").status_code == 404
    assert api.client.post("/v1/jobs/j-nope/cancel").status_code == 404
    assert api.client.get("/v1/jobs/j-nope/logs").status_code == 404
    job = api.client.post("/v1/jobs", json={"command": ["fake-exit", "0"]}).json()
    api.wait_state(job["id"], "COMPLETED")
    r = api.client.post(f"/v1/jobs/{job['id']}/cancel")
    assert r.status_code == 409 and "already ended" in r.json()["detail"]
    assert api.client.get("/v1/jobs", params={"state": "SLEEPING"}).status_code == 422


def test_cancel_stops_a_running_job(api: Api) -> None:
    job = api.client.post("/v1/jobs", json={"command": ["fake-forever"], "gpus": 8}).json()
    api.wait_state(job["id"], "RUNNING")
    gpus = api.client.get("/v1/gpus").json()
    assert {g["state"] for g in gpus} == {"IN_USE"} and {g["job_id"] for g in gpus} == {job["id"]}
    assert api.client.post(f"/v1/jobs/{job['id']}/cancel").json()["state"] == "CANCELLED"
    api.runner.deliver()
    assert {g["state"] for g in api.client.get("/v1/gpus").json()} == {"AVAILABLE"}


def test_status_health_and_metrics_tell_the_truth(api: Api) -> None:
    job = api.client.post("/v1/jobs", json={"command": ["fake-forever"], "gpus": 3}).json()
    api.wait_state(job["id"], "RUNNING")
    status = api.client.get("/v1/status").json()
    assert status["simulated"] is True
    assert (status["gpus_total"], status["gpus_free"]) == (8, 5)
    assert status["jobs_by_state"] == {"RUNNING": 1}
    assert api.client.get("/healthz").json()["status"] == "ok"
    text = api.client.get("/metrics").text
    assert "gpu_platform_jobs_submitted_total 1.0" in text
    assert 'gpu_platform_gpus{node="node-0",state="IN_USE"} 3.0' in text
    assert 'gpu_platform_jobs{state="RUNNING"} 1.0' in text


def test_every_request_is_traced(api: Api) -> None:
    api.client.get("/v1/jobs/j-nope")
    names = [s.name for s in api.spans.get_finished_spans()]
    assert "GET /v1/jobs/j-nope" in names
    span = next(s for s in api.spans.get_finished_spans() if s.name == "GET /v1/jobs/j-nope")
    assert span.attributes is not None
    assert span.attributes["http.response.status_code"] == 404


def test_the_openapi_schema_documents_the_job_endpoints(api: Api) -> None:
    paths = api.client.get("/openapi.json").json()["paths"]
    assert {"/v1/jobs", "/v1/jobs/{job_id}", "/v1/jobs/{job_id}/cancel", "/v1/gpus"} <= set(paths)


def test_following_a_log_streams_until_the_attempt_ends(api: Api) -> None:
    import threading

    job = api.client.post("/v1/jobs", json={"command": ["fake-exit", "0", "streamed"]}).json()
    api.wait_state(job["id"], "RUNNING")
    chunks: list[bytes] = []

    def follow() -> None:
        with api.client.stream("GET", f"/v1/jobs/{job['id']}/logs", params={"follow": "true"}) as r:
            assert r.status_code == 200
            chunks.extend(r.iter_bytes())

    reader = threading.Thread(target=follow)
    reader.start()
    time.sleep(0.3)
    assert reader.is_alive()  # the attempt is still running: the stream stays open
    api.runner.deliver()
    reader.join(timeout=10)
    assert not reader.is_alive()
    assert b"".join(chunks) == b"streamed\n"


def test_following_an_unknown_job_is_404(api: Api) -> None:
    r = api.client.get("/v1/jobs/j-nope/logs", params={"follow": "true"})
    assert r.status_code == 404
