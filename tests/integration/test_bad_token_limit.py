"""Auth hardening at the API edges (issue 20.7), through the real container with auth on: bad
tokens are rate-limited per client address on REST (429 + Retry-After) and gRPC
(RESOURCE_EXHAUSTED + retry-after), and the last admin token cannot be revoked (400 /
INVALID_ARGUMENT naming token_id)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from dependency_injector import providers
from fastapi.testclient import TestClient

from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2_grpc as pb_grpc
from gpu_platform.adapters.outbound.sim import default_node
from gpu_platform.domain.model.node import Inventory
from gpu_platform.infrastructure.config import Settings
from gpu_platform.infrastructure.container import Container
from gpu_platform.testing.fakes import FakeJobRunner, InMemoryGpuDiscovery, InMemoryJobStore

LIMIT = 3


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[TestClient, grpc.Channel, str, str]]:
    tmp: Path = tmp_path_factory.mktemp("badtokens")
    settings = Settings(
        server_id=0,
        data_dir=tmp,
        grpc_port=0,
        auth="on",
        auth_failures_per_minute=LIMIT,
        rate_limit_per_second=0,
        health_source="sim",
    )
    container = Container(settings=settings)
    inventory = Inventory((default_node(),), source="sim", simulated=True)
    container.adapters.discovery.override(providers.Object(InMemoryGpuDiscovery(inventory)))
    container.adapters.store.override(providers.Object(InMemoryJobStore()))
    container.adapters.runner.override(providers.Object(FakeJobRunner()))
    container.init_resources()
    boot = container.access().bootstrap()
    assert boot is not None
    server = container.grpc_server()
    assert server is not None
    try:
        with TestClient(container.rest_app()) as rest, grpc.insecure_channel(server.address) as ch:
            yield rest, ch, boot.secret, boot.info.token_id
    finally:
        container.shutdown_resources()


# first: the guessing tests below use up this client address's allowance
def test_the_last_admin_token_cannot_be_revoked_over_grpc(
    served: tuple[TestClient, grpc.Channel, str, str],
) -> None:
    _, channel, secret, token_id = served
    admin = pb_grpc.AdminServiceStub(channel)
    md = (("authorization", f"Bearer {secret}"),)
    with pytest.raises(grpc.RpcError) as refused:
        admin.RevokeToken(pb.RevokeTokenRequest(token_id=token_id), metadata=md)
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "token_id" in str(refused.value.details())


def test_rest_answers_429_with_retry_after_once_a_client_guessed_too_often(
    served: tuple[TestClient, grpc.Channel, str, str],
) -> None:
    rest, _, secret, _ = served
    for i in range(LIMIT):
        r = rest.get("/v1/whoami", headers={"Authorization": f"Bearer guess-{i}"})
        assert r.status_code == 401
    slowed = rest.get("/v1/whoami", headers={"Authorization": f"Bearer {secret}"})
    assert slowed.status_code == 429 and 1 <= int(slowed.headers["Retry-After"]) <= 60


def test_grpc_answers_resource_exhausted_once_a_client_guessed_too_often(
    served: tuple[TestClient, grpc.Channel, str, str],
) -> None:
    _, channel, _, _ = served
    admin = pb_grpc.AdminServiceStub(channel)
    codes = []
    for i in range(LIMIT + 1):
        with pytest.raises(grpc.RpcError) as failed:
            admin.ListTokens(pb.ListTokensRequest(), metadata=(("authorization", f"Bearer g{i}"),))
        codes.append(failed.value.code())
    assert codes == [grpc.StatusCode.UNAUTHENTICATED] * LIMIT + [grpc.StatusCode.RESOURCE_EXHAUSTED]
