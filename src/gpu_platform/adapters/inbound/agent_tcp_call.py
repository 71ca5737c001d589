"""`FramedCall`: the agent's end of a framed stream (`agent_transport = tcp`), with what
`AgentClient` uses of a grpc.aio stream-stream call.

It connects (TCP, TLS, or the server's unix socket), says MAGIC and the cluster token, sends
what `requests` yields as frames, and is iterated for the server's messages. The server's
trailer ends it as a gRPC status would: OK ends the iteration; any other code raises
`grpc.aio.AioRpcError` with that code, its details and the leader's address in the trailing
metadata `gpu-platform-leader`, so the client's redirect, refusal and back-off rules are the
same for both transports. A connection that fails or breaks raises UNAVAILABLE; `cancel()`
closes it and the iteration raises `asyncio.CancelledError`, as a cancelled call's does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
from collections.abc import AsyncIterator

import grpc
import grpc.aio

from gpu_platform.adapters.agent_wire.framed import (
    MAGIC,
    MESSAGE,
    TRAILER,
    FrameError,
    frame,
    parse_trailer,
    read_frame,
)
from gpu_platform.adapters.agent_wire.v1 import agent_pb2 as pb
from gpu_platform.adapters.inbound.grpc.agent_service import LEADER_METADATA
from gpu_platform.adapters.tcp_security import tune

__all__ = ["FramedCall"]

MAX_SERVER_FRAME = 64 << 20  # a server message (a launch, a log read) fits
_HIGH_WATER = 1 << 20


def _status(code: grpc.StatusCode, details: str, leader: str = "") -> grpc.aio.AioRpcError:
    trailing = grpc.aio.Metadata(*([(LEADER_METADATA, leader)] if leader else []))
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailing, details)


class FramedCall:
    """One framed stream to `target` (host:port, or unix:PATH)."""

    def __init__(
        self,
        target: str,
        requests: AsyncIterator[pb.AgentMessage],
        *,
        token: str | None,
        tls: ssl.SSLContext | None,
        connect_timeout_s: float = 5.0,
    ) -> None:
        self._target = target
        self._requests = requests
        self._token = token or ""
        self._tls = tls
        self._timeout = connect_timeout_s
        self._writer: asyncio.StreamWriter | None = None
        self._sender: asyncio.Task[None] | None = None
        self._cancelled = False

    def cancel(self) -> None:
        self._cancelled = True
        if self._sender is not None:
            self._sender.cancel()
        if self._writer is not None:
            self._writer.close()

    def __aiter__(self) -> AsyncIterator[pb.ServerMessage]:
        return self._receive()

    async def _open(self) -> asyncio.StreamReader:
        target = self._target
        if target.startswith("unix:"):
            opening = asyncio.open_unix_connection(target[len("unix:") :])
        else:
            host, _, port = target.rpartition(":")
            host = host.strip("[]")
            server_name = host if self._tls is not None else None
            opening = asyncio.open_connection(
                host, int(port), ssl=self._tls, server_hostname=server_name
            )
        reader, writer = await asyncio.wait_for(opening, self._timeout)
        self._writer = writer
        sock = writer.get_extra_info("socket")
        if not target.startswith("unix:") and isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                tune(sock)
        writer.write(MAGIC + frame(json.dumps({"token": self._token}).encode()))
        head = await asyncio.wait_for(reader.readexactly(len(MAGIC)), self._timeout)
        if head != MAGIC:
            raise FrameError(
                f"{target} does not speak the framed agent protocol (is its agent_transport "
                "grpc? every server and agent of a cluster must use the same one)"
            )
        self._sender = asyncio.create_task(self._send(writer))
        return reader

    async def _send(self, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):  # broken: the receiving side raises UNAVAILABLE
            async for msg in self._requests:
                writer.write(frame(msg.SerializeToString()))
                if writer.transport.get_write_buffer_size() > _HIGH_WATER:
                    await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()  # the agent has nothing more to say (it is stopping)

    async def _receive(self) -> AsyncIterator[pb.ServerMessage]:
        try:
            reader = await self._open()
            while True:
                payload = await read_frame(reader, MAX_SERVER_FRAME)
                if payload is None:
                    raise ConnectionResetError("the server closed the stream")
                if payload[:1] == bytes([MESSAGE]):
                    yield pb.ServerMessage.FromString(payload[1:])
                elif payload[:1] == bytes([TRAILER]):
                    trailer = parse_trailer(payload[1:])
                    if trailer.code == "OK":
                        return
                    code = getattr(grpc.StatusCode, trailer.code, grpc.StatusCode.UNKNOWN)
                    raise _status(code, trailer.details, trailer.leader)
                else:
                    raise FrameError(f"a server frame of unknown kind {payload[:1]!r}")
        except (OSError, asyncio.IncompleteReadError, TimeoutError, FrameError) as exc:
            if self._cancelled:
                raise asyncio.CancelledError from None
            raise _status(grpc.StatusCode.UNAVAILABLE, f"{self._target}: {exc}") from None
        finally:
            self.cancel()
