"""A lean HTTP/1.1 client for the gateway's upstream side: keep-alive connections on asyncio
streams, pooled per replica address.

It does only what relaying needs: write one request (a prebuilt head plus the client's body,
as is), read the answer's status line and headers, then hand back the body as it arrives. The
body's framing is undone (`Content-Length`, `Transfer-Encoding: chunked`, or read to EOF) but
its bytes are not otherwise touched, so server-sent events pass through byte for byte.

Errors (each says how far the request got):

    UpstreamError
    ├── UpstreamUnreachable  nothing reached the replica (connect refused or timed out, or a
    │                        reused connection the replica had closed): safe to try another
    ├── UpstreamTimeout      no answer (or no next chunk) within the read timeout
    └── UpstreamBroken       the replica broke off or answered something that is not HTTP/1.x

A connection goes back to the pool only after its answer was read to the end; one abandoned
midway (the client went away, an error, a cancelled task) is closed, so the replica sees the
disconnect and can stop generating. An idle connection older than `idle_s` is not reused
(servers drop idle keep-alive connections, uvicorn after 5 s), and a reused connection that
ends before the first byte of an answer is retried once on a fresh one.

One pool belongs to one event loop; it is not thread-safe.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = [
    "UpstreamBroken",
    "UpstreamError",
    "UpstreamPool",
    "UpstreamResponse",
    "UpstreamTimeout",
    "UpstreamUnreachable",
]

_CHUNK = 65536
_MAX_HEAD = 65536


class UpstreamError(Exception):
    """The replica did not give a whole answer."""


class UpstreamUnreachable(UpstreamError):
    """Nothing reached the replica: another one may take the request."""


class UpstreamTimeout(UpstreamError):
    """The replica said nothing within the read timeout."""


class UpstreamBroken(UpstreamError):
    """The replica broke off, or its answer is not HTTP/1.x."""


@dataclass(slots=True, eq=False)  # hashed by identity (the pool keeps a set of them)
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = 0.0
    deadline: float = 0.0  # while a read waits: when it times out (the loop's clock)
    task: asyncio.Task[object] | None = None  # the task waiting on it
    expired: bool = False  # the watchdog cancelled `task` for the read timeout

    def close(self) -> None:
        self.writer.close()


@dataclass(frozen=True, slots=True)
class _Target:
    host: str
    port: int
    prefix: bytes  # b"POST /path HTTP/1.1\r\nhost: h:p\r\n" plus the fixed headers


class UpstreamResponse:
    """An answer whose head has been read; iterate `body()` once, then `release()`."""

    __slots__ = (
        "_buf",
        "_conn",
        "_key",
        "_length",
        "_pool",
        "_reusable",
        "_timeout",
        "headers",
        "status",
    )

    def __init__(
        self,
        pool: UpstreamPool,
        key: tuple[str, int],
        conn: _Connection,
        status: int,
        headers: list[tuple[bytes, bytes]],
        length: int | None,  # -1: chunked; None: until EOF
        reusable: bool,
    ) -> None:
        self._pool = pool
        self._key = key
        self._conn: _Connection | None = conn
        self._length = length
        self._reusable = reusable
        self._buf = bytearray()  # chunked: bytes read but not yet parsed into chunks
        self._timeout = pool.read_timeout_s
        self.status = status
        self.headers = headers  # as the replica sent them, names lower-cased

    async def read(self) -> bytes:
        """The next bytes of the body as they arrive (framing removed), b"" at its end; raises
        UpstreamBroken, or UpstreamTimeout when nothing came for the read timeout."""
        conn = self._conn
        assert conn is not None
        left = self._length
        if left == 0:
            return b""
        pool = self._pool
        pool._arm(conn)
        try:
            if left is None:  # until EOF
                return await conn.reader.read(_CHUNK)
            if left > 0:
                data = await conn.reader.read(min(left, _CHUNK))
                if not data:
                    raise UpstreamBroken(f"the answer ended {left} bytes short")
                self._length = left - len(data)
                return data
            return await self._chunk(conn.reader)
        except asyncio.CancelledError:
            if not _expired(conn):
                raise
            raise UpstreamTimeout(f"no data from the replica in {self._timeout:g} s") from None
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            raise UpstreamBroken(f"the replica broke off: {exc!r}") from None
        finally:
            pool._reading.discard(conn)

    async def _chunk(self, reader: asyncio.StreamReader) -> bytes:
        """The data of every whole chunk that has arrived (at least one): a stream's events
        that came in one read go on in one piece, none waits for a later one."""
        buf = self._buf
        out = bytearray()
        while True:
            while (end := buf.find(b"\r\n")) >= 0:
                try:
                    size = int(bytes(buf[:end]).split(b";", 1)[0], 16)
                except ValueError:
                    raise UpstreamBroken(f"bad chunk size line {bytes(buf[:40])!r}") from None
                if size == 0:  # the last chunk, then trailers (dropped) and an empty line
                    at = end if buf[end + 2 : end + 4] == b"\r\n" else buf.find(b"\r\n\r\n", end)
                    if at < 0:
                        break
                    del buf[: at + 4]
                    self._reusable = self._reusable and not buf  # nothing may follow it
                    self._length = 0
                    return bytes(out)
                if len(buf) < end + size + 4:
                    break
                if buf[end + size + 2 : end + size + 4] != b"\r\n":
                    raise UpstreamBroken("a chunk does not end in CRLF")
                out += buf[end + 2 : end + size + 2]
                del buf[: end + size + 4]
            if out:
                return bytes(out)
            if len(buf) > _CHUNK and buf.find(b"\r\n") < 0:
                raise UpstreamBroken(f"bad chunk size line {bytes(buf[:40])!r}")
            data = await reader.read(_CHUNK)
            if not data:
                raise asyncio.IncompleteReadError(bytes(buf), None)
            buf += data

    @property
    def length(self) -> int | None:
        """Body bytes still to come when the replica sent Content-Length; else None."""
        return self._length if self._length is not None and self._length >= 0 else None

    def release(self, complete: bool) -> None:
        """Give the connection back to the pool when its answer was read to the end
        (`complete`) and the replica keeps it open; close it otherwise."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if complete and self._reusable and self._length == 0:
            self._pool._put(self._key, conn)
        else:
            conn.close()


class UpstreamPool:
    """Keep-alive connections to replicas, `max_idle` at most per address."""

    def __init__(
        self,
        *,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 600.0,
        max_idle: int = 1000,
        idle_s: float = 4.0,
    ) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.max_idle = max_idle
        self.idle_s = idle_s
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._targets: dict[tuple[str, str], _Target] = {}
        self._closed = False
        # read timeouts: one watchdog timer for all reads (a timer per read costs more)
        self._reading: set[_Connection] = set()
        self._watchdog: asyncio.TimerHandle | None = None
        self._tick_s = min(1.0, max(0.01, read_timeout_s / 8))

    def _arm(self, conn: _Connection) -> None:
        """`conn`'s read in the current task times out after read_timeout_s."""
        loop = asyncio.get_running_loop()
        conn.deadline = loop.time() + self.read_timeout_s
        conn.task = asyncio.current_task()
        self._reading.add(conn)
        if self._watchdog is None:
            self._watchdog = loop.call_later(self._tick_s, self._watch)

    def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        for conn in [c for c in self._reading if c.deadline <= now]:
            self._reading.discard(conn)
            if conn.task is not None and not conn.task.done():
                conn.expired = True
                conn.task.cancel()
        self._watchdog = loop.call_later(self._tick_s, self._watch) if self._reading else None

    def _target(self, base_url: str, path: str) -> _Target:
        target = self._targets.get((base_url, path))
        if target is None:
            parts = urlsplit(base_url)
            if parts.scheme != "http" or not parts.hostname:
                raise UpstreamUnreachable(f"not an http:// replica address: {base_url!r}")
            port = parts.port or 80
            full = (parts.path.rstrip("/") + path).encode()
            prefix = b"POST %s HTTP/1.1\r\nhost: %s\r\ncontent-type: application/json\r\n" % (
                full,
                parts.netloc.encode(),
            )
            if len(self._targets) > 4096:  # replicas come and go
                self._targets.clear()
            target = self._targets[(base_url, path)] = _Target(parts.hostname, port, prefix)
        return target

    async def post(self, base_url: str, path: str, body: bytes) -> UpstreamResponse:
        """POST `body` (JSON) to `base_url` + `path`; the answer with its head read."""
        target = self._target(base_url, path)
        key = (target.host, target.port)
        request = b"%scontent-length: %d\r\n\r\n%s" % (target.prefix, len(body), body)
        conn = self._get(key)
        if conn is not None:
            try:
                return await self._exchange(key, conn, request, reused=True)
            except _Stale:
                pass  # the replica had closed it: once more on a fresh connection
        conn = await self._connect(key)
        try:
            return await self._exchange(key, conn, request, reused=False)
        except _Stale:
            raise UpstreamBroken("the replica closed the connection without answering") from None

    async def _connect(self, key: tuple[str, int]) -> _Connection:
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                reader, writer = await asyncio.open_connection(key[0], key[1], limit=_MAX_HEAD)
        except TimeoutError:
            raise UpstreamUnreachable(
                f"no connection to {key[0]}:{key[1]} in {self.connect_timeout_s:g} s"
            ) from None
        except OSError as exc:
            raise UpstreamUnreachable(f"cannot connect to {key[0]}:{key[1]}: {exc}") from None
        return _Connection(reader, writer)

    async def _exchange(
        self, key: tuple[str, int], conn: _Connection, request: bytes, *, reused: bool
    ) -> UpstreamResponse:
        ok = False
        try:
            writer = conn.writer
            try:
                writer.write(request)
                if writer.transport.get_write_buffer_size() > _CHUNK:
                    await writer.drain()
            except OSError as exc:
                if reused:
                    raise _Stale from None
                raise UpstreamUnreachable(f"cannot send to {key[0]}:{key[1]}: {exc}") from None
            self._arm(conn)
            try:
                head = await _read_head(conn.reader)
            except asyncio.CancelledError:
                if not _expired(conn):
                    raise
                raise UpstreamTimeout(
                    f"no answer from the replica in {self.read_timeout_s:g} s"
                ) from None
            except (OSError, asyncio.IncompleteReadError) as exc:
                if reused and (not isinstance(exc, asyncio.IncompleteReadError) or not exc.partial):
                    raise _Stale from None
                raise UpstreamBroken(f"the replica broke off before answering: {exc!r}") from None
            finally:
                self._reading.discard(conn)
            response = _parse_head(self, key, conn, head)
            ok = True
            return response
        finally:
            if not ok:
                conn.close()

    def _get(self, key: tuple[str, int]) -> _Connection | None:
        idle = self._idle.get(key)
        if not idle:
            return None
        oldest = asyncio.get_running_loop().time() - self.idle_s
        while idle:
            conn = idle.pop()
            if conn.idle_since > oldest and not conn.reader.at_eof():
                return conn
            conn.close()
        return None

    def _put(self, key: tuple[str, int], conn: _Connection) -> None:
        if self._closed or conn.reader.at_eof() or conn.writer.is_closing():
            conn.close()
            return
        idle = self._idle.get(key)
        if idle is None:
            idle = self._idle[key] = []
        if len(idle) >= self.max_idle:
            conn.close()
            return
        conn.idle_since = asyncio.get_running_loop().time()
        idle.append(conn)

    def idle_connections(self) -> int:
        return sum(len(idle) for idle in self._idle.values())

    async def aclose(self) -> None:
        self._closed = True
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn in conns:
                conn.close()


class _Stale(Exception):
    """A reused connection that the replica had already closed."""


def _expired(conn: _Connection) -> bool:
    """Whether a CancelledError on `conn`'s read is the watchdog's (then it is taken back)."""
    if not conn.expired:
        return False
    conn.expired = False
    if conn.task is not None:
        conn.task.uncancel()
    return True


async def _read_head(reader: asyncio.StreamReader) -> bytes:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise UpstreamBroken("the replica's response head is too large") from None
    while head.startswith(b"HTTP/1.1 1") and not head.startswith(b"HTTP/1.1 101"):
        head = await reader.readuntil(b"\r\n\r\n")  # 100 Continue and the like
    return head


def _parse_head(
    pool: UpstreamPool, key: tuple[str, int], conn: _Connection, head: bytes
) -> UpstreamResponse:
    lines = head[:-4].split(b"\r\n")
    status_line = lines[0].split(b" ", 2)
    if len(status_line) < 2 or not status_line[0].startswith(b"HTTP/1."):
        raise UpstreamBroken(f"not an HTTP/1.x answer: {lines[0][:60]!r}")
    try:
        status = int(status_line[1])
    except ValueError:
        raise UpstreamBroken(f"bad status line {lines[0][:60]!r}") from None
    headers: list[tuple[bytes, bytes]] = []
    length: int | None = None
    chunked = False
    reusable = status_line[0] == b"HTTP/1.1"
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            raise UpstreamBroken(f"bad header line {line[:60]!r}")
        name = name.strip().lower()
        value = value.strip()
        if name == b"content-length":
            try:
                length = int(value)
            except ValueError:
                raise UpstreamBroken(f"bad Content-Length {value[:20]!r}") from None
        elif name == b"transfer-encoding":
            chunked = value.lower().endswith(b"chunked")
        elif name == b"connection":
            low = value.lower()
            if b"close" in low:
                reusable = False
            elif b"keep-alive" in low:
                reusable = True
        headers.append((name, value))
    if chunked:  # chunked wins over a Content-Length (RFC 9112 6.3), which is dropped
        length = -1
        headers = [(k, v) for k, v in headers if k != b"content-length"]
    elif status in (204, 304):
        length = 0
    return UpstreamResponse(pool, key, conn, status, headers, length, reusable)
