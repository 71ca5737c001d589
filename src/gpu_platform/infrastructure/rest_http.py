"""The REST port's HTTP/1.1 parser: uvicorn's httptools protocol with h11's bound on a head.

The REST port parsed HTTP with h11 (pure Python) until issue 21's profile of a submit put h11
at about a quarter of the event loop's CPU per request; httptools (llhttp, C) parses the same
requests for a fraction of it. h11 also refused a request whose head (request line and
headers) passed 16 KiB with 400; llhttp has no such bound and httptools buffers a header until
it ends, so this protocol keeps the bound: the bytes fed while a head is incomplete are counted
and past `MAX_HEAD_BYTES` the answer is h11's — 400 "Invalid HTTP request received.", and
the connection closes. (A chunk in which one message ends and the next begins is not counted:
the bound can be passed by at most one read, 64 KiB, as h11's could by one event.)
"""

from __future__ import annotations

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["MAX_HEAD_BYTES", "BoundedHttpToolsProtocol"]

MAX_HEAD_BYTES = 16 * 1024  # h11's default max_incomplete_event_size


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol refusing heads over MAX_HEAD_BYTES (module docstring)."""

    _in_head = True  # between a message's end (or the connection's start) and its headers' end
    _head_bytes = 0
    _ended = False  # a message ended during the read being fed

    def data_received(self, data: bytes) -> None:
        self._ended = False
        super().data_received(data)
        if not self._in_head or self._ended or self.transport.is_closing():
            return
        self._head_bytes += len(data)
        if self._head_bytes > MAX_HEAD_BYTES:
            msg = "Invalid HTTP request received."
            self.logger.warning(msg)
            self.send_400_response(msg)

    def on_headers_complete(self) -> None:
        self._in_head, self._head_bytes = False, 0
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._in_head, self._head_bytes, self._ended = True, 0, True
        super().on_message_complete()
