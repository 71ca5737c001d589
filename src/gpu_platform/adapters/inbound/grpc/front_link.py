"""The link that carries SubmitJob batches from API workers to their server: length-prefixed
frames (front_codec's) over a Unix stream socket, one request and one answer at a time per
connection. Plain frames instead of a gRPC call per batch: neither side pays grpc's per-call
work for what is already one call's worth of bytes.

The server's side (`BatchListener`) admits connections from its own account only (the socket
is mode 0600 in the data directory, and the peer's uid is checked); a frame that does not
parse closes its connection.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import threading
from collections.abc import Callable

import structlog

__all__ = ["MAX_FRAME_BYTES", "BatchLink", "BatchListener", "read_frame", "write_frame"]

log = structlog.get_logger(__name__)

MAX_FRAME_BYTES = 1 << 30
_LEN = struct.Struct(">I")
_UCRED = struct.Struct("3i")  # pid, uid, gid


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame(sock: socket.socket) -> bytes | None:
    """The next frame; None when the other side closed between frames."""
    head = _read_exactly(sock, 4)
    if head is None:
        return None
    (size,) = _LEN.unpack(head)
    if size > MAX_FRAME_BYTES:
        raise ValueError(f"front link: a frame of {size} bytes")
    body = _read_exactly(sock, size)
    if body is None:
        raise ConnectionError("front link: closed inside a frame")
    return body


def write_frame(sock: socket.socket, data: bytes) -> None:
    sock.sendall(_LEN.pack(len(data)) + data)


class BatchListener:
    """Answers each frame of each connection on `path` with `handle(frame)`."""

    def __init__(self, path: str, handle: Callable[[bytes], bytes]) -> None:
        self._handle = handle
        self._path = path
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a killed run's socket
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(path)
        os.chmod(path, 0o600)
        self._sock.listen(64)
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._threads: list[threading.Thread] = []
        self._accepting = threading.Thread(target=self._accept, name="front-link", daemon=True)
        self._accepting.start()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns = list(self._conns)
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._accepting.join(timeout=5)
        for t in self._threads:
            t.join(timeout=10)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            cred = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
            _, uid, _ = _UCRED.unpack(cred)
            if uid != os.getuid():
                log.warning("front link: refused a connection of another account", uid=uid)
                conn.close()
                continue
            with self._lock:
                if self._closed:
                    conn.close()
                    return
                self._conns.add(conn)
                t = threading.Thread(target=self._serve, args=(conn,), name="front-link-conn")
                self._threads = [x for x in self._threads if x.is_alive()] + [t]
            t.start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            while True:
                frame = read_frame(conn)
                if frame is None:
                    return
                write_frame(conn, self._handle(frame))
        except (OSError, ValueError) as exc:
            if not self._closed:
                log.warning("front link: connection dropped", error=str(exc))
        finally:
            with self._lock:
                self._conns.discard(conn)
            conn.close()


class BatchLink:
    """One connection to a BatchListener, made when first needed and again after a failure."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._sock: socket.socket | None = None

    def call(self, frame: bytes, timeout: float | None) -> bytes:
        """Send `frame`, wait for its answer. OSError (ConnectionError, TimeoutError) when the
        link failed; the connection is dropped then, so a late answer is never taken for the
        next frame's."""
        try:
            if self._sock is None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    sock.connect(self._path)
                except OSError:
                    sock.close()
                    raise
                self._sock = sock
            self._sock.settimeout(timeout)
            write_frame(self._sock, frame)
            answer = read_frame(self._sock)
            if answer is None:
                raise ConnectionError("front link: the server closed the connection")
            return answer
        except (OSError, ValueError):
            self.close()
            raise

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
