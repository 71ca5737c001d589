"""With mutual TLS, the client gRPC API is for users: a `client` certificate (or a user
certificate binding no member) is admitted, a server's or an agent's certificate from the same
CA is refused `PERMISSION_DENIED` — they are for the Raft and agents' ports only."""

from __future__ import annotations

import tempfile
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


@pytest.fixture(params=[0, 2], ids=["direct", "api-workers"])
def api(pki: MemberPki, request: pytest.FixtureRequest, inventory: Inventory) -> Iterator[str]:
    """The server on the port itself, and behind two API workers (they terminate TLS)."""
    with tempfile.TemporaryDirectory(prefix="mtls-") as tmp:  # a short Unix socket path
        yield from _api(pki, Path(tmp), inventory, int(request.param))


def _api(pki: MemberPki, data_dir: Path, inventory: Inventory, workers: int) -> Iterator[str]:
    server = pki.tls("server", "1")
    settings = Settings(
        server_id=0,  # the embedded core: the API over in-process fakes
        data_dir=data_dir,
        grpc_port=0,
        tls_cert_file=server.cert,
        tls_key_file=server.key,
        tls_client_ca_file=pki.ca,
        api_workers=workers,
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
        """The answer to a read and to a submit (the same for both)."""
        tls = pki.plain(name) if role == "plain" else pki.tls(role, name)
        codes = set()
        with grpc.secure_channel(api, tls.grpc_channel_credentials()) as channel:
            for call in (
                lambda: pb_grpc.ClusterServiceStub(channel).GetStatus(pb.GetStatusRequest()),
                lambda: pb_grpc.JobServiceStub(channel).SubmitJob(
                    pb.SubmitJobRequest(command=["true"])
                ),
            ):
                try:
                    call()
                    codes.add(grpc.StatusCode.OK)
                except grpc.RpcError as exc:
                    assert "admits client certificates only" in (exc.details() or "")
                    codes.add(exc.code())
        (code,) = codes
        return code

    assert status("client", "alice") is grpc.StatusCode.OK
    assert status("plain", "bob") is grpc.StatusCode.OK
    assert status("agent", "node-a") is grpc.StatusCode.PERMISSION_DENIED
    assert status("server", "2") is grpc.StatusCode.PERMISSION_DENIED
