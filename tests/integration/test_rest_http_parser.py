"""The REST port's parser (httptools with h11's bound on a request head) answers as h11 did:
real uvicorn servers on loopback, raw sockets, the same requests to both parsers."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn

from gpu_platform.infrastructure.rest_http import MAX_HEAD_BYTES, BoundedHttpToolsProtocol


async def _echo(scope: Any, receive: Any, send: Any) -> None:
    """Answers 200 with the size of the body it read."""
    size, more = 0, True
    while more:
        message = await receive()
        size += len(message.get("body", b""))
        more = message.get("more_body", False)
    body = str(size).encode()
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture(scope="module", params=["h11", "bounded-httptools"])
def port(request: pytest.FixtureRequest) -> Iterator[int]:
    http = "h11" if request.param == "h11" else BoundedHttpToolsProtocol
    config = uvicorn.Config(
        _echo, host="127.0.0.1", port=0, http=http, log_config=None, lifespan="off"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def _exchange(port: int, *pieces: bytes) -> bytes:
    """Send the pieces (one write each), then read until the server closes or goes quiet."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        for piece in pieces:
            try:
                sock.sendall(piece)
            except (BrokenPipeError, ConnectionResetError):
                break  # refused part-way: the answer is already there
        sock.settimeout(1.0)
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except TimeoutError:
            pass
        except ConnectionResetError:
            pass
        return answer


def _get(extra_header_bytes: int, *, body: bytes = b"") -> bytes:
    head = (
        b"POST /x HTTP/1.1\r\nhost: t\r\nx-pad: "
        + b"a" * extra_header_bytes
        + b"\r\ncontent-length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
    )
    return head + body


def test_a_head_under_the_bound_is_served(port: int) -> None:
    answer = _exchange(port, _get(MAX_HEAD_BYTES - 1024), _get(10, body=b"x" * 5))
    assert answer.count(b"HTTP/1.1 200 OK") >= 1


def test_a_head_still_incomplete_past_the_bound_is_refused_with_400_and_closed(port: int) -> None:
    # h11's bound is on what it buffers of an incomplete head: sent in pieces, it shows
    request = _get(MAX_HEAD_BYTES * 2)
    pieces = [request[i : i + 1024] for i in range(0, len(request), 1024)]
    answer = _exchange(port, *pieces)
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert answer.endswith(b"Invalid HTTP request received.")
    assert b"connection: close" in answer.lower()


def test_a_body_far_over_the_head_bound_does_not_count_and_keep_alive_goes_on(port: int) -> None:
    body = b"b" * (MAX_HEAD_BYTES * 8)
    first = _get(10, body=body)
    answer = _exchange(port, first[:100], first[100:], _get(10, body=b"xy"))
    assert answer.count(b"HTTP/1.1 200 OK") == 2
    assert answer.endswith(b"2") and str(len(body)).encode() in answer
