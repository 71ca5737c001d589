"""Several agent-stream messages sent as one (`AgentBatch`, `ServerBatch`).

Each message on a grpc.aio stream costs both ends tens of microseconds whatever its size, and
the stream carries four per job (launch, its answer, the exit, its ack). A side that finds
several messages queued sends them as one batch, which the other side reads as if each had
come alone, in order. A side batches only when the other said it reads batches (`Hello.batches`,
`Welcome.batches`), so an agent or server of an earlier release still gets single messages.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from gpu_platform.adapters.agent_wire.v1 import agent_pb2 as pb

__all__ = ["BATCH_BYTES", "agent_messages", "pack_agent", "pack_server", "server_messages"]

#: A batch is closed at this many bytes, well under the server's 4 MiB receive limit (a log
#: read's answer may be a large part of it; one message over it still goes alone).
BATCH_BYTES = 1 << 20

_M = TypeVar("_M", pb.ServerMessage, pb.AgentMessage)


def pack_server(items: Sequence[pb.ServerMessage]) -> Iterator[pb.ServerMessage]:
    """`items` in order as few messages as fit under `BATCH_BYTES` each."""
    return _pack(items, lambda group: pb.ServerMessage(batch=pb.ServerBatch(messages=group)))


def pack_agent(items: Sequence[pb.AgentMessage]) -> Iterator[pb.AgentMessage]:
    """`items` in order as few messages as fit under `BATCH_BYTES` each."""
    return _pack(items, lambda group: pb.AgentMessage(batch=pb.AgentBatch(messages=group)))


def server_messages(msg: pb.ServerMessage) -> Sequence[pb.ServerMessage]:
    """The messages `msg` carries: those of a batch, else itself."""
    return msg.batch.messages if msg.HasField("batch") else (msg,)


def agent_messages(msg: pb.AgentMessage) -> Sequence[pb.AgentMessage]:
    """The messages `msg` carries: those of a batch, else itself. A batch may not hold a
    batch or a hello (a `ValueError`): those are read only at the top level."""
    if not msg.HasField("batch"):
        return (msg,)
    inner = msg.batch.messages
    for one in inner:
        if one.WhichOneof("kind") in ("batch", "hello"):
            raise ValueError(f"batch: may not hold a {one.WhichOneof('kind')}")
    return inner


def _pack(items: Sequence[_M], wrap: Callable[[list[_M]], _M]) -> Iterator[_M]:
    for group in _groups(items):
        yield group[0] if len(group) == 1 else wrap(group)


def _groups(items: Sequence[_M]) -> Iterator[list[_M]]:
    if len(items) == 1:  # the common case: no sizes to read
        yield [items[0]]
        return
    group: list[_M] = []
    size = 0
    for item in items:
        n = item.ByteSize()
        if group and size + n > BATCH_BYTES:
            yield group
            group, size = [], 0
        group.append(item)
        size += n
    if group:
        yield group
