"""Canonical JSON for `ClusterReplica` snapshots, written out in pieces (issue 21).

A snapshot is one canonical JSON document (sorted keys, no spaces); `pieces` yields it in
parts whose concatenation is the same bytes as one `json.dumps`, so that a storage writes it
out as it is made instead of holding it whole.

Most of a large snapshot is jobs that did not change since the last one (finished jobs never
change again). `EncodedItems` keeps each item's bytes from the last snapshot with the item
they came from, and encodes again only an item that is not the same object. The domain's jobs
and nodes are frozen dataclasses whose fields are tuples, replaced, never changed in place,
so the same object means the same bytes. The cost is memory: the bytes of every job are kept
between snapshots (~700 bytes a job).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

__all__ = ["EncodedItems", "Fields", "Items", "canonical", "pieces"]

_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False)
_BATCH = 1024  # items of an array per piece (plain ones: per `json.dumps` call)


def canonical(value: object) -> bytes:
    return _ENCODER.encode(value).encode()  # `json.dumps` with these options, encoder reused


class Fields(dict[str, Any]):
    """A JSON object `pieces` encodes key by key (so that an `Items` value inside stays lazy)."""


@dataclass(frozen=True, slots=True)
class Items:
    """A JSON array whose items are encoded one at a time by `encode` (bytes of one item), or,
    when `encode` is None, as plain JSON values; `pieces` yields one piece per `_BATCH` items."""

    items: Iterable[Any]
    encode: Callable[[Any], bytes] | None = None


class EncodedItems:
    """`encode(item)` as canonical bytes, kept from one snapshot to the next by `key(item)`
    while the item is the same object (module docstring). Use on one thread at a time."""

    def __init__(self, encode: Callable[[Any], Any], key: Callable[[Any], str]) -> None:
        self._encode = encode
        self._key = key
        self._last: dict[str, tuple[object, bytes]] = {}
        self._next: dict[str, tuple[object, bytes]] = {}
        self.encoded = 0  # items encoded (not found unchanged), over the cache's life

    def begin(self) -> None:
        """Start a snapshot: items not seen again before `end` are forgotten."""
        self._next = {}

    def bytes_of(self, item: object) -> bytes:
        key = self._key(item)
        hit = self._last.get(key)
        if hit is None or hit[0] is not item:
            hit = (item, canonical(self._encode(item)))
            self.encoded += 1
        self._next[key] = hit
        return hit[1]

    def end(self) -> None:
        self._last, self._next = self._next, {}

    def clear(self) -> None:
        self._last, self._next = {}, {}


def pieces(value: object) -> Iterator[bytes]:
    """`canonical(value)` in pieces whose concatenation is the same bytes."""
    if isinstance(value, Items):
        yield b"["
        it, encode, sep = iter(value.items), value.encode, b""
        while batch := list(islice(it, _BATCH)):
            if encode is None:
                yield sep + canonical(batch)[1:-1]
            else:  # a piece per batch: fewer, larger writes downstream
                yield sep + b",".join(map(encode, batch))
            sep = b","
        yield b"]"
    elif isinstance(value, Fields):
        yield b"{"
        for n, key in enumerate(sorted(value)):
            yield (b"," if n else b"") + canonical(key) + b":"
            yield from pieces(value[key])
        yield b"}"
    else:
        yield canonical(value)
