"""add_peer / remove_peer on every RaftTransport: gRPC and TCP on loopback, and the in-memory one.

The same behaviour is asked of both: an added peer is in the address book and receives what is
sent to it; a removed one leaves the book and what is sent to it is dropped.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gpu_platform.adapters.outbound.raft_grpc import GrpcRaftTransport
from gpu_platform.adapters.outbound.raft_tcp import TcpRaftTransport
from gpu_platform.domain.consensus import Message, MessageType
from gpu_platform.ports.outbound.raft import RaftTransport
from gpu_platform.testing.ports import reserve_port
from gpu_platform.testing.raft_fakes import InMemoryRaftHub
from tests.unit.adapters.test_raft_grpc_transport import WAIT

Pair = tuple[RaftTransport, "queue.Queue[Message]", str, Callable[[], int]]


def heartbeat(to: int) -> Message:
    return Message(MessageType.HEARTBEAT, to=to, from_=1, term=2)


def _ignore(*_: Any) -> None:
    return None


@pytest.fixture(params=["grpc", "tcp", "memory"])
def pair(request: pytest.FixtureRequest) -> Iterator[Pair]:
    """Transport 1 (knowing only itself) and the inbox of node 2, with 2's address."""
    got: queue.Queue[Message] = queue.Queue()
    if request.param != "memory":
        kind = GrpcRaftTransport if request.param == "grpc" else TcpRaftTransport
        addr1, addr2 = f"127.0.0.1:{reserve_port()}", f"127.0.0.1:{reserve_port()}"
        a = kind(1, {1: addr1})
        b = kind(2, {1: addr1, 2: addr2})
        a.start(_ignore, _ignore, _ignore)
        b.start(got.put, _ignore, _ignore)
        yield a, got, addr2, lambda: a.stats.dropped_failed
        a.stop()
        b.stop()
    else:
        hub = InMemoryRaftHub()
        ma, mb = hub.transport(1), hub.transport(2)
        ma.remove_peer(2)  # start from a book without node 2, like the gRPC one
        ma.start(_ignore, _ignore, _ignore)
        mb.start(got.put, _ignore, _ignore)
        yield ma, got, "memory:2", lambda: ma.dropped
        hub.close()


def test_an_added_peer_is_in_the_book_and_receives_messages(pair: Pair) -> None:
    t, inbox, addr, _ = pair
    assert 2 not in t.addresses
    t.add_peer(2, addr)
    t.add_peer(2, addr)  # idempotent
    assert t.addresses[2] == addr
    t.send([heartbeat(2)])
    assert inbox.get(timeout=WAIT) == heartbeat(2)


def test_a_removed_peer_leaves_the_book_and_gets_nothing_more(pair: Pair) -> None:
    t, inbox, addr, dropped = pair
    t.add_peer(2, addr)
    t.send([heartbeat(2)])
    assert inbox.get(timeout=WAIT) == heartbeat(2)
    t.remove_peer(2)
    t.remove_peer(2)  # idempotent
    assert 2 not in t.addresses
    before = dropped()
    t.send([heartbeat(2)])
    t.stop()  # drains what was queued
    assert dropped() == before + 1
    assert inbox.empty()
