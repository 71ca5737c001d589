"""The agents' stream as length-prefixed frames on a TCP (or TLS) connection.

The same `AgentMessage` / `ServerMessage` protobufs as the gRPC stream, and the same
conversation (hello, welcome, launches, exits, heartbeats...), without HTTP/2 and grpcio's
per-message machinery: on grpc.aio one agent message and its answer cost the server ~60 µs of
CPU, framed ~7 µs (docs/performance.md). `agent_transport = tcp` picks it (docs/agents.md).

    agent  -> server   MAGIC, frame(JSON {"token": ...}), then frame(AgentMessage) ...
    server -> agent    MAGIC, then frame(0x00 + ServerMessage) ..., frame(0x01 + JSON trailer)

A frame is a 4-byte big-endian length and that many bytes. The server's last frame is the
trailer, what a gRPC call's status and trailing metadata say: `{"code": "FAILED_PRECONDITION",
"details": "...", "leader": "host:port"}` (`leader` when the server knows who leads). A peer
that sends anything but MAGIC first is not speaking this protocol; a gRPC client's HTTP/2
preface is recognised and named (`GRPC_PREFACE`).
"""

from __future__ import annotations

import asyncio
import json
import struct
from dataclasses import dataclass

__all__ = [
    "GRPC_PREFACE",
    "MAGIC",
    "MESSAGE",
    "TRAILER",
    "FrameError",
    "Trailer",
    "frame",
    "parse_trailer",
    "read_frame",
    "trailer_frame",
]

MAGIC = b"GPU-PLATFORM-AGENT/1\n"
GRPC_PREFACE = b"PRI * HTTP/2.0"
MESSAGE = 0  # the first byte of a server frame: a ServerMessage follows
TRAILER = 1  # ... the trailer (JSON) follows; the stream ends
_LENGTH = struct.Struct(">I")


class FrameError(Exception):
    """The peer broke the framing (a frame too long, a bad trailer)."""


@dataclass(frozen=True, slots=True)
class Trailer:
    code: str  # a grpc.StatusCode name
    details: str = ""
    leader: str = ""  # the leader's agent address, when the server named one


def frame(payload: bytes) -> bytes:
    return _LENGTH.pack(len(payload)) + payload


def trailer_frame(trailer: Trailer) -> bytes:
    body: dict[str, str] = {"code": trailer.code, "details": trailer.details}
    if trailer.leader:
        body["leader"] = trailer.leader
    return frame(bytes([TRAILER]) + json.dumps(body).encode())


def parse_trailer(payload: bytes) -> Trailer:
    """The trailer in a server frame's `payload` (after its kind byte)."""
    try:
        body = json.loads(payload)
        return Trailer(str(body["code"]), str(body.get("details", "")), str(body.get("leader", "")))
    except (ValueError, KeyError, TypeError) as exc:
        raise FrameError(f"bad trailer: {exc}") from None


async def read_frame(reader: asyncio.StreamReader, limit: int) -> bytes | None:
    """The next frame's payload; None at a clean end of the stream (EOF between frames)."""
    try:
        head = await reader.readexactly(_LENGTH.size)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise FrameError("the stream ended inside a frame's length") from None
        return None
    (length,) = _LENGTH.unpack(head)
    if length > limit:
        raise FrameError(f"a frame of {length} bytes: more than the {limit} allowed")
    try:
        return await reader.readexactly(length)
    except asyncio.IncompleteReadError:
        raise FrameError("the stream ended inside a frame") from None
