"""ReadIndex bookkeeping: linearizable reads without writing to the log (Raft thesis §6.4).

Theory of operation. A read request arriving at the leader records the current commit index
as its *read index*, then the leader confirms it is still leader by a heartbeat round carrying
the request's context; once a quorum acknowledges that context, every request queued up to it
is answered with its read index. The application serves the read when its applied index
reaches the read index. Requests are answered in arrival order (`queue`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpu_platform.domain.consensus.types import Message

__all__ = ["ReadIndexStatus", "ReadOnly"]


@dataclass(slots=True)
class ReadIndexStatus:
    req: Message
    index: int
    acks: dict[int, bool] = field(default_factory=dict)


class ReadOnly:
    """Pending read-index requests keyed by their context, in arrival order."""

    __slots__ = ("pending", "queue")

    def __init__(self) -> None:
        self.pending: dict[bytes, ReadIndexStatus] = {}
        self.queue: list[bytes] = []

    def add_request(self, index: int, m: Message) -> None:
        ctx = m.context
        if ctx in self.pending:
            return
        self.pending[ctx] = ReadIndexStatus(req=m, index=index)
        self.queue.append(ctx)

    def recv_ack(self, node: int, ctx: bytes) -> dict[int, bool] | None:
        """Record that `node` acknowledged the heartbeat carrying `ctx`; the acks so far."""
        rs = self.pending.get(ctx)
        if rs is None:
            return None
        rs.acks[node] = True
        return rs.acks

    def advance(self, ctx: bytes) -> list[ReadIndexStatus]:
        """Release every request queued up to and including `ctx`."""
        if ctx not in self.pending:
            return []
        pos = self.queue.index(ctx)
        released = [self.pending.pop(c) for c in self.queue[: pos + 1]]
        del self.queue[: pos + 1]
        return released

    def last_pending_request_ctx(self) -> bytes:
        return self.queue[-1] if self.queue else b""
