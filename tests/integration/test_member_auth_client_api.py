"""With mutual TLS, the client gRPC API is for users: a `client` certificate (or a user
certificate binding no member) is admitted, a server's or an agent's certificate from the same
CA is refused `PERMISSION_DENIED` — they are for the Raft and agents' ports only."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from dependency_injector import providers

from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2_grpc as pb_grpc
from gpu_platform.domain.model.node import Inventory
from gpu_platform.infrastructure.config import Settings
from gpu_platform.infrastructure.container import Container
from gpu_platform.testing.fakes import FakeJobRunner, InMemoryGpuDiscovery, InMemoryJobStore
from gpu_platform.testing.member_pki import MemberPki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> MemberPki:
    return MemberPki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def api(pki: MemberPki, tmp_path: Path, inventory: Inventory) -> Iterator[str]:
    server = pki.tls("server", "1")
    settings = Settings(
        server_id=0,  # the embedded core: the API over in-process fakes
        data_dir=tmp_path,
        grpc_port=0,
        tls_cert_file=server.cert,
        tls_key_file=server.key,
        tls_client_ca_file=pki.ca,
    )
    container = Container(settings=settings)
    container.adapters.discovery.override(providers.Object(InMemoryGpuDiscovery(inventory)))
    container.adapters.store.override(providers.Object(InMemoryJobStore()))
    container.adapters.runner.override(providers.Object(FakeJobRunner()))
    container.init_resources()
    grpc_server = container.grpc_server()
    assert grpc_server is not None
    try:
        yield grpc_server.address
    finally:
        container.shutdown_resources()


def test_only_user_certificates_may_call_the_client_api(pki: MemberPki, api: str) -> None:
    def status(role: str, name: str) -> grpc.StatusCode:
        tls = pki.plain(name) if role == "plain" else pki.tls(role, name)
        with grpc.secure_channel(api, tls.grpc_channel_credentials()) as channel:
            try:
                pb_grpc.ClusterServiceStub(channel).GetStatus(pb.GetStatusRequest(), timeout=10)
            except grpc.RpcError as exc:
                assert "admits client certificates only" in (exc.details() or "")
                return exc.code()  # type: ignore[no-any-return]
        return grpc.StatusCode.OK

    assert status("client", "alice") is grpc.StatusCode.OK
    assert status("plain", "bob") is grpc.StatusCode.OK
    assert status("agent", "node-a") is grpc.StatusCode.PERMISSION_DENIED
    assert status("server", "2") is grpc.StatusCode.PERMISSION_DENIED
