"""The gateway's upstream client (`UpstreamPool`) against real loopback servers that answer
with scripted bytes: every framing (Content-Length, chunked, until EOF) comes back byte for
byte, connections are reused, a connection the replica closed while idle is replaced, and each
way of failing raises the error that says how far the request got."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.adapters.inbound.gateway.upstream import (
    UpstreamBroken,
    UpstreamPool,
    UpstreamTimeout,
    UpstreamUnreachable,
)

Answer = Callable[[asyncio.StreamWriter], Awaitable[bool]]  # -> keep the connection open


async def _serve(answer: Answer) -> tuple[asyncio.Server, str, list[int]]:
    """A server that reads each request, then lets `answer` write; counts connections."""
    connections: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ", 1)[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                if not await answer(writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}", connections


async def _fetch(pool: UpstreamPool, url: str) -> tuple[int, bytes]:
    response = await pool.post(url, "/v1/chat/completions", b'{"model": "m"}')
    parts = []
    while part := await response.read():
        parts.append(part)
    response.release(True)
    return response.status, b"".join(parts)


def _chunked(body: bytes, sizes: list[int]) -> list[bytes]:
    """`body` in chunked framing, cut into chunks of `sizes` (cycled)."""
    out, at, i = [], 0, 0
    while at < len(body):
        size = max(1, sizes[i % len(sizes)])
        piece = body[at : at + size]
        out.append(b"%x\r\n%s\r\n" % (len(piece), piece))
        at, i = at + size, i + 1
    out.append(b"0\r\n\r\n")
    return out


@settings(max_examples=25, deadline=None)
@given(
    body=st.binary(max_size=3000),
    sizes=st.lists(st.integers(1, 700), min_size=1, max_size=5),
    split=st.integers(1, 50),
)
def test_a_chunked_answer_comes_back_byte_for_byte_however_it_is_cut(
    body: bytes, sizes: list[int], split: int
) -> None:
    async def answer(writer: asyncio.StreamWriter) -> bool:
        wire = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + b"".join(
            _chunked(body, sizes)
        )
        for at in range(0, len(wire), split * 37):  # the framing split across writes too
            writer.write(wire[at : at + split * 37])
            await writer.drain()
        return True

    async def main() -> None:
        server, url, connections = await _serve(answer)
        pool = UpstreamPool()
        try:
            assert await _fetch(pool, url) == (200, body)
            assert await _fetch(pool, url) == (200, body)
            assert len(connections) == 1 and pool.idle_connections() == 1  # kept alive
        finally:
            await pool.aclose()
            server.close()

    asyncio.run(main())


def test_chunks_that_arrived_together_are_read_as_one_piece_trailers_dropped() -> None:
    events = [b'data: {"n": %d}\n\n' % i for i in range(18)]

    async def answer(writer: asyncio.StreamWriter) -> bool:
        wire = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.05)  # the events come in one later write, trailers and all
        writer.write(wire + b"0\r\nx-usage: 1\r\n\r\n")
        return True

    async def main() -> None:
        server, url, connections = await _serve(answer)
        pool = UpstreamPool()
        try:
            response = await pool.post(url, "/v1/chat/completions", b'{"model": "m"}')
            parts = []
            while part := await response.read():
                parts.append(part)
            response.release(True)
            assert parts == [b"".join(events)]  # one piece: one send to the client, not 18
            assert await _fetch(pool, url) == (200, b"".join(events))
            assert len(connections) == 1  # the trailers were read off: the connection is reused
        finally:
            await pool.aclose()
            server.close()

    asyncio.run(main())


def test_a_sized_answer_and_one_read_to_eof_come_back_whole() -> None:
    async def sized(writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 201 Created\r\nContent-Length: 5\r\nX-A: b\r\n\r\nhello")
        return True

    async def until_eof(writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.0 200 OK\r\n\r\nno length, ")
        await writer.drain()
        writer.write(b"then EOF")
        return False

    async def main() -> None:
        server, url, _ = await _serve(sized)
        eof_server, eof_url, _ = await _serve(until_eof)
        pool = UpstreamPool()
        try:
            response = await pool.post(url, "/x", b"{}")
            assert response.status == 201 and (b"x-a", b"b") in response.headers
            assert await response.read() == b"hello" and await response.read() == b""
            response.release(True)
            assert await _fetch(pool, eof_url) == (200, b"no length, then EOF")
            assert pool.idle_connections() == 1  # the sized one; EOF ended the other
        finally:
            await pool.aclose()
            server.close()
            eof_server.close()

    asyncio.run(main())


def test_chunked_framing_wins_over_a_content_length_which_is_dropped() -> None:
    async def both(writer: asyncio.StreamWriter) -> bool:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"5\r\nhello\r\n0\r\n\r\n"
        )
        return True

    async def main() -> None:
        server, url, _ = await _serve(both)
        pool = UpstreamPool()
        try:
            response = await pool.post(url, "/x", b"{}")
            assert all(name != b"content-length" for name, _ in response.headers)
            assert await response.read() == b"hello" and await response.read() == b""
            response.release(True)
            assert pool.idle_connections() == 1
        finally:
            await pool.aclose()
            server.close()

    asyncio.run(main())


def test_a_connection_the_replica_closed_while_idle_is_replaced_not_failed() -> None:
    async def once(writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        return False  # closes without saying Connection: close

    async def main() -> None:
        server, url, connections = await _serve(once)
        pool = UpstreamPool()
        try:
            for _ in range(3):
                assert await _fetch(pool, url) == (200, b"ok")
            assert len(connections) == 3
        finally:
            await pool.aclose()
            server.close()

    asyncio.run(main())


def test_each_failure_says_how_far_the_request_got() -> None:
    async def short(writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly this")
        return False

    async def garbage(writer: asyncio.StreamWriter) -> bool:
        writer.write(b"SSH-2.0-OpenSSH\r\n\r\n")
        return False

    async def mute(writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(3600)
        return False

    async def main() -> None:
        servers = [await _serve(a) for a in (short, garbage, mute)]
        (_, short_url, _), (_, garbage_url, _), (_, mute_url, _) = servers
        closed = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        refused_port = closed.sockets[0].getsockname()[1]
        closed.close()
        await closed.wait_closed()
        pool = UpstreamPool(read_timeout_s=0.2)
        try:
            with pytest.raises(UpstreamUnreachable):
                await pool.post(f"http://127.0.0.1:{refused_port}", "/x", b"{}")
            with pytest.raises(UpstreamBroken, match="short"):
                await _fetch(pool, short_url)
            with pytest.raises(UpstreamBroken, match="not an HTTP"):
                await _fetch(pool, garbage_url)
            with pytest.raises(UpstreamTimeout):
                await _fetch(pool, mute_url)
            assert pool.idle_connections() == 0  # none of them is reused
        finally:
            await pool.aclose()
            for server, _, _ in servers:
                server.close()

    asyncio.run(main())
