"""`AgentTcpServer`: the agents' streams as framed TCP connections (`agent_transport = tcp`).

The same conversation as `AgentGrpcServer` — the very same `AgentServicer`, handed a context
with the methods it uses of a gRPC call (`peer`, `invocation_metadata`, `auth_context`,
`abort`, `set_trailing_metadata`) — carried as length-prefixed frames on asyncio streams
(`agent_wire.framed`) instead of HTTP/2. The same gate (token, mTLS member certificates, one
live agent per node), the same leader hint when the server does not lead (in the trailer),
the same in-process unix socket with TLS on. Sockets are tuned as the Raft TCP transport's are
(no Nagle, keepalive, a peer cut off given up in seconds).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import Any, cast

import grpc
import structlog
from google.protobuf.message import DecodeError

from gpu_platform.adapters.agent_wire.framed import (
    GRPC_PREFACE,
    MAGIC,
    MESSAGE,
    FrameError,
    Trailer,
    frame,
    read_frame,
    trailer_frame,
)
from gpu_platform.adapters.agent_wire.v1 import agent_pb2 as pb
from gpu_platform.adapters.inbound.grpc.agent_service import (
    AGENT_MAX_MESSAGE_BYTES,
    LEADER_METADATA,
    AgentServerBase,
)
from gpu_platform.adapters.tcp_security import SocketCallContext, server_context, tune
from gpu_platform.application.agent_hub import AgentHub

__all__ = ["AGENT_ALPN", "AgentTcpServer"]

AGENT_ALPN = "gpu-platform-agent"
OPENING_S = 10.0  # an agent says MAGIC and its token this soon after connecting, or is dropped
_OPENING_BYTES = 64 << 10
_HIGH_WATER = 1 << 20  # bytes queued to an agent before its stream waits for them to drain
log = structlog.get_logger(__name__)


class _Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


class _FramedContext(SocketCallContext):
    """What `AgentServicer.Connect` uses of a grpc.aio call context."""

    leader = ""

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise _Aborted(code, details)

    def set_trailing_metadata(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self.leader = dict(metadata).get(LEADER_METADATA, self.leader)


async def _incoming(reader: asyncio.StreamReader) -> AsyncIterator[pb.AgentMessage]:
    while (payload := await read_frame(reader, AGENT_MAX_MESSAGE_BYTES)) is not None:
        try:
            yield pb.AgentMessage.FromString(payload)
        except DecodeError as exc:
            raise FrameError(f"not an agent message: {exc}") from None


def _peer(writer: asyncio.StreamWriter, unix: Path | None) -> str:
    """The peer as grpc names it: ipv4:HOST:PORT, ipv6:[HOST]:PORT, unix:PATH."""
    if unix is not None:
        return f"unix:{unix}"
    name = writer.get_extra_info("peername")
    if not isinstance(name, tuple):
        return "?"
    host, port = name[0], name[1]
    return f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"


class AgentTcpServer(AgentServerBase):
    """Serves the agents' framed streams on `host:port` from its own event-loop thread (and,
    for an agent in the same process when TLS is on, on a unix socket only this user can
    open). Same constructor and methods as `AgentGrpcServer`."""

    THREAD = "agent-tcp"

    def __init__(self, hub: AgentHub, host: str, port: int, **options: Any) -> None:
        super().__init__(hub, host, port, **options)
        self._ssl = None if self._tls is None else server_context(self._tls, AGENT_ALPN)
        self._servers: list[asyncio.Server] = []
        self._streams: set[asyncio.Task[Any]] = set()

    async def _astart(self) -> None:
        try:
            server = await asyncio.start_server(
                self._serve, self._host, self.port, ssl=self._ssl, reuse_address=True
            )
        except OSError as exc:
            where = f"{self._host}:{self.port}"
            raise RuntimeError(f"agent API: cannot listen on {where}: {exc}") from exc
        self._servers.append(server)
        self.port = server.sockets[0].getsockname()[1]
        if self._socket is not None:
            path = self._socket
            path.unlink(missing_ok=True)  # left by a killed server
            unix = await asyncio.start_unix_server(lambda r, w: self._serve(r, w, path), path)
            os.chmod(path, 0o600)
            self._servers.append(unix)

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, unix: Path | None = None
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._streams.add(task)
        sock = writer.get_extra_info("socket")
        if unix is None and isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                tune(sock)
        peer = _peer(writer, unix)
        try:
            token = await self._opening(reader, peer)
            if token is None:
                return
            writer.write(MAGIC)
            context = _FramedContext(writer.get_extra_info("ssl_object"), peer, token or None)
            trailer = await self._converse(reader, writer, context)
            writer.write(trailer_frame(trailer))
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError, FrameError):
            pass  # the agent went away or broke the framing: its session is closed already
        finally:
            self._streams.discard(task)
            writer.close()

    async def _opening(self, reader: asyncio.StreamReader, peer: str) -> str | None:
        """The token the agent presents ('' for none); None when it is not an agent stream."""
        head = await asyncio.wait_for(reader.readexactly(len(MAGIC)), OPENING_S)
        if head != MAGIC:
            why = "not a gpu-platform agent stream"
            if head.startswith(GRPC_PREFACE):
                why = (
                    "a gRPC agent dialled the framed agent port (agent_transport: every server "
                    "and agent of a cluster must use the same one)"
                )
            log.warning("agent connection refused", peer=peer, why=why)
            return None
        opening = await asyncio.wait_for(read_frame(reader, _OPENING_BYTES), OPENING_S)
        try:
            token = json.loads(opening or b"{}").get("token") or ""
        except (ValueError, AttributeError):
            raise FrameError("a bad opening frame") from None
        return str(token)

    async def _converse(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, context: _FramedContext
    ) -> Trailer:
        """Run the servicer's conversation; its answers go out as frames. The trailer: OK, or
        what the servicer aborted with; the leader's address when it named one."""
        stream = cast(
            "AsyncGenerator[pb.ServerMessage, None]",
            self._servicer.Connect(_incoming(reader), context),
        )
        try:
            async for msg in stream:
                writer.write(frame(bytes([MESSAGE]) + msg.SerializeToString()))
                if writer.transport.get_write_buffer_size() > _HIGH_WATER:
                    await writer.drain()
        except _Aborted as exc:
            return Trailer(exc.code.name, exc.details, context.leader)
        finally:
            await stream.aclose()
        return Trailer("OK", "", context.leader)

    async def _halt(self, grace_s: float) -> None:
        for server in self._servers:
            server.close()
        for task in list(self._streams):
            task.cancel()
        if self._streams:
            await asyncio.wait(list(self._streams), timeout=grace_s)
