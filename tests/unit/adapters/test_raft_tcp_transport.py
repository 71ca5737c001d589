"""TcpRaftTransport's own promises, on real loopback sockets: garbage is dropped without hurting
the node, and only members of this cluster speak (token, member id, mutual-TLS certificate
rules as on the gRPC transport), each refusal audited.

The transport contract both transports share is in test_raft_grpc_transport.py.
"""

from __future__ import annotations

import queue
import socket
import ssl
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.raft_tcp import TcpRaftTransport
from gpu_platform.adapters.outbound.raft_tcp.transport import DIRECT_ENTRIES
from gpu_platform.adapters.outbound.raft_tcp.wire import (
    MAX_FRAME,
    encode_frame,
    encode_hello,
    read_answer,
)
from gpu_platform.adapters.tcp_security import client_context
from gpu_platform.adapters.tls import TlsFiles
from gpu_platform.domain.consensus import Message, MessageType
from gpu_platform.domain.model.audit import AuditRecord
from gpu_platform.testing.member_pki import MemberPki
from tests.unit.adapters.test_raft_grpc_transport import app

TOKEN = "gpc_raft_tcp_members_0001"
WAIT = 20.0


def beat(sender: int, commit: int = 0) -> Message:
    return Message(MessageType.HEARTBEAT, to=1, from_=sender, term=1, commit=commit)


class Member:
    """Node 1 listening (peers 2 and 3 are never dialled), what it received and audited."""

    def __init__(self, tls: TlsFiles | None = None) -> None:
        self.audit: list[AuditRecord] = []
        self.got: queue.Queue[Message] = queue.Queue()
        peers = {1: "127.0.0.1:0", 2: "127.0.0.1:1", 3: "127.0.0.1:1"}
        self.t = TcpRaftTransport(1, peers, token=TOKEN, tls=tls, audit=self.audit.append)
        self.t.start(self.got.put, lambda _: None, lambda _p, _ok: None)
        host, _, port = self.t.addresses[1].rpartition(":")
        self.address = (host, int(port))

    def dial(
        self, sender: int, token: str | None = TOKEN, tls: TlsFiles | None = None
    ) -> tuple[socket.socket, str | None]:
        """A hand-made sender: connect, say hello; the socket and the answer's refusal."""
        sock = socket.create_connection(self.address, timeout=WAIT)
        if tls is not None:
            sock = client_context(tls).wrap_socket(sock, server_hostname="127.0.0.1")
        sock.sendall(encode_hello(sender, 1, token))
        with sock.makefile("rb") as f:
            return sock, read_answer(f)


def closed_by_peer(sock: socket.socket) -> bool:
    """Whether the other end closes the connection (anything it answers first is skipped)."""
    sock.settimeout(WAIT)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return False
    except (ConnectionResetError, ssl.SSLError):
        pass
    return True


@pytest.fixture
def member() -> Iterator[Member]:
    m = Member()
    yield m
    m.t.stop()


def test_a_member_with_the_token_is_admitted_and_its_frames_delivered_in_order(
    member: Member,
) -> None:
    sock, refusal = member.dial(2)
    with sock:
        assert refusal is None
        for i in range(3):
            sock.sendall(encode_frame(2, 1, [beat(2, i)]))
        assert [member.got.get(timeout=WAIT).commit for _ in range(3)] == [0, 1, 2]
    assert member.audit == []


@pytest.mark.parametrize("token", [None, "gpc_some_other_cluster_000"])
def test_a_sender_without_this_clusters_token_is_refused_and_audited(
    member: Member, token: str | None
) -> None:
    sock, refusal = member.dial(2, token=token)
    with sock:
        assert refusal is not None and "this is cluster c-" in refusal
        assert closed_by_peer(sock)
    assert member.t.stats.refused == 1 and member.got.empty()
    assert [a.action for a in member.audit] == ["raft.connect"]
    assert member.audit[0].outcome.startswith("refused: it presents")


def test_an_invented_node_with_the_right_token_is_not_a_member(member: Member) -> None:
    sock, refusal = member.dial(99)
    sock.close()
    assert refusal == "raft: refused, node 99 is not a member of this cluster"
    assert member.audit[-1].actor == "server 99"


@pytest.mark.parametrize(
    "garbage",
    [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",  # not a Raft peer at all
        encode_hello(2, 1, TOKEN) + struct.pack(">I", MAX_FRAME + 1),  # a frame over the cap
        encode_hello(2, 1, TOKEN) + struct.pack(">I", 5) + b"\xff" * 5,  # not a Batch
        encode_hello(2, 1, TOKEN) + encode_frame(3, 1, [beat(3)]),  # 2's link, 3's frame
    ],
    ids=["http", "oversized-frame", "undecodable-frame", "another-senders-frame"],
)
def test_a_peer_sending_garbage_is_disconnected_and_the_node_goes_on(
    member: Member, garbage: bytes
) -> None:
    with socket.create_connection(member.address, timeout=WAIT) as sock:
        sock.sendall(garbage)
        assert closed_by_peer(sock)
    assert member.got.empty()
    assert member.t.stats.garbage == 1
    good, refusal = member.dial(2)  # a real peer is still served
    with good:
        assert refusal is None
        good.sendall(encode_frame(2, 1, [beat(2, 7)]))
        assert member.got.get(timeout=WAIT) == beat(2, 7)


def test_a_member_removed_while_connected_is_refused_from_its_next_frame(
    member: Member,
) -> None:
    sock, refusal = member.dial(2)
    with sock:
        assert refusal is None
        sock.sendall(encode_frame(2, 1, [beat(2, 1)]))
        assert member.got.get(timeout=WAIT) == beat(2, 1)
        member.t.remove_peer(2)
        sock.sendall(encode_frame(2, 1, [beat(2, 2)]))
        assert closed_by_peer(sock)
    assert member.got.empty()
    assert [a.outcome for a in member.audit] == ["refused: node 2 is not a member of this cluster"]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> MemberPki:
    return MemberPki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def mtls_member(pki: MemberPki) -> Iterator[Member]:
    m = Member(tls=pki.tls("server", "1"))
    yield m
    m.t.stop()


@pytest.mark.parametrize(
    ("who", "sender", "admitted"),
    [
        (("server", "2"), 2, True),
        (("client", "alice"), 2, False),
        (("agent", "node-a"), 2, False),
        (("plain", "alice"), 2, False),
        (("server", "2"), 3, False),
    ],
    ids=["own-server-cert", "cli-user-cert", "agent-cert", "cert-binding-no-member", "other-id"],
)
def test_with_mtls_only_a_server_certificate_naming_the_sender_is_admitted(
    pki: MemberPki, mtls_member: Member, who: tuple[str, str], sender: int, admitted: bool
) -> None:
    role, name = who
    tls = pki.plain(name) if role == "plain" else pki.tls(role, name)
    before = len(mtls_member.audit)
    sock, refusal = mtls_member.dial(sender, tls=tls)
    sock.close()
    if admitted:
        assert refusal is None and len(mtls_member.audit) == before
    else:
        assert refusal is not None and "its certificate" in refusal
        assert len(mtls_member.audit) == before + 1
        assert mtls_member.audit[-1].actor.startswith(f"server {sender}")


def test_with_mtls_a_sender_without_a_certificate_is_not_served(mtls_member: Member) -> None:
    ctx = ssl.create_default_context(cafile=str(mtls_member.t.tls.ca))
    raw = socket.create_connection(mtls_member.address, timeout=WAIT)
    with pytest.raises((ssl.SSLError, ConnectionResetError, EOFError)):
        sock = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        sock.sendall(encode_hello(2, 1, TOKEN))
        with sock.makefile("rb") as f:
            read_answer(f)
    raw.close()
    assert mtls_member.got.empty()


def test_with_mtls_peers_holding_their_own_server_certificates_exchange_messages(
    pki: MemberPki,
) -> None:
    b = TcpRaftTransport(2, {1: "127.0.0.1:1", 2: "127.0.0.1:0"}, tls=pki.tls("server", "2"), token=TOKEN)  # fmt: skip
    got: queue.Queue[Message] = queue.Queue()
    b.start(got.put, lambda _: None, lambda _p, _ok: None)
    a = TcpRaftTransport(1, {1: "127.0.0.1:0", 2: b.addresses[2]}, tls=pki.tls("server", "1"), token=TOKEN)  # fmt: skip
    a.start(lambda _: None, lambda _: None, lambda _p, _ok: None)
    b.add_peer(1, a.addresses[1])
    try:
        hello = Message(MessageType.HEARTBEAT, to=2, from_=1, term=1, commit=0)
        a.send([hello])
        assert got.get(timeout=WAIT) == hello
        assert b.stats.refused == 0
    finally:
        a.stop()
        b.stop()


@pytest.mark.parametrize("role", ["agent", "client"])
def test_a_peer_serving_with_an_agents_or_users_certificate_is_unreachable(
    pki: MemberPki, role: str, tmp_path: Path
) -> None:
    """Their certificates lack serverAuth: the dialling member refuses the handshake."""
    impostor = TcpRaftTransport(
        2, {2: "127.0.0.1:0"}, tls=pki.tls(role, "x", hosts=("127.0.0.1",)), token=TOKEN
    )
    got: queue.Queue[Message] = queue.Queue()
    impostor.start(got.put, lambda _: None, lambda _p, _ok: None)
    unreachable: queue.Queue[int] = queue.Queue()
    a = TcpRaftTransport(
        1, {1: "127.0.0.1:0", **impostor.addresses}, tls=pki.tls("server", "1"), token=TOKEN
    )
    a.start(lambda _: None, unreachable.put, lambda _p, _ok: None)
    try:
        a.send([Message(MessageType.HEARTBEAT, to=2, from_=1, term=1, commit=0)])
        assert unreachable.get(timeout=WAIT) == 2
        assert got.empty() and a.stats.sent == 0
    finally:
        a.stop()
        impostor.stop()


def test_large_groups_go_by_the_link_thread_in_order_with_small_ones_sent_directly() -> None:
    b = TcpRaftTransport(2, {1: "127.0.0.1:1", 2: "127.0.0.1:0"})
    got: queue.Queue[Message] = queue.Queue()
    b.start(got.put, lambda _: None, lambda _p, _ok: None)
    a = TcpRaftTransport(1, {1: "127.0.0.1:0", 2: b.addresses[2]})
    a.start(lambda _: None, lambda _: None, lambda _p, _ok: None)
    try:
        a.send([app(0)])
        assert got.get(timeout=WAIT) == app(0)
        link = a._links[2]  # white box: wait until its writer has handed the socket back
        deadline = time.monotonic() + WAIT
        while link._busy and time.monotonic() < deadline:
            time.sleep(0.01)
        sent = [app(1)]
        a.send(sent)  # an idle link: written on this thread
        assert a.stats.direct == 1
        for i in range(2, 61):
            group = [app(i)] if i % 3 else [app(i)] * (DIRECT_ENTRIES // 2 + 1)  # > the limit
            a.send(group)
            sent += group
        assert [got.get(timeout=WAIT) for _ in sent] == sent
    finally:
        a.stop()
        b.stop()


def test_stop_closes_every_socket_and_ends_every_thread() -> None:
    before = set(threading.enumerate())
    member = Member()
    peers = {1: f"{member.address[0]}:{member.address[1]}", 2: "127.0.0.1:0"}
    a = TcpRaftTransport(2, peers, token=TOKEN)
    a.start(lambda _: None, lambda _: None, lambda _p, _ok: None)
    a.send([beat(2, 5)])
    assert member.got.get(timeout=WAIT) == beat(2, 5)  # both sides have their threads up
    a.stop()
    member.t.stop()
    assert [t.name for t in set(threading.enumerate()) - before] == []
    assert member.t._listener is None and member.t._inbound == {}
