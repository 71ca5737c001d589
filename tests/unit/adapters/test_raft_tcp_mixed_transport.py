"""Servers on different Raft transports: the TCP transport recognises a gRPC peer, whichever
side dials, and says so in one warning per peer address (not one per reconnect), naming the
address and the fix. Real `GrpcRaftTransport`s and `TcpRaftTransport`s on loopback, in the
clear and with mutual TLS (where the handshake agrees on HTTP/2 by ALPN)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import structlog

from gpu_platform.adapters.outbound.raft_grpc import GrpcRaftTransport
from gpu_platform.adapters.outbound.raft_tcp import TcpRaftTransport
from gpu_platform.adapters.outbound.raft_tcp.mismatch import (
    PREFACE,
    TransportMismatch,
    is_grpc_answer,
)
from gpu_platform.adapters.tcp_security import ALPN, client_context
from gpu_platform.adapters.tls import TlsFiles
from gpu_platform.domain.consensus import Message, MessageType
from gpu_platform.testing.member_pki import MemberPki

WAIT = 20.0  # generous: the machine is shared


def ignore(*_: object) -> None:
    return None


def beat(to: int, sender: int) -> Message:
    return Message(MessageType.HEARTBEAT, to=to, from_=sender, term=1)


def keep_sending(t: Any, to: int, sender: int, done: Callable[[], bool]) -> None:
    """Send heartbeats to `to` (each failure drops them) until `done()`; fails at WAIT."""
    deadline = time.monotonic() + WAIT
    while not done():
        assert time.monotonic() < deadline, "the peer was not recognised in time"
        t.send([beat(to, sender)])
        time.sleep(0.02)


def warnings(lines: list[dict[str, Any]]) -> list[str]:
    return [str(x["event"]) for x in lines if x["log_level"] == "warning"]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> MemberPki:
    return MemberPki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(params=["plain", "mtls"])
def tls(request: pytest.FixtureRequest, pki: MemberPki) -> Callable[[int], TlsFiles | None]:
    """Each server's TLS files by node id (None in the clear)."""
    if request.param == "plain":
        return lambda _node: None
    return lambda node: pki.tls("server", str(node))


@pytest.fixture
def grpc_node(tls: Callable[[int], TlsFiles | None]) -> Iterator[GrpcRaftTransport]:
    """A gRPC Raft server, node 1 (its peer 2 is never dialled)."""
    g = GrpcRaftTransport(1, {1: "127.0.0.1:0", 2: "127.0.0.1:1"}, tls=tls(1))
    g.start(ignore, ignore, ignore)
    yield g
    g.stop()


@pytest.fixture
def tcp_node(tls: Callable[[int], TlsFiles | None]) -> Iterator[TcpRaftTransport]:
    """A TCP Raft server, node 4 (its peer 5 is never dialled)."""
    t = TcpRaftTransport(4, {4: "127.0.0.1:0", 5: "127.0.0.1:1"}, tls=tls(4))
    t.start(ignore, ignore, ignore)
    yield t
    t.stop()


def test_a_tcp_node_dialing_a_grpc_server_warns_once_naming_its_address_and_keeps_trying(
    grpc_node: GrpcRaftTransport, tls: Callable[[int], TlsFiles | None]
) -> None:
    address = grpc_node.addresses[1]
    t = TcpRaftTransport(2, {2: "127.0.0.1:0", 1: address}, tls=tls(2))
    t.start(ignore, ignore, ignore)
    try:
        with structlog.testing.capture_logs() as lines:
            keep_sending(t, 1, 2, lambda: t.stats.grpc_out >= 3)  # three tries, one line
    finally:
        t.stop()
    (line,) = warnings(lines)
    assert f"raft peer 1 at {address} speaks the gRPC Raft transport" in line
    assert "this server uses tcp" in line and "GPU_PLATFORM_RAFT_TRANSPORT" in line
    assert t.stats.garbage == 0 and t.stats.streams == 0


def test_a_grpc_node_dialing_a_tcp_server_is_refused_with_one_warning_naming_its_address(
    tcp_node: TcpRaftTransport, tls: Callable[[int], TlsFiles | None]
) -> None:
    g = GrpcRaftTransport(3, {3: "127.0.0.1:0", 4: tcp_node.addresses[4]}, tls=tls(3))
    g.start(ignore, ignore, ignore)
    try:
        with structlog.testing.capture_logs() as lines:
            keep_sending(g, 4, 3, lambda: tcp_node.stats.grpc_in >= 2)  # it reconnected
    finally:
        g.stop()
    (line,) = warnings(lines)
    assert line.startswith("raft peer 127.0.0.1:") and "speaks the gRPC Raft transport" in line
    assert "this server uses tcp" in line and "GPU_PLATFORM_RAFT_TRANSPORT" in line
    assert tcp_node.stats.garbage == 0 and tcp_node.stats.received == 0


def test_an_http2_preface_is_counted_apart_from_garbage() -> None:
    t = TcpRaftTransport(4, {4: "127.0.0.1:0", 5: "127.0.0.1:1"})
    t.start(ignore, ignore, ignore)
    host, _, port = t.addresses[4].rpartition(":")
    try:
        for _ in range(3):
            with socket.create_connection((host, int(port)), timeout=WAIT) as sock:
                sock.sendall(PREFACE)
                assert sock.recv(64) == b""  # closed without an answer
    finally:
        t.stop()
    assert t.stats.grpc_in == 3 and t.stats.garbage == 0


def test_the_warning_comes_again_per_address_only_after_the_window() -> None:
    now = [0.0]
    m = TransportMismatch(window=60.0, clock=lambda: now[0])
    with structlog.testing.capture_logs() as lines:
        for t in (0.0, 1.0, 59.0):
            now[0] = t
            m.outbound(1, "10.0.0.1:7000")
            m.inbound("10.0.0.2", 40000 + int(t))
        now[0] = 60.0
        m.outbound(1, "10.0.0.1:7000")
        m.inbound("10.0.0.2", 41000)
    assert len(warnings(lines)) == 4  # each address at 0 s and again at 60 s


def test_a_settings_frame_is_recognised_and_a_tcp_answer_is_not() -> None:
    settings = bytes.fromhex("000018040000000000")
    assert is_grpc_answer(settings)
    assert not is_grpc_answer(b"\x00\x00\x00" + b"\x00" * 6)  # admitted answer, then a frame
    assert not is_grpc_answer(bytes.fromhex("000018010400000001"))  # HEADERS on stream 1


def test_two_tcp_peers_over_tls_agree_on_their_own_alpn_not_http2(pki: MemberPki) -> None:
    t = TcpRaftTransport(4, {4: "127.0.0.1:0", 5: "127.0.0.1:1"}, tls=pki.tls("server", "4"))
    t.start(ignore, ignore, ignore)
    host, _, port = t.addresses[4].rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=WAIT) as raw:
            ctx = client_context(pki.tls("server", "5"))
            with ctx.wrap_socket(raw, server_hostname=host) as sock:
                assert sock.selected_alpn_protocol() == ALPN
    finally:
        t.stop()
    assert t.stats.grpc_in == 0
