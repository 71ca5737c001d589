"""Request size limits and stream hygiene on a real uvicorn server and a real gRPC server:
an oversized body is refused with 413 before it is read, a gRPC message over the limit is
RESOURCE_EXHAUSTED, a `logs?follow=true` loop ends when its client goes, and `/metrics`
can require a token."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator

import grpc
import httpx
import pytest
import uvicorn
from dependency_injector import providers

from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2_grpc as pb_grpc
from gpu_platform.adapters.outbound.sim import default_node
from gpu_platform.domain.model.node import Inventory
from gpu_platform.domain.model.tenancy import Role
from gpu_platform.infrastructure.config import Settings
from gpu_platform.infrastructure.container import Container
from gpu_platform.testing.fakes import (
    FakeJobRunner,
    InMemoryGpuDiscovery,
    InMemoryJobStore,
    SequentialJobIds,
)

from .conftest import wait_for

LIMIT = 1 << 20  # the default max_request_bytes


class Served:
    def __init__(self, container: Container, url: str, port: int) -> None:
        self.container, self.url, self.port = container, url, port
        access = container.access()
        boot = access.bootstrap()
        assert boot is not None
        self.admin = boot.secret
        root = access.authenticate(boot.secret)
        access.create_tenant(root, "a")
        self._root = root

    def token(self, role: Role = Role.USER) -> str:
        return self.container.access().create_token(self._root, "t", "a", role).secret

    def follows(self) -> int:
        return int(self.container.rest_app().state.follows.live)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    settings = Settings(
        server_id=0,
        data_dir=tmp_path_factory.mktemp("limits"),
        grpc_port=0,
        auth="on",
        metrics_auth="token",
        schedule_interval_seconds=0.05,
        health_source="sim",
    )
    assert settings.max_request_bytes == LIMIT
    container = Container(settings=settings)
    inventory = Inventory((default_node(),), source="sim", simulated=True)
    container.adapters.discovery.override(providers.Object(InMemoryGpuDiscovery(inventory)))
    container.adapters.store.override(providers.Object(InMemoryJobStore()))
    container.adapters.runner.override(providers.Object(FakeJobRunner()))
    container.adapters.ids.override(providers.Object(SequentialJobIds()))
    container.init_resources()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(container.rest_app(), log_config=None, lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        assert wait_for(lambda: server.started)
        yield Served(container, f"http://127.0.0.1:{port}", port)
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
        container.shutdown_resources()


def _raw(port: int, head: bytes) -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", port), timeout=10)
    conn.sendall(head)
    return conn


def _response(conn: socket.socket) -> tuple[int, dict[str, str], bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        assert chunk, f"connection closed before a response: {data!r}"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(lines[0].split()[1]), headers, body


def test_a_declared_body_over_the_limit_is_413_before_a_byte_of_it_is_sent(
    served: Served,
) -> None:
    head = (
        "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {served.token()}\r\nContent-Length: 200000000\r\n\r\n"
    ).encode()
    with _raw(served.port, head) as conn:  # the 200 MB body is never sent
        status, headers, body = _response(conn)
        assert status == 413 and headers["connection"] == "close"
        problem = json.loads(body)
        assert problem["type"] == "urn:gpu-platform:problem:payload-too-large"
        assert f"{LIMIT} bytes" in problem["detail"] and "max_request_bytes" in problem["detail"]
        assert conn.recv(1) == b""  # the server closed the connection


def test_a_chunked_body_is_refused_once_it_passes_the_limit_not_at_its_end(
    served: Served,
) -> None:
    head = (
        "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {served.token()}\r\nTransfer-Encoding: chunked\r\n\r\n"
    ).encode()
    piece = b"x" * 65536
    with _raw(served.port, head) as conn:
        for _ in range(LIMIT // len(piece) + 2):  # just past the limit; the body never ends
            conn.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
        status, _, body = _response(conn)
        assert status == 413 and "max_request_bytes" in json.loads(body)["detail"]


def test_a_body_within_the_limit_is_still_read(served: Served) -> None:
    h = {"Authorization": f"Bearer {served.token()}"}
    r = httpx.post(f"{served.url}/v1/jobs", json={"command": ["fake-forever"]}, headers=h)
    assert r.status_code == 201, r.text


def test_a_grpc_message_over_the_limit_is_resource_exhausted_before_any_handler(
    served: Served,
) -> None:
    server = served.container.grpc_server()
    assert server is not None
    md = (("authorization", f"Bearer {served.token()}"),)
    big = pb.SubmitJobRequest(command=["fake-forever"], env={"BLOB": "x" * (LIMIT + 1)})
    with grpc.insecure_channel(server.address) as channel, pytest.raises(grpc.RpcError) as err:
        pb_grpc.JobServiceStub(channel).SubmitJob(big, metadata=md)
    # without the limit the handler answers INVALID_ARGUMENT (env over max_env_bytes)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def _follow_then_leave(served: Served, job_id: str, token: str) -> None:
    before = served.follows()
    head = (
        f"GET /v1/jobs/{job_id}/logs?follow=true HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {token}\r\n\r\n"
    ).encode()
    conn = _raw(served.port, head)
    assert wait_for(lambda: served.follows() == before + 1)
    conn.close()
    assert wait_for(lambda: served.follows() == before), "the polling loop outlived its client"


def test_a_follow_waiting_for_a_job_to_start_ends_when_the_client_disconnects(
    served: Served,
) -> None:
    token = served.token()
    h = {"Authorization": f"Bearer {token}"}
    first = httpx.post(f"{served.url}/v1/jobs", json={"command": ["fake-forever"]}, headers=h)
    body = {"command": ["fake-forever"], "depends_on": [first.json()["id"]]}  # never starts
    job = httpx.post(f"{served.url}/v1/jobs", json=body, headers=h)
    assert job.status_code == 201, job.text
    _follow_then_leave(served, job.json()["id"], token)


def test_a_follow_of_a_silent_running_job_ends_when_the_client_disconnects(
    served: Served,
) -> None:
    token = served.token()
    h = {"Authorization": f"Bearer {token}"}
    job = httpx.post(f"{served.url}/v1/jobs", json={"command": ["fake-forever"]}, headers=h)
    job_id = job.json()["id"]
    running: Callable[[], bool] = lambda: (  # noqa: E731
        httpx.get(f"{served.url}/v1/jobs/{job_id}", headers=h).json()["state"] == "RUNNING"
    )
    assert wait_for(running)
    _follow_then_leave(served, job_id, token)


def test_metrics_need_a_read_only_token_when_metrics_auth_is_token(served: Served) -> None:
    url = f"{served.url}/metrics"
    assert httpx.get(url).status_code == 401
    user = httpx.get(url, headers={"Authorization": f"Bearer {served.token(Role.USER)}"})
    assert user.status_code == 403 and "viewer" in user.json()["detail"]
    viewer = httpx.get(url, headers={"Authorization": f"Bearer {served.token(Role.VIEWER)}"})
    assert viewer.status_code == 200 and "gpu_platform" in viewer.text
