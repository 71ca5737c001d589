"""A replica that misbehaves on purpose, for the gateway's error tests: a real TCP server on
loopback, on its own thread and event loop.

Modes (what it does with each request, once the request's head and body are read):

    close   closes the connection without a word (the gateway answers 502)
    mute    says nothing and keeps the connection open (504 after the read timeout), and
            counts the connections the other side closed (`closed_by_peer`)
    short   announces a 1000-byte body, sends 10 bytes, closes (502, nothing relayed)
    hold    starts a chunked event stream with one event, then holds the rest until
            `release` is set (then two more events and the end), or until the other side
            closes (counted in `closed_by_peer`): shows what is relayed before the stream ends
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Literal

__all__ = ["ScriptedReplica"]

Mode = Literal["close", "mute", "short", "hold"]

_HOLD_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)


class ScriptedReplica:
    """``with ScriptedReplica("mute") as r: ... r.url ...``"""

    def __init__(self, mode: Mode) -> None:
        self.mode = mode
        self.url = ""
        self.requests = 0
        self.closed_by_peer = 0
        self.release = threading.Event()  # mode "hold": let the held stream finish
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    def __enter__(self) -> ScriptedReplica:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        port = future.result(timeout=10)
        self.url = f"http://127.0.0.1:{port}"
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _start(self) -> int:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                task.cancel()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            self.requests += 1
            if self.mode == "short":
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"content-length: 1000\r\n\r\n" + b"{" * 10
                )
                await writer.drain()
            elif self.mode == "mute" and not await reader.read(1):  # the peer closed
                self.closed_by_peer += 1
            elif self.mode == "hold":
                await self._hold(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def _hold(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(_HOLD_HEAD + _event(b'{"n":1}'))
        await writer.drain()
        while not self.release.is_set():
            try:
                if not await asyncio.wait_for(reader.read(1), 0.01):  # the peer closed
                    self.closed_by_peer += 1
                    return
            except TimeoutError:
                pass
        writer.write(_event(b'{"n":2}') + _event(b"[DONE]") + b"0\r\n\r\n")
        await writer.drain()


def _event(data: bytes) -> bytes:
    line = b"data: " + data + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(line), line)
