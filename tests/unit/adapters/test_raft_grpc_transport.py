"""The Raft transports on real loopback sockets: delivery, order, failures, snapshots, overflow.

One contract, run against both adapters: `GrpcRaftTransport` (grpcio) and `TcpRaftTransport`
(plain sockets); the codec they share is checked here too.
"""

from __future__ import annotations

import queue
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.adapters.outbound.raft_grpc import (
    GrpcRaftTransport,
    decode_message,
    encode_message,
    parse_peers,
)
from gpu_platform.adapters.outbound.raft_grpc.v1 import raft_pb2
from gpu_platform.adapters.outbound.raft_tcp import TcpRaftTransport
from gpu_platform.domain.consensus import (
    ConfState,
    Entry,
    EntryType,
    Message,
    MessageType,
    Snapshot,
    SnapshotMetadata,
)
from gpu_platform.ports.outbound.raft import RaftTransport
from gpu_platform.testing.ports import reserve_port
from gpu_platform.testing.raft_strategies import raft_messages

ROOT = Path(__file__).resolve().parents[3]
WAIT = 20.0  # generous: the machine is shared


SNAP = Snapshot(
    b"state" * 100,
    SnapshotMetadata(ConfState(voters=(1, 2), learners=(3,), auto_leave=True), 42, 7),
)


def app(i: int) -> Message:
    return Message(
        MessageType.APP,
        to=2,
        from_=1,
        term=3,
        log_term=2,
        index=i,
        entries=(Entry(3, i + 1, EntryType.NORMAL, b"x%d" % i), Entry(3, i + 2, EntryType.CONF_CHANGE, b"{}")),
        commit=i,
        context=b"ctx",
    )  # fmt: skip


Transport = Any  # GrpcRaftTransport | TcpRaftTransport (same constructor, same stats names)
TRANSPORTS: dict[str, type[Transport]] = {"grpc": GrpcRaftTransport, "tcp": TcpRaftTransport}


@pytest.fixture(params=sorted(TRANSPORTS))
def transport(request: pytest.FixtureRequest) -> type[Transport]:
    """Each contract test runs once per transport."""
    return TRANSPORTS[request.param]


class Collector:
    def __init__(self) -> None:
        self.messages: queue.Queue[Message] = queue.Queue()
        self.unreachable: queue.Queue[int] = queue.Queue()
        self.snapshots: queue.Queue[tuple[int, bool]] = queue.Queue()

    def start(self, t: Transport) -> None:
        t.start(self.messages.put, self.unreachable.put, lambda p, ok: self.snapshots.put((p, ok)))


@pytest.fixture
def pair(
    transport: type[Transport],
) -> Iterator[tuple[Transport, Transport, Collector, Collector]]:
    peers = {1: f"127.0.0.1:{reserve_port()}", 2: f"127.0.0.1:{reserve_port()}"}
    a, b = transport(1, peers), transport(2, peers)
    ca, cb = Collector(), Collector()
    ca.start(a)
    cb.start(b)
    yield a, b, ca, cb
    a.stop()
    b.stop()


def test_every_message_field_survives_the_wire_encoding() -> None:
    msgs = [
        app(5),
        Message(MessageType.SNAP, to=3, from_=1, term=9, snapshot=SNAP),
        Message(MessageType.VOTE_RESP, to=1, from_=2, term=4, reject=True, reject_hint=17),
        Message(MessageType.HEARTBEAT, to=2, from_=1, term=1, commit=3, context=b"\x00\xff"),
    ]
    for m in msgs:
        assert decode_message(encode_message(m)) == m


messages = raft_messages(st.integers(0, 2**31))


@settings(max_examples=200, deadline=None)
@given(m=messages)
def test_any_message_survives_the_wire_encoding(m: Message) -> None:
    wire = encode_message(m).SerializeToString()
    assert decode_message(raft_pb2.Message.FromString(wire)) == m


def test_the_address_book_lists_every_peer(transport: type[Transport]) -> None:
    peers = {1: "127.0.0.1:1", 2: "127.0.0.1:2", 3: "h:3"}
    assert transport(2, peers).addresses == peers


def test_the_transport_satisfies_the_port_protocol(transport: type[Transport]) -> None:
    assert isinstance(transport(1, {1: "127.0.0.1:1"}), RaftTransport)


def test_a_peer_list_is_parsed_from_the_command_line_form() -> None:
    assert parse_peers("1=127.0.0.1:7001, 2=h:7002") == {1: "127.0.0.1:7001", 2: "h:7002"}
    with pytest.raises(ValueError):
        parse_peers("1:7001")


def test_messages_to_a_peer_arrive_complete_and_in_order(pair) -> None:  # type: ignore[no-untyped-def]
    a, _b, _ca, cb = pair
    for i in range(300):
        a.send([app(i)])
    got = [cb.messages.get(timeout=WAIT) for _ in range(300)]
    assert got == [app(i) for i in range(300)]


def test_a_delivered_snapshot_is_reported_to_the_sender(pair) -> None:  # type: ignore[no-untyped-def]
    a, _b, ca, cb = pair
    snapshot_message = Message(MessageType.SNAP, to=2, from_=1, term=9, snapshot=SNAP)
    a.send([snapshot_message])
    received = cb.messages.get(timeout=WAIT)
    assert received == snapshot_message
    assert ca.snapshots.get(timeout=WAIT) == (2, True)


def test_a_down_peer_is_reported_unreachable_and_its_snapshot_lost(
    transport: type[Transport],
) -> None:
    peers = {1: f"127.0.0.1:{reserve_port()}", 2: f"127.0.0.1:{reserve_port()}"}
    a = transport(1, peers, rpc_timeout=1.0)
    ca = Collector()
    ca.start(a)
    try:
        a.send([Message(MessageType.SNAP, to=2, from_=1, term=9, snapshot=SNAP)])
        assert ca.unreachable.get(timeout=WAIT) == 2
        assert ca.snapshots.get(timeout=WAIT) == (2, False)
    finally:
        a.stop()


def test_a_peer_that_comes_back_receives_again_after_backoff(transport: type[Transport]) -> None:
    peers = {1: f"127.0.0.1:{reserve_port()}", 2: f"127.0.0.1:{reserve_port()}"}
    a = transport(1, peers, rpc_timeout=1.0, backoff_max=0.2)
    ca, cb = Collector(), Collector()
    ca.start(a)
    try:
        a.send([app(0)])
        assert ca.unreachable.get(timeout=WAIT) == 2
        b = transport(2, peers)
        cb.start(b)
        try:
            got = None
            for i in range(1, 200):  # Raft would retransmit; so do we until one lands
                a.send([app(i)])
                try:
                    got = cb.messages.get(timeout=0.5)
                    break
                except queue.Empty:
                    continue
            assert got is not None and got.type is MessageType.APP
        finally:
            b.stop()
    finally:
        a.stop()


def test_batches_to_a_peer_share_one_stream_that_is_reopened_in_order_after_a_restart(
    transport: type[Transport],
) -> None:
    peers = {1: f"127.0.0.1:{reserve_port()}", 2: f"127.0.0.1:{reserve_port()}"}
    a = transport(1, peers, backoff_max=0.2)
    ca, cb = Collector(), Collector()
    ca.start(a)
    b = transport(2, peers)
    cb.start(b)
    try:
        for i in range(100):
            a.send([app(i)])
        assert [cb.messages.get(timeout=WAIT) for _ in range(100)] == [app(i) for i in range(100)]
        assert a.stats.streams == 1  # a hundred batches, one stream
        b.stop()
        restarted, cr = transport(2, peers), Collector()
        cr.start(restarted)
        try:
            first = None
            for i in range(100, 400):  # Raft would retransmit; so do we until one lands
                a.send([app(i)])
                try:
                    first = cr.messages.get(timeout=0.5)
                    break
                except queue.Empty:
                    continue
            assert first is not None
            for i in range(1000, 1200):
                a.send([app(i)])
            later = [cr.messages.get(timeout=WAIT) for _ in range(200)]
            after = [m.index for m in later if m.index >= 1000]
            assert after == list(range(1000, 1200))  # nothing lost or reordered once back
            assert a.stats.streams >= 2  # a new stream to the restarted peer
        finally:
            restarted.stop()
    finally:
        b.stop()
        a.stop()


def test_a_peer_whose_link_to_us_closes_is_reported_unreachable_once_and_not_on_our_stop(
    pair,  # type: ignore[no-untyped-def]
) -> None:
    a, b, ca, cb = pair
    a.send([app(0)])
    assert cb.messages.get(timeout=WAIT) == app(0)
    assert cb.unreachable.empty()  # an open link says nothing
    a.stop()  # as kill -9 does, this closes its sockets: a follower of it campaigns at once
    assert cb.unreachable.get(timeout=WAIT) == 1
    b.stop()
    assert ca.unreachable.empty() and cb.unreachable.empty()


def test_send_never_blocks_and_drops_when_a_peer_outbox_is_full(transport: type[Transport]) -> None:
    peers = {1: f"127.0.0.1:{reserve_port()}", 2: f"127.0.0.1:{reserve_port()}"}
    a = transport(1, peers, outbox_limit=10, rpc_timeout=1.0, backoff_initial=5.0)
    ca = Collector()
    ca.start(a)
    try:
        a.send([app(0)])
        assert ca.unreachable.get(timeout=WAIT) == 2  # the sender now backs off for 5 s
        a.send([app(i) for i in range(1, 100)])
        a.stop()  # drains the event loop: every _enqueue has run
        assert a.stats.dropped_overflow == 89
    finally:
        a.stop()


def test_stop_is_idempotent_and_send_after_stop_is_ignored(pair) -> None:  # type: ignore[no-untyped-def]
    a, _b, _ca, _cb = pair
    a.stop()
    a.stop()
    a.send([app(1)])


def test_the_generated_raft_code_matches_the_proto(tmp_path: Path) -> None:
    proto = "gpu_platform/adapters/outbound/raft_grpc/v1/raft.proto"
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{ROOT / 'src'}", f"--python_out={tmp_path}",
         f"--grpc_python_out={tmp_path}", str(ROOT / "src" / proto)],
        check=True,
    )  # fmt: skip
    for name in ("raft_pb2.py", "raft_pb2_grpc.py"):
        generated = (tmp_path / Path(proto).parent / name).read_text()
        committed = (ROOT / "src" / Path(proto).parent / name).read_text()
        assert generated == committed, f"{name} is stale: run `make proto`"
