"""Admin REST routes, built through the real container with in-memory fakes swapped in and the
simulated hardware as health source and injector."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dependency_injector import providers
from fastapi.testclient import TestClient

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

N = "node-0"
ALICE = {"X-Actor": "alice"}


class Api:
    def __init__(self, client: TestClient, runner: FakeJobRunner) -> None:
        self.client, self.runner = client, runner

    def wait(self, job_id: str, pred: Any) -> dict[str, Any]:
        job: dict[str, Any] = {}
        for _ in range(500):
            job = self.client.get(f"/v1/jobs/{job_id}").json()
            if pred(job):
                return job
            self.runner.deliver()
            time.sleep(0.01)
        raise AssertionError(f"{job_id} never matched: {job}")

    def gpu(self, index: int) -> dict[str, Any]:
        return next(g for g in self.client.get("/v1/gpus").json() if g["index"] == index)


@pytest.fixture
def api(tmp_path: Path, inventory: Inventory) -> Iterator[Api]:
    settings = Settings(
        server_id=0, data_dir=tmp_path, schedule_interval_seconds=0.05, health_source="sim"
    )
    container = Container(settings=settings)
    runner = FakeJobRunner()
    container.adapters.discovery.override(providers.Object(InMemoryGpuDiscovery(inventory)))
    container.adapters.store.override(providers.Object(InMemoryJobStore()))
    container.adapters.runner.override(providers.Object(runner))
    container.adapters.clock.override(providers.Object(ManualClock()))
    container.adapters.ids.override(providers.Object(SequentialJobIds()))
    container.init_resources()
    try:
        with TestClient(container.rest_app()) as client:
            yield Api(client, runner)
    finally:
        container.shutdown_resources()


def test_an_injected_xid_79_offlines_the_gpu_and_the_job_runs_again_elsewhere(api: Api) -> None:
    job = api.client.post("/v1/jobs", json={"command": ["fake-forever"], "gpus": 1}).json()
    running = api.wait(job["id"], lambda j: j["state"] == "RUNNING")
    (gpu,) = running["allocation"]["gpu_indices"]
    r = api.client.post("/v1/debug/inject", json={"script": f"xid 79 on gpu {gpu}"}, headers=ALICE)
    assert r.status_code == 200, r.text
    assert r.json() == {"scheduled": [f"xid 79 on gpu {gpu} node {N}"]}
    again = api.wait(job["id"], lambda j: j["state"] == "RUNNING" and j["attempt"] == 2)
    assert gpu not in again["allocation"]["gpu_indices"]
    assert again["allocation"]["epoch"] > running["allocation"]["epoch"]
    assert any("xid 79" in h["reason"] and h["state"] == "QUEUED" for h in again["history"])
    assert api.gpu(gpu)["state"] == "OFFLINE" and api.gpu(gpu)["reason"] == "xid 79 (reboot)"
    (entry,) = api.client.get("/v1/audit").json()
    assert (entry["actor"], entry["action"], entry["outcome"]) == ("alice", "inject", "ok")


def test_gpu_drain_offline_and_online_with_reasons_and_the_audit_trail(api: Api) -> None:
    r = api.client.post(f"/v1/gpus/{N}/2/drain", json={"reason": "fan"}, headers=ALICE)
    assert r.status_code == 200, r.text
    assert (r.json()["state"], r.json()["reason"]) == ("DRAINING", "drain by alice: fan")
    assert api.client.post(f"/v1/gpus/{N}/2/offline").json()["state"] == "OFFLINE"
    assert (
        api.client.post(f"/v1/gpus/{N}/2/online", json={"reason": "fixed"}).json()["state"]
        == "AVAILABLE"
    )
    audit = api.client.get("/v1/audit", params={"limit": 2}).json()
    assert [(a["actor"], a["action"], a["reason"]) for a in audit] == [
        ("anonymous", "offline", ""),
        ("anonymous", "online", "fixed"),
    ]


def test_offline_of_a_busy_gpu_is_409_without_force_and_requeues_with_it(api: Api) -> None:
    job = api.client.post("/v1/jobs", json={"command": ["fake-forever"], "gpus": 8}).json()
    api.wait(job["id"], lambda j: j["state"] == "RUNNING")
    r = api.client.post(f"/v1/gpus/{N}/0/offline", json={"reason": "x"})
    assert r.status_code == 409 and "drain it, or offline with force" in r.json()["detail"]
    r = api.client.post(f"/v1/gpus/{N}/0/offline", json={"reason": "x", "force": True})
    assert r.status_code == 200 and r.json()["state"] == "OFFLINE"
    queued = api.wait(job["id"], lambda j: j["state"] == "QUEUED")
    assert "offline --force by anonymous: x" in queued["reason"]


def test_node_actions_and_the_node_list(api: Api) -> None:
    r = api.client.post(f"/v1/nodes/{N}/drain", json={"reason": "kernel"}, headers=ALICE)
    assert r.status_code == 200
    assert r.json() == {
        "name": N,
        "state": "DRAINING",
        "reason": "drain by alice: kernel",
        "gpus": 8,
        "jobs": 0,
    }
    assert api.client.get("/v1/nodes").json() == [r.json()]
    assert api.client.post(f"/v1/nodes/{N}/offline").json()["state"] == "DOWN"
    r = api.client.post(f"/v1/nodes/{N}/drain")
    assert r.status_code == 409 and "illegal" in r.json()["detail"]


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("post", f"/v1/gpus/{N}/42/drain", None, 404),
        ("post", "/v1/gpus/nope/0/drain", None, 404),
        ("post", f"/v1/gpus/{N}/0/explode", None, 422),
        ("post", "/v1/nodes/nope/online", None, 404),
        ("post", "/v1/debug/inject", {"script": "xid 79 on gpu 42"}, 422),
        ("post", "/v1/debug/inject", {"script": "reboot the world"}, 422),
        ("post", "/v1/debug/inject", {"script": ""}, 422),
        ("post", "/v1/jobs", {"command": ["x"], "max_attempts": 0}, 422),
        ("post", "/v1/jobs", {"command": ["x"], "retry_backoff_s": -1}, 422),
    ],
)
def test_bad_admin_requests_are_refused_with_the_right_status(
    api: Api, method: str, path: str, body: dict[str, Any] | None, status: int
) -> None:
    r = getattr(api.client, method)(path, json=body)
    assert r.status_code == status, r.text


def test_restart_policy_fields_round_trip_through_the_api(api: Api) -> None:
    body = {"command": ["fake-forever"], "gpus": 1, "max_attempts": 5, "retry_backoff_s": 1.5}
    job = api.client.post("/v1/jobs", json=body).json()
    assert (job["max_attempts"], job["retry_backoff_s"]) == (5, 1.5)
