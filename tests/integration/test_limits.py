"""Backpressure and input limits: per-token rate limiting (429 + Retry-After /
RESOURCE_EXHAUSTED + retry-after metadata), per-tenant admission limits, and input size limits
(422 naming the field / INVALID_ARGUMENT), through REST and gRPC on the real container. Time is
a ManualClock, so the token bucket refills only when the test says so."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from fastapi.testclient import TestClient

from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2_grpc as pb_grpc
from gpu_platform.adapters.outbound.sim import default_node
from gpu_platform.domain.model.node import Inventory
from gpu_platform.domain.model.tenancy import Principal, Role
from gpu_platform.infrastructure.config import Settings
from gpu_platform.infrastructure.container import Container
from gpu_platform.testing.fakes import (
    ManualClock,
)
from gpu_platform.testing.wired import use_fakes


class Api:
    def __init__(self, container: Container, rest: TestClient, channel: grpc.Channel) -> None:
        self.container, self.rest = container, rest
        self.jobs = pb_grpc.JobServiceStub(channel)
        self.clock: ManualClock = container.adapters.clock()
        access = container.access()
        boot = access.bootstrap()
        assert boot is not None
        self.root = Principal("root", "default", Role.ADMIN, boot.info.token_id)
        for tenant in ("a", "b"):
            access.create_tenant(self.root, tenant)

    def token(self, tenant: str, role: Role = Role.USER) -> str:
        return self.container.access().create_token(self.root, "t", tenant, role).secret


def _api(tmp_path: Path, **settings: Any) -> Iterator[Api]:
    container = Container(
        settings=Settings(
            server_id=0,  # the embedded core: these test the APIs over in-process fakes
            data_dir=tmp_path,
            grpc_port=0,
            auth="on",
            schedule_interval_seconds=0.05,
            health_source="sim",
            **settings,
        )
    )
    inventory = Inventory((default_node(),), source="sim", simulated=True)
    use_fakes(container, inventory)
    server = container.grpc_server()
    assert server is not None
    try:
        with TestClient(container.rest_app()) as rest, grpc.insecure_channel(server.address) as ch:
            yield Api(container, rest, ch)
    finally:
        container.shutdown_resources()


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[Api]:
    yield from _api(tmp_path, rate_limit_per_second=1.0, rate_limit_burst=2.0)


@pytest.fixture
def admission(tmp_path: Path) -> Iterator[Api]:
    yield from _api(
        tmp_path,
        rate_limit_per_second=0,
        max_queued_jobs_per_tenant=2,
        max_pending_gpus_per_tenant=6,
        max_argv_bytes=64,
        max_env_vars=2,
    )


def test_a_token_past_its_burst_gets_429_with_retry_after_until_the_bucket_refills(
    limited: Api,
) -> None:
    h = {"Authorization": f"Bearer {limited.token('a')}"}
    assert [limited.rest.get("/v1/whoami", headers=h).status_code for _ in range(2)] == [200, 200]
    r = limited.rest.get("/v1/whoami", headers=h)
    assert r.status_code == 429 and r.headers["Retry-After"] == "1"
    assert r.json()["type"] == "urn:gpu-platform:problem:too-many-requests"
    other = {"Authorization": f"Bearer {limited.token('a')}"}  # buckets are per token
    assert limited.rest.get("/v1/whoami", headers=other).status_code == 200
    limited.clock.advance(1.0)
    assert limited.rest.get("/v1/whoami", headers=h).status_code == 200


def test_grpc_calls_share_the_tokens_bucket_and_say_when_to_retry(limited: Api) -> None:
    secret = limited.token("a")
    md = (("authorization", f"Bearer {secret}"),)
    limited.jobs.ListJobs(pb.ListJobsRequest(), metadata=md)
    assert limited.rest.get("/v1/jobs", headers={"Authorization": f"Bearer {secret}"}).is_success
    with pytest.raises(grpc.RpcError) as err:
        limited.jobs.ListJobs(pb.ListJobsRequest(), metadata=md)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    trailers = dict(err.value.trailing_metadata())  # type: ignore[attr-defined]
    assert trailers["retry-after"] == "1" and trailers["grpc-retry-pushback-ms"] == "1000"
    limited.clock.advance(2.0)
    limited.jobs.ListJobs(pb.ListJobsRequest(), metadata=md)


def _hold_the_node(api: Api) -> None:
    """Drain the only node so every submitted job waits in the queue."""
    admin = {"Authorization": f"Bearer {api.token('a', Role.ADMIN)}"}
    assert api.rest.post("/v1/nodes/node-0/drain", headers=admin).status_code == 200


def test_a_tenant_past_its_queued_job_limit_is_told_to_back_off_others_are_not(
    admission: Api,
) -> None:
    _hold_the_node(admission)
    a = {"Authorization": f"Bearer {admission.token('a')}"}
    body = {"command": ["fake-forever"]}
    assert [
        admission.rest.post("/v1/jobs", json=body, headers=a).status_code for _ in range(2)
    ] == [
        201,
        201,
    ]
    r = admission.rest.post("/v1/jobs", json=body, headers=a)
    assert r.status_code == 429 and "2 jobs waiting" in r.json()["detail"]
    assert int(r.headers["Retry-After"]) >= 1
    md = (("authorization", f"Bearer {admission.token('a')}"),)
    with pytest.raises(grpc.RpcError) as err:
        admission.jobs.SubmitJob(pb.SubmitJobRequest(command=["fake-forever"]), metadata=md)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    b = {"Authorization": f"Bearer {admission.token('b')}"}
    assert admission.rest.post("/v1/jobs", json=body, headers=b).status_code == 201


def test_a_tenant_past_its_pending_gpu_demand_is_refused(admission: Api) -> None:
    _hold_the_node(admission)
    a = {"Authorization": f"Bearer {admission.token('a')}"}
    first = {"command": ["fake-forever"], "gpus": 4}
    assert admission.rest.post("/v1/jobs", json=first, headers=a).status_code == 201
    r = admission.rest.post("/v1/jobs", json={**first, "gpus": 3}, headers=a)
    assert r.status_code == 429 and "limit of 6" in r.json()["detail"]
    assert admission.rest.post("/v1/jobs", json={**first, "gpus": 2}, headers=a).status_code == 201


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"command": ["fake-forever", "x" * 100]}, "command"),
        ({"command": ["fake-forever"], "env": {"A": "1", "B": "2", "C": "3"}}, "env"),
        ({"command": ["fake-forever"], "name": "n" * 129}, "name"),
        ({"command": ["fake-forever"] * 4097}, "command"),
        ({"command": ["fake-forever"], "gpus": 5000}, "gpus"),
    ],
)
def test_oversized_input_is_422_naming_the_field_and_invalid_argument_over_grpc(
    admission: Api, body: dict[str, Any], field: str
) -> None:
    h = {"Authorization": f"Bearer {admission.token('a')}"}
    r = admission.rest.post("/v1/jobs", json=body, headers=h)
    assert r.status_code == 422, r.text
    assert r.json()["field"] == field and r.headers["content-type"] == "application/problem+json"
    md = (("authorization", f"Bearer {admission.token('a')}"),)
    request = pb.SubmitJobRequest(
        command=body["command"], env=body.get("env", {}), name=body.get("name", "")
    )
    request.gpus = body.get("gpus", 0)
    with pytest.raises(grpc.RpcError) as err:
        admission.jobs.SubmitJob(request, metadata=md)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert dict(err.value.trailing_metadata())["field"] == field  # type: ignore[attr-defined]
