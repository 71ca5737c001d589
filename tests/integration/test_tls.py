"""TLS with a throwaway CA made in the test (the `openssl` CLI): REST served over https by a
real `gpu-platform serve` (and the CLI trusting the CA), gRPC with mTLS (a client without a
certificate, or with one from another CA, is turned away), and the Raft transport with mTLS."""

from __future__ import annotations

import os
import queue
import shutil
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import pytest
from dependency_injector import providers

from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2_grpc as pb_grpc
from gpu_platform.adapters.member_certs import Member, issue
from gpu_platform.adapters.outbound.raft_grpc import GrpcRaftTransport
from gpu_platform.adapters.outbound.raft_tcp import TcpRaftTransport
from gpu_platform.adapters.tls import TlsFiles
from gpu_platform.domain.consensus import Message, MessageType
from gpu_platform.domain.model.node import Inventory
from gpu_platform.infrastructure.config import Settings
from gpu_platform.infrastructure.container import Container
from gpu_platform.testing.fakes import (
    FakeJobRunner,
    InMemoryGpuDiscovery,
    InMemoryJobStore,
    SequentialJobIds,
)
from gpu_platform.testing.ports import reserve_port, wait_for_ports
from tests.integration.conftest import ENTRY, wait_for

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")


@dataclass(frozen=True)
class Pki:
    ca: Path
    server: TlsFiles  # cert/key for 127.0.0.1, trusting `ca` for clients
    client: TlsFiles  # a client certificate from the CA, trusting `ca` for servers
    rogue: TlsFiles  # a client certificate from another CA


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ca(d: Path, name: str) -> None:
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "1", "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=d,
    )  # fmt: skip


def _leaf(d: Path, name: str, ca: str, ext: str) -> None:
    (d / f"{name}.ext").write_text(ext)
    _openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}",
        cwd=d,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-out", f"{name}.pem", "-days", "1", "-extfile", f"{name}.ext",
        cwd=d,
    )  # fmt: skip


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    _ca(d, "ca")
    _ca(d, "rogue-ca")
    both = "extendedKeyUsage=serverAuth,clientAuth\n"
    _leaf(d, "server", "ca", f"subjectAltName=IP:127.0.0.1,DNS:localhost\n{both}")
    _leaf(d, "client", "ca", f"subjectAltName=IP:127.0.0.1\n{both}")
    _leaf(d, "rogue", "rogue-ca", f"subjectAltName=IP:127.0.0.1\n{both}")
    return Pki(
        ca=d / "ca.pem",
        server=TlsFiles(d / "server.pem", d / "server.key", d / "ca.pem"),
        client=TlsFiles(d / "client.pem", d / "client.key", d / "ca.pem"),
        rogue=TlsFiles(d / "rogue.pem", d / "rogue.key", d / "ca.pem"),
    )


def test_rest_is_served_over_https_and_the_cli_trusts_the_configured_ca(
    pki: Pki, tmp_path: Path
) -> None:
    env = dict(
        os.environ,
        GPU_PLATFORM_LOG_FORMAT="json",
        GPU_PLATFORM_GRPC_PORT="-1",
        GPU_PLATFORM_RAFT_PORT="0",
        GPU_PLATFORM_AGENT_PORT="0",
        GPU_PLATFORM_TLS_CERT_FILE=str(pki.server.cert),
        GPU_PLATFORM_TLS_KEY_FILE=str(pki.server.key),
    )
    log = (tmp_path / "server.log").open("wb")
    proc = subprocess.Popen(
        [*ENTRY, "serve", "--port", "0", "--data-dir", str(tmp_path / "data")],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    port = wait_for_ports(tmp_path / "data", proc)["rest"]
    url = f"https://127.0.0.1:{port}"
    ctx = ssl.create_default_context(cafile=str(pki.ca))

    def up() -> bool:
        try:
            return httpx.get(f"{url}/healthz", verify=ctx, timeout=1).status_code == 200
        except httpx.HTTPError:
            return proc.poll() is not None

    try:
        assert wait_for(up) and proc.poll() is None, (tmp_path / "server.log").read_text()
        with pytest.raises(httpx.HTTPError):  # the system roots do not know our CA
            httpx.get(f"{url}/healthz", timeout=5)
        with pytest.raises(httpx.HTTPError):  # and nothing answers in plaintext
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
        cli = subprocess.run(
            [*ENTRY, "--cacert", str(pki.ca), "status", "--server", url, "-o", "json"],
            check=False,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert cli.returncode == 0 and '"gpus_total": 8' in cli.stdout, cli.stderr
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


@pytest.fixture
def grpc_tls(pki: Pki, tmp_path: Path, inventory: Inventory) -> Iterator[str]:
    settings = Settings(
        server_id=0,  # the embedded core: these test the APIs over in-process fakes
        data_dir=tmp_path,
        grpc_port=0,
        tls_cert_file=pki.server.cert,
        tls_key_file=pki.server.key,
        tls_client_ca_file=pki.ca,
    )
    container = Container(settings=settings)
    container.adapters.discovery.override(providers.Object(InMemoryGpuDiscovery(inventory)))
    container.adapters.store.override(providers.Object(InMemoryJobStore()))
    container.adapters.runner.override(providers.Object(FakeJobRunner()))
    container.adapters.ids.override(providers.Object(SequentialJobIds()))
    container.init_resources()
    server = container.grpc_server()
    assert server is not None
    try:
        yield server.address
    finally:
        container.shutdown_resources()


def _status(address: str, credentials: grpc.ChannelCredentials | None) -> grpc.StatusCode:
    channel = (
        grpc.insecure_channel(address)
        if credentials is None
        else grpc.secure_channel(address, credentials)
    )
    with channel:
        try:
            pb_grpc.ClusterServiceStub(channel).GetStatus(pb.GetStatusRequest(), timeout=5)
        except grpc.RpcError as exc:
            return exc.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


def test_grpc_with_a_client_ca_admits_only_clients_with_a_certificate_from_it(
    pki: Pki, grpc_tls: str
) -> None:
    assert _status(grpc_tls, pki.client.grpc_channel_credentials()) == grpc.StatusCode.OK
    ca_only = grpc.ssl_channel_credentials(root_certificates=pki.ca.read_bytes())
    assert _status(grpc_tls, ca_only) == grpc.StatusCode.UNAVAILABLE  # no client certificate
    assert _status(grpc_tls, pki.rogue.grpc_channel_credentials()) == grpc.StatusCode.UNAVAILABLE
    assert _status(grpc_tls, None) == grpc.StatusCode.UNAVAILABLE  # plaintext


def _hello(to: int) -> Message:
    return Message(MessageType.HEARTBEAT, to=to, from_=1, term=1, commit=0)


def _server_cert(pki: Pki, server_id: int) -> TlsFiles:
    """A member certificate of server `server_id` from the test CA (Raft asks for one)."""
    d = pki.ca.parent
    cert, key = issue(
        (d / "ca.pem").read_bytes(),
        (d / "ca.key").read_bytes(),
        Member("server", str(server_id)),
        hosts=("127.0.0.1",),
        days=1,
    )
    (d / f"server-{server_id}.pem").write_bytes(cert)
    (d / f"server-{server_id}.key").write_bytes(key)
    return TlsFiles(d / f"server-{server_id}.pem", d / f"server-{server_id}.key", pki.ca)


@pytest.mark.parametrize("kind", [GrpcRaftTransport, TcpRaftTransport], ids=["grpc", "tcp"])
def test_the_raft_transport_speaks_mtls_and_refuses_a_peer_from_another_ca(
    pki: Pki, kind: type[GrpcRaftTransport | TcpRaftTransport]
) -> None:
    peers = {1: f"127.0.0.1:{reserve_port()}", 2: f"127.0.0.1:{reserve_port()}"}
    a = kind(1, peers, tls=_server_cert(pki, 1))
    b = kind(2, peers, tls=_server_cert(pki, 2))
    got: queue.Queue[Message] = queue.Queue()
    a.start(lambda m: None, lambda p: None, lambda p, ok: None)
    b.start(got.put, lambda p: None, lambda p, ok: None)
    try:
        a.send([_hello(2)])
        assert got.get(timeout=20) == _hello(2)
    finally:
        a.stop()
    rogue = kind(1, peers, tls=TlsFiles(pki.rogue.cert, pki.rogue.key, pki.ca))
    unreachable: queue.Queue[int] = queue.Queue()
    rogue.start(lambda m: None, unreachable.put, lambda p, ok: None)
    try:
        rogue.send([_hello(2)])
        assert unreachable.get(timeout=20) == 2
        assert got.empty()
    finally:
        rogue.stop()
        b.stop()
