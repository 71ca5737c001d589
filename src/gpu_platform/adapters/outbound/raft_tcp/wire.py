"""The TCP transport's wire format: a hello, its answer, and length-prefixed batch frames.

One TCP connection carries one direction, sender -> receiver:

* hello (sender): `b"GPRT"`, version (1 byte), sender id and receiver id (u64 each), token
  length (u16) and the cluster token (UTF-8; empty without one);
* answer (receiver): status (1 byte, 0 admitted / 1 refused), reason length (u16), reason
  (UTF-8) — after a refusal the receiver closes the connection;
* then frames (sender): length (u32, big-endian) and a batch of messages packed with `struct`
  (`frames`; version 1 carried a serialized `raft_pb2.Batch`, 20-60 µs per message to build
  or read from Python).

A peer that speaks the gRPC Raft transport instead (an HTTP/2 client preface for a hello, a
SETTINGS frame for an answer: `mismatch`) is a `GrpcPeer`, a `WireError` of its own.

Anything else — a wrong magic or version, a frame longer than `MAX_FRAME`, bytes that do not
parse as a batch, a message the core cannot represent — is a `WireError`: the receiver drops
that connection (and nothing of the frame is delivered).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from gpu_platform.adapters.outbound.raft_tcp.frames import FrameError, pack_batch, unpack_batch
from gpu_platform.adapters.outbound.raft_tcp.mismatch import is_grpc_answer, is_grpc_hello
from gpu_platform.domain.consensus import Message

__all__ = [
    "MAX_FRAME",
    "GrpcPeer",
    "Hello",
    "WireError",
    "decode_batch",
    "encode_answer",
    "encode_frame",
    "encode_hello",
    "read_answer",
    "read_frame",
    "read_hello",
]

MAGIC = b"GPRT"
VERSION = 2  # 2: `frames`' struct layout (1: protobuf batches)
MAX_FRAME = 256 * 1024 * 1024  # bytes; the gRPC transport's message cap (snapshots travel whole)
_HELLO = struct.Struct(">4sBQQH")
_ANSWER = struct.Struct(">BH")
_LEN = struct.Struct(">I")


class WireError(ValueError):
    """The peer sent something that is not this protocol."""


class GrpcPeer(WireError):
    """The peer speaks HTTP/2: it uses the gRPC Raft transport, not this one."""


class Reader(Protocol):
    def read(self, n: int, /) -> bytes: ...


def _exact(f: Reader, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise EOFError("connection closed")
    return data


@dataclass(frozen=True, slots=True)
class Hello:
    sender: int
    receiver: int
    token: str | None


def encode_hello(sender: int, receiver: int, token: str | None) -> bytes:
    raw = (token or "").encode()
    return _HELLO.pack(MAGIC, VERSION, sender, receiver, len(raw)) + raw


def read_hello(f: Reader) -> Hello:
    head = _exact(f, _HELLO.size)
    if is_grpc_hello(head):
        raise GrpcPeer("the peer opened with the HTTP/2 preface (the gRPC Raft transport)")
    magic, version, sender, receiver, n = _HELLO.unpack(head)
    if magic != MAGIC or version != VERSION:
        raise WireError(f"not a gpu-platform Raft peer (greeting {magic!r}, version {version})")
    try:
        token = _exact(f, n).decode()
    except UnicodeDecodeError:
        raise WireError("the cluster token is not UTF-8") from None
    return Hello(sender, receiver, token or None)


def encode_answer(refusal: str | None) -> bytes:
    raw = (refusal or "").encode()[:65535]
    return _ANSWER.pack(0 if refusal is None else 1, len(raw)) + raw


def read_answer(f: Reader) -> str | None:
    """None when admitted, else the receiver's reason for refusing."""
    head = _exact(f, _ANSWER.size)
    status, n = _ANSWER.unpack(head)
    if status != 1 and n:  # an admission has no reason: not an answer
        head += f.read(9 - len(head))  # the rest of an HTTP/2 frame header, if it is one
        if is_grpc_answer(head):
            raise GrpcPeer("the peer answered with an HTTP/2 SETTINGS frame (gRPC transport)")
        raise WireError(f"not a gpu-platform Raft answer ({head!r})")
    reason = _exact(f, n).decode(errors="replace")
    if status not in (0, 1):
        raise WireError(f"unknown answer status {status}")
    return None if status == 0 else reason or "refused"


def encode_frame(sender: int, receiver: int, messages: Sequence[Message]) -> bytes:
    """One frame (length + batch) carrying `messages`; may exceed `MAX_FRAME` (check it)."""
    body = pack_batch(sender, receiver, messages)
    return _LEN.pack(len(body)) + body


def read_frame(f: Reader) -> bytes:
    """The next frame's body (raises EOFError at a clean end, WireError on a bad length)."""
    header = f.read(_LEN.size)
    if not header:
        raise EOFError("connection closed")
    if len(header) != _LEN.size:
        raise EOFError("connection closed inside a frame header")
    (n,) = _LEN.unpack(header)
    if n > MAX_FRAME:
        raise WireError(f"frame of {n} bytes is over the {MAX_FRAME}-byte cap")
    return _exact(f, n)


def decode_batch(body: bytes) -> tuple[int, int, list[Message]]:
    """(sender, receiver, messages) of a frame body; WireError if it is not a valid batch."""
    try:
        return unpack_batch(body)
    except FrameError as exc:
        raise WireError(f"frame is not a Raft batch ({exc})") from None
