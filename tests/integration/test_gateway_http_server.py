"""The gateway's own HTTP/1.1 server (`GatewayHttpServer`) at the protocol level: raw sockets on
loopback against a real server on its own event loop, in front of a real model-server process
and a scripted replica that holds a stream open (`gpu_platform.testing.scripted_replica`).

The OpenAI-level behaviour on this server (errors, limits, usage, the `openai` client) is in
tests/integration/test_gateway.py, which runs a whole `gpu-platform serve` with `gateway_port`.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import httpx
import pytest
from prometheus_client import CollectorRegistry

from gpu_platform.adapters.inbound.gateway import GatewayHandler, GatewayHttpServer, GatewaySettings
from gpu_platform.adapters.outbound.observability.gateway_metrics import PrometheusGatewayMetrics
from gpu_platform.application.auth import OpenAccess
from gpu_platform.application.gateway.ledger import ServingLedger
from gpu_platform.infrastructure.config import Settings
from gpu_platform.infrastructure.gateway import GatewayServer
from gpu_platform.ports.inbound.model_routes import ReplicaAddress
from gpu_platform.ports.outbound.gateway_metrics import NoGatewayMetrics
from gpu_platform.testing.member_pki import MemberPki
from gpu_platform.testing.model_routes import StaticModelRoutes
from gpu_platform.testing.model_server import ModelServerProcess, spawn_model_server
from gpu_platform.testing.scripted_replica import ScriptedReplica
from tests.integration.conftest import wait_for

MAX_BODY = 4096


@dataclass
class Served:
    port: int
    registry: CollectorRegistry
    hold: ScriptedReplica
    replica: ModelServerProcess

    def connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        return sock

    def count(self, model: str, code: int) -> float:
        labels = {"model": model, "tenant": "default", "code": str(code)}
        value = self.registry.get_sample_value("gpu_platform_gateway_requests_total", labels)
        return value or 0.0


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    replica = spawn_model_server("tiny", replica_id="t1")
    hold = ScriptedReplica("hold").__enter__()
    routes = StaticModelRoutes()
    routes.set_model("tiny", "default", [ReplicaAddress("t1", replica.url)])
    routes.set_model("hold", "default", [ReplicaAddress("h1", hold.url)])
    registry = CollectorRegistry()
    handler = GatewayHandler(
        routes=routes,
        access=OpenAccess(),
        settings=GatewaySettings(max_body_bytes=MAX_BODY),
        metrics=PrometheusGatewayMetrics(registry),
    )
    server = GatewayHttpServer(handler)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(server.start("127.0.0.1", 0), loop).result(10)
        yield Served(server.port, registry, hold, replica)
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(grace_s=1), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        hold.__exit__()
        replica.stop()


def _post(path: str, body: bytes, *extra: str) -> bytes:
    head = [f"POST {path} HTTP/1.1", "host: gw", "content-type: application/json"]
    head += [f"content-length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def _chat(stream: bool = False, model: str = "tiny") -> bytes:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    return json.dumps({**body, "stream": stream}).encode()


def _head(reader: BinaryIO) -> tuple[int, dict[str, str]]:
    status_line = reader.readline()
    assert status_line.startswith(b"HTTP/1.1 "), status_line
    headers: dict[str, str] = {}
    while (line := reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers


def _chunk(reader: BinaryIO) -> bytes:
    size = int(reader.readline().split(b";")[0], 16)
    data = reader.read(size)
    assert reader.read(2) == b"\r\n"
    return data


def _response(reader: BinaryIO) -> tuple[int, dict[str, str], bytes]:
    status, headers = _head(reader)
    if headers.get("transfer-encoding") == "chunked":
        parts = []
        while part := _chunk(reader):  # the last, empty one with its CRLF: no trailers
            parts.append(part)
        return status, headers, b"".join(parts)
    return status, headers, reader.read(int(headers["content-length"]))


def test_pipelined_requests_on_one_connection_are_answered_in_order(served: Served) -> None:
    with served.connect() as sock, sock.makefile("rb") as reader:
        sock.sendall(_post("/v1/chat/completions", _chat()) + b"GET /v1/models HTTP/1.1\r\n\r\n")
        status, _, body = _response(reader)
        assert status == 200 and json.loads(body)["system_fingerprint"] == "t1"
        status, _, body = _response(reader)
        assert status == 200 and {m["id"] for m in json.loads(body)["data"]} == {"tiny", "hold"}
        sock.sendall(_post("/v1/completions", json.dumps({"model": "tiny"}).encode()))
        status, headers, body = _response(reader)  # the same connection, kept alive
        assert status == 200 and "connection" not in headers
        assert json.loads(body)["object"] == "text_completion"


def test_a_stream_is_relayed_as_it_comes_not_when_the_replica_ends_it(served: Served) -> None:
    served.hold.release.clear()
    with served.connect() as sock, sock.makefile("rb") as reader:
        sock.sendall(_post("/v1/chat/completions", _chat(stream=True, model="hold")))
        status, headers = _head(reader)
        assert status == 200 and headers["transfer-encoding"] == "chunked"
        assert headers["content-type"] == "text/event-stream"
        # the replica holds the rest of its stream until released: had the gateway buffered,
        # this read would wait for ever (the socket's timeout, a failure)
        assert _chunk(reader) == b'data: {"n":1}\n\n'
        served.hold.release.set()
        rest = b""
        while part := _chunk(reader):
            rest += part
        assert rest == b'data: {"n":2}\n\ndata: [DONE]\n\n'
        sock.sendall(_post("/v1/chat/completions", _chat()))  # kept alive after a stream
        assert _response(reader)[0] == 200


def test_a_client_that_leaves_mid_stream_closes_the_replicas_connection_as_a_499(
    served: Served,
) -> None:
    served.hold.release.clear()
    closed, left = served.hold.closed_by_peer, served.count("hold", 499)
    with served.connect() as sock, sock.makefile("rb") as reader:
        sock.sendall(_post("/v1/chat/completions", _chat(stream=True, model="hold")))
        assert _head(reader)[0] == 200
        assert _chunk(reader) == b'data: {"n":1}\n\n'
    assert wait_for(lambda: served.hold.closed_by_peer == closed + 1, timeout=10)
    assert wait_for(lambda: served.count("hold", 499) == left + 1, timeout=10)


def test_a_malformed_request_is_a_400_in_openai_shape_and_the_connection_closes(
    served: Served,
) -> None:
    with served.connect() as sock, sock.makefile("rb") as reader:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\ncontent-length: x\r\n\r\n")
        status, headers, body = _response(reader)
        assert status == 400 and headers["connection"] == "close"
        error = json.loads(body)["error"]
        assert error["code"] == "invalid_request" and "malformed" in error["message"]
        assert reader.read() == b""  # closed


def test_a_body_over_the_limit_is_a_413_after_it_was_read_and_the_connection_closes(
    served: Served,
) -> None:
    body = b'{"model": "tiny", "pad": "' + b"x" * (3 * MAX_BODY) + b'"}'
    with served.connect() as sock, sock.makefile("rb") as reader:
        request = _post("/v1/chat/completions", body)
        for i in range(0, len(request), 1000):  # in pieces, as a slow client sends it
            sock.sendall(request[i : i + 1000])
        status, headers, answer = _response(reader)
        assert status == 413 and headers["connection"] == "close"
        assert json.loads(answer)["error"]["code"] == "request_too_large"
        assert reader.read() == b""


def test_an_unknown_path_is_404_and_expect_100_continue_is_answered(served: Served) -> None:
    with served.connect() as sock, sock.makefile("rb") as reader:
        sock.sendall(b"GET /v1/jobs?limit=1 HTTP/1.1\r\nhost: gw\r\n\r\n")
        status, _, body = _response(reader)
        assert status == 404 and json.loads(body)["error"]["code"] == "unknown_url"
        body = _chat()
        head = _post("/v1/chat/completions", body, "expect: 100-continue")[: -len(body)]
        sock.sendall(head)
        assert reader.readline() == b"HTTP/1.1 100 Continue\r\n" and reader.readline() == b"\r\n"
        sock.sendall(body)
        assert _response(reader)[0] == 200


def test_a_request_head_over_64_kib_is_refused_with_431(served: Served) -> None:
    with served.connect() as sock, sock.makefile("rb") as reader:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nx-big: " + b"a" * (70 << 10) + b"\r\n\r\n")
        status, headers, _ = _response(reader)
        assert status == 431 and headers["connection"] == "close"


def test_http_1_0_gets_its_answer_and_then_the_connection_closes(served: Served) -> None:
    with served.connect() as sock, sock.makefile("rb") as reader:
        sock.sendall(b"GET /v1/models HTTP/1.0\r\n\r\n")
        status, headers, _ = _response(reader)
        assert status == 200 and headers["connection"] == "close"
        assert reader.read() == b""


def test_with_tls_the_gateway_port_serves_clients_with_a_certificate_of_the_ca(
    tmp_path: Path, served: Served
) -> None:
    pki = MemberPki(tmp_path)
    settings = Settings(gateway_port=0, data_dir=tmp_path / "data")
    routes = StaticModelRoutes()
    routes.set_model("tiny", "default", [ReplicaAddress("t1", served.replica.url)])
    server_files = pki.tls("server", "1")
    gateway = GatewayServer(
        settings, routes, OpenAccess(), NoGatewayMetrics(), ServingLedger(),
        server_files.uvicorn_options(),
    )  # fmt: skip
    gateway.start()
    try:
        client_files = pki.plain("client")
        trust = ssl.create_default_context(cafile=str(pki.ca))
        trust.load_cert_chain(str(client_files.cert), str(client_files.key))
        url = f"https://127.0.0.1:{gateway.port}"
        with httpx.Client(base_url=url, verify=trust, timeout=10) as client:
            answer = client.post("/v1/chat/completions", content=_chat())
            assert answer.status_code == 200 and answer.json()["system_fingerprint"] == "t1"
        anonymous = ssl.create_default_context(cafile=str(pki.ca))  # no client certificate
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"{url}/v1/models", verify=anonymous, timeout=10)
    finally:
        gateway.stop()
