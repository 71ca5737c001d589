"""The body of a TCP transport frame: Raft messages packed with `struct`, no protobuf.

Why not the gRPC transport's `raft_pb2.Batch`: building and reading protobuf objects field by
field from Python cost 20-60 µs per message (measured on this project's 2-core machine),
paid four times on a commit's path (leader encodes, follower decodes, and back); fixed
`struct` layouts cost a few µs.

Layout (big-endian; every count and length is checked against the body while decoding):

* batch: sender (u64), receiver (u64), message count (u32), then the messages;
* message: type (u8, position in `MessageType`), to, from, term, log term, index, commit
  (u64 each), reject (u8), reject hint (u64), entry count (u32), context length (u32),
  snapshot length (u32; 0 = none), then the context, the entries, the snapshot;
* entry: term, index (u64 each), type (u8, position in `EntryType`), data length (u32),
  data;
* snapshot (rare: the gRPC codec's `raft_pb2.Snapshot`, serialized).

The codes are positions in the core's enums, so both ends must run the same code: the
hello's version (`wire.VERSION`) says which layout a connection speaks.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from google.protobuf.message import DecodeError

from gpu_platform.adapters.outbound.raft_grpc.codec import decode_message, encode_message
from gpu_platform.adapters.outbound.raft_grpc.v1 import raft_pb2 as pb
from gpu_platform.domain.consensus import Entry, EntryType, Message, MessageType, Snapshot

__all__ = ["FrameError", "pack_batch", "unpack_batch"]

_BATCH = struct.Struct(">QQI")
_MSG = struct.Struct(">BQQQQQQBQIII")
_ENTRY = struct.Struct(">QQBI")
_TYPES = tuple(MessageType)
_TYPE_CODE = {t: n for n, t in enumerate(_TYPES)}
_ENTRY_TYPES = tuple(EntryType)
_ENTRY_CODE = {t: n for n, t in enumerate(_ENTRY_TYPES)}


class FrameError(ValueError):
    """The bytes are not a batch of this layout."""


def _snapshot_bytes(snapshot: Snapshot | None) -> bytes:
    if snapshot is None:
        return b""
    raw: bytes = encode_message(
        Message(MessageType.SNAP, snapshot=snapshot)
    ).snapshot.SerializeToString()
    return raw or b"\0"  # never empty: length 0 means "no snapshot"


def _snapshot(raw: bytes) -> Snapshot | None:
    if raw == b"\0":
        raw = b""
    try:
        p = pb.Message(type=MessageType.SNAP.value, snapshot=pb.Snapshot.FromString(raw))
    except DecodeError as exc:
        raise FrameError(f"snapshot: {exc}") from None
    return decode_message(p).snapshot


def pack_batch(sender: int, receiver: int, messages: Sequence[Message]) -> bytes:
    """The frame body carrying `messages` from `sender` to `receiver`."""
    parts = [_BATCH.pack(sender, receiver, len(messages))]
    add = parts.append
    msg, ent, codes, entry_codes = _MSG.pack, _ENTRY.pack, _TYPE_CODE, _ENTRY_CODE
    for m in messages:
        snap = _snapshot_bytes(m.snapshot)
        add(
            msg(
                codes[m.type],
                m.to,
                m.from_,
                m.term,
                m.log_term,
                m.index,
                m.commit,
                m.reject,
                m.reject_hint,
                len(m.entries),
                len(m.context),
                len(snap),
            )
        )
        if m.context:
            add(m.context)
        for e in m.entries:
            add(ent(e.term, e.index, entry_codes[e.type], len(e.data)))
            add(e.data)
        if snap:
            add(snap)
    return b"".join(parts)


def unpack_batch(body: bytes) -> tuple[int, int, list[Message]]:
    """(sender, receiver, messages) of a frame body; `FrameError` unless it is exactly one
    batch of this layout."""
    try:
        return _unpack(body)
    except (struct.error, IndexError, ValueError) as exc:
        raise FrameError(str(exc) or type(exc).__name__) from None


def _unpack(body: bytes) -> tuple[int, int, list[Message]]:
    sender, receiver, count = _BATCH.unpack_from(body, 0)
    pos, end = _BATCH.size, len(body)
    msg, ent = _MSG.unpack_from, _ENTRY.unpack_from
    msize, esize = _MSG.size, _ENTRY.size
    types, entry_types = _TYPES, _ENTRY_TYPES
    out: list[Message] = []
    for _ in range(count):
        (code, to, from_, term, log_term, index, commit, reject, hint, n_ents, n_ctx, n_snap) = msg(
            body, pos
        )
        pos += msize
        context = body[pos : pos + n_ctx]
        pos += n_ctx
        entries = []
        for _ in range(n_ents):
            e_term, e_index, e_code, n_data = ent(body, pos)
            pos += esize
            entries.append(Entry(e_term, e_index, entry_types[e_code], body[pos : pos + n_data]))
            pos += n_data
        snapshot = None
        if n_snap:
            snapshot = _snapshot(body[pos : pos + n_snap])
            pos += n_snap
        if pos > end or reject > 1:
            raise FrameError("a message runs past the end of the frame")
        out.append(
            Message(
                type=types[code],
                to=to,
                from_=from_,
                term=term,
                log_term=log_term,
                index=index,
                entries=tuple(entries),
                commit=commit,
                snapshot=snapshot,
                reject=bool(reject),
                reject_hint=hint,
                context=context,
            )
        )
    if pos != end:
        raise FrameError(f"{end - pos} bytes after the last message")
    return sender, receiver, out
