"""The receiving side of `GrpcRaftTransport` (transport.py): the `Raft` gRPC service.

`Send` takes one batch per call; `Stream` takes a peer's long-lived client stream, admits the
sender once (its token and certificate are the stream's), refuses a sender that changes or is
removed meanwhile, and reports the peer unreachable when its latest stream ends (a follower
then campaigns at its next tick; docs/raft.md, failover).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import grpc
import grpc.aio

from gpu_platform.adapters.member_gate import Refusal
from gpu_platform.adapters.outbound.raft_grpc.codec import decode_message
from gpu_platform.adapters.outbound.raft_grpc.v1 import raft_pb2 as pb
from gpu_platform.adapters.outbound.raft_grpc.v1 import raft_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from gpu_platform.adapters.outbound.raft_grpc.transport import GrpcRaftTransport

__all__ = ["RaftServicer"]


class RaftServicer(pb_grpc.RaftServicer):
    """The `Raft` service of one `GrpcRaftTransport`: admits members only, hands what they
    send to the transport's `on_message`, and reports a peer whose stream ended."""

    def __init__(self, transport: GrpcRaftTransport) -> None:
        self._t = transport

    def _deliver(self, request: pb.Batch) -> int:
        t = self._t
        handler = t._on_message
        accepted = 0
        if handler is not None and request.to_id == t.id:
            for p in request.messages:
                handler(decode_message(p))
                accepted += 1
        t.stats.received += accepted
        return accepted

    async def Send(self, request: pb.Batch, context: grpc.aio.ServicerContext) -> pb.Ack:  # noqa: N802
        await self._admit(request, context)
        return pb.Ack(node_id=self._t.id, accepted=self._deliver(request))

    async def _admit(self, request: pb.Batch, context: grpc.aio.ServicerContext) -> None:
        """Refuse (log, count and audit) a sender that is not a current member of this
        cluster: the gate's checks (certificate role and id, token), then a node id that is
        not among this server's peers."""
        t = self._t
        claimed = str(request.from_id)
        refusal = t.gate.check(context, claimed)
        if refusal is None and (request.from_id not in t.addresses or request.from_id == t.id):
            refusal = Refusal(
                grpc.StatusCode.PERMISSION_DENIED,
                f"node {request.from_id} is not a member of this cluster",
            )
        if refusal is not None:
            t.gate.record(context, claimed, refusal.reason)
            t.stats.refused += 1
            await context.abort(refusal.code, f"raft: refused, {refusal.reason}")

    async def Stream(  # noqa: N802
        self, request_iterator: AsyncIterator[pb.Batch], context: grpc.aio.ServicerContext
    ) -> pb.Ack:
        accepted = 0
        admitted = False
        sender = 0
        me = object()
        try:
            async for request in request_iterator:
                if not admitted:  # the token and certificate are the stream's: checked once
                    await self._admit(request, context)
                    admitted = True
                    sender = request.from_id
                    self._t._inbound[sender] = me
                elif request.from_id != sender:
                    await context.abort(grpc.StatusCode.PERMISSION_DENIED, "raft: sender changed")
                elif sender not in self._t._addresses:  # removed while its stream was open
                    await self._admit(request, context)
                if request.to_id != self._t.id:  # misrouted: refuse the whole stream
                    await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "wrong node")
                accepted += self._deliver(request)
        finally:
            if sender and self._t._inbound.get(sender) is me:
                del self._t._inbound[sender]
                self._t._peer_gone(sender)
        return pb.Ack(node_id=self._t.id, accepted=accepted)
