"""The frames between an API worker and the server it fronts (docs/operations.md, "API
workers"): a batch of SubmitJob calls one way, their answers the other.

An item is one client call as the worker received it: its metadata, the client's address, the
seconds left before its deadline (negative: none) and the request's bytes, not parsed. An
answer is the call's status code, details, trailing metadata and the response's bytes. Both are
length-prefixed fields (big-endian u32); a frame that does not parse whole is a ValueError.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = ["Answer", "Item", "decode_answers", "decode_items", "encode_answers", "encode_items"]

Pairs = tuple[tuple[str, str], ...]

_U32 = struct.Struct(">I")
_F64 = struct.Struct(">d")


@dataclass(frozen=True, slots=True)
class Item:
    metadata: Pairs
    peer: str
    time_left_s: float  # < 0: the call has no deadline
    request: bytes


@dataclass(frozen=True, slots=True)
class Answer:
    code: int  # grpc.StatusCode's number; 0 = OK
    details: str
    trailing: Pairs
    response: bytes


def _put(out: list[bytes], data: bytes) -> None:
    out.append(_U32.pack(len(data)))
    out.append(data)


def _put_pairs(out: list[bytes], pairs: Pairs) -> None:
    out.append(_U32.pack(len(pairs)))
    for key, value in pairs:
        _put(out, key.encode())
        _put(out, value.encode())


class _Reader:
    def __init__(self, data: bytes) -> None:
        self._view = memoryview(data)
        self._at = 0

    def u32(self) -> int:
        if self._at + 4 > len(self._view):
            raise ValueError("front frame: truncated length")
        (value,) = _U32.unpack_from(self._view, self._at)
        self._at += 4
        return int(value)

    def f64(self) -> float:
        if self._at + 8 > len(self._view):
            raise ValueError("front frame: truncated number")
        (value,) = _F64.unpack_from(self._view, self._at)
        self._at += 8
        return float(value)

    def raw(self) -> bytes:
        size = self.u32()
        if self._at + size > len(self._view):
            raise ValueError("front frame: field runs past the end")
        data = bytes(self._view[self._at : self._at + size])
        self._at += size
        return data

    def text(self) -> str:
        try:
            return self.raw().decode()
        except UnicodeDecodeError as exc:
            raise ValueError(f"front frame: {exc}") from None

    def pairs(self) -> Pairs:
        return tuple((self.text(), self.text()) for _ in range(self.count()))

    def count(self) -> int:
        n = self.u32()
        if n > len(self._view) - self._at:  # every entry takes at least one byte
            raise ValueError("front frame: count larger than the frame")
        return n

    def end(self) -> None:
        if self._at != len(self._view):
            raise ValueError("front frame: trailing bytes")


def encode_items(items: list[Item]) -> bytes:
    out: list[bytes] = [_U32.pack(len(items))]
    for item in items:
        _put_pairs(out, item.metadata)
        _put(out, item.peer.encode())
        out.append(_F64.pack(item.time_left_s))
        _put(out, item.request)
    return b"".join(out)


def decode_items(data: bytes) -> list[Item]:
    r = _Reader(data)
    items = [Item(r.pairs(), r.text(), r.f64(), r.raw()) for _ in range(r.count())]
    r.end()
    return items


def encode_answers(answers: list[Answer]) -> bytes:
    out: list[bytes] = [_U32.pack(len(answers))]
    for a in answers:
        out.append(_U32.pack(a.code))
        _put(out, a.details.encode())
        _put_pairs(out, a.trailing)
        _put(out, a.response)
    return b"".join(out)


def decode_answers(data: bytes) -> list[Answer]:
    r = _Reader(data)
    answers = [Answer(r.u32(), r.text(), r.pairs(), r.raw()) for _ in range(r.count())]
    r.end()
    return answers
