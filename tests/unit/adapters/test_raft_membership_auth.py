"""Only members of this cluster speak Raft: a sender with no or another cluster's token, or a
node id that is not a peer, is refused (and nothing it sent is delivered)."""

from __future__ import annotations

import queue
from collections.abc import Iterator

import grpc
import pytest

from gpu_platform.adapters.cluster_identity import TOKEN_METADATA
from gpu_platform.adapters.outbound.raft_grpc import GrpcRaftTransport, encode_message
from gpu_platform.adapters.outbound.raft_grpc.v1 import raft_pb2 as pb
from gpu_platform.adapters.outbound.raft_grpc.v1 import raft_pb2_grpc as pb_grpc
from gpu_platform.domain.consensus import Message, MessageType
from gpu_platform.testing.ports import reserve_port
from tests.unit.adapters.test_raft_grpc_transport import WAIT, app

TOKEN = "gpc_raft_members_only_0001"


@pytest.fixture
def member() -> Iterator[tuple[GrpcRaftTransport, queue.Queue[Message]]]:
    peers = {1: f"127.0.0.1:{reserve_port()}", 2: f"127.0.0.1:{reserve_port()}"}
    t = GrpcRaftTransport(1, peers, token=TOKEN)
    got: queue.Queue[Message] = queue.Queue()
    t.start(got.put, lambda _: None, lambda _p, _ok: None)
    yield t, got
    t.stop()


def forged(sender: int) -> pb.Batch:
    message = Message(MessageType.HEARTBEAT, to=1, from_=sender, term=99, commit=10**6)
    return pb.Batch(from_id=sender, to_id=1, messages=[encode_message(message)])


def call(t: GrpcRaftTransport, batch: pb.Batch, token: str | None) -> grpc.RpcError:
    metadata = ((TOKEN_METADATA, token),) if token else ()
    with grpc.insecure_channel(t.addresses[1]) as channel:
        stub = pb_grpc.RaftStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            stub.Send(batch, metadata=metadata, timeout=WAIT)
    return refused.value


@pytest.mark.parametrize("token", [None, "gpc_some_other_cluster_000"])
def test_a_sender_without_this_clusters_token_is_unauthenticated(
    member: tuple[GrpcRaftTransport, queue.Queue[Message]], token: str | None
) -> None:
    t, got = member
    error = call(t, forged(2), token)
    assert error.code() is grpc.StatusCode.UNAUTHENTICATED
    assert "this is cluster c-" in (error.details() or "")
    assert got.empty() and t.stats.refused == 1


def test_an_invented_node_with_the_right_token_is_not_a_member(
    member: tuple[GrpcRaftTransport, queue.Queue[Message]],
) -> None:
    t, got = member
    error = call(t, forged(99), TOKEN)
    assert error.code() is grpc.StatusCode.PERMISSION_DENIED
    assert "node 99 is not a member" in (error.details() or "")
    assert got.empty()


def test_members_sharing_the_token_talk_as_before() -> None:
    peers = {1: f"127.0.0.1:{reserve_port()}", 2: f"127.0.0.1:{reserve_port()}"}
    a, b = GrpcRaftTransport(1, peers, token=TOKEN), GrpcRaftTransport(2, peers, token=TOKEN)
    got: queue.Queue[Message] = queue.Queue()
    a.start(lambda _: None, lambda _: None, lambda _p, _ok: None)
    b.start(got.put, lambda _: None, lambda _p, _ok: None)
    try:
        a.send([app(i) for i in range(5)])
        assert [got.get(timeout=WAIT).index for _ in range(5)] == list(range(5))
        assert b.stats.refused == 0
    finally:
        a.stop()
        b.stop()
