"""Snapshot pieces: the same bytes as one canonical dump, and an item's bytes reused only
while it is the same object."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from gpu_platform.application.snapshot_encoding import (
    EncodedItems,
    Fields,
    Items,
    canonical,
    pieces,
)


@dataclass(frozen=True)
class Thing:
    name: str
    size: int


def _encoded() -> EncodedItems:
    return EncodedItems(lambda t: {"name": t.name, "size": t.size}, lambda t: t.name)


def test_pieces_join_to_one_canonical_dump_with_batched_and_encoded_arrays() -> None:
    cache = _encoded()
    things = [Thing(f"t{i}", i) for i in range(5)]
    ids = [f"id-{i}" for i in range(10_000)]  # more than one batch
    record = Fields(b=2, a=Fields(x=Items(things, cache.bytes_of), y=Items(ids)), c=Items([]))
    joined = b"".join(pieces(record))
    expected = {"b": 2, "a": {"x": [{"name": t.name, "size": t.size} for t in things], "y": ids}}
    assert joined == canonical(expected | {"c": []})
    assert json.loads(joined)["a"]["y"] == ids


def test_an_unchanged_item_is_not_encoded_again_and_a_replaced_one_is() -> None:
    cache = _encoded()
    things = [Thing("a", 1), Thing("b", 2), Thing("c", 3)]

    def snapshot(items: list[Thing]) -> bytes:
        cache.begin()
        out = b"".join(pieces(Items(items, cache.bytes_of)))
        cache.end()
        return out

    first = snapshot(things)
    assert cache.encoded == 3
    assert snapshot(things) == first
    assert cache.encoded == 3
    things[1] = replace(things[1], size=20)  # an equal name, another object
    assert json.loads(snapshot(things))[1] == {"name": "b", "size": 20}
    assert cache.encoded == 4


def test_an_item_left_out_of_a_snapshot_is_forgotten_and_clear_forgets_all() -> None:
    cache = _encoded()
    a, b = Thing("a", 1), Thing("b", 2)
    cache.begin()
    cache.bytes_of(a)
    cache.bytes_of(b)
    cache.end()
    cache.begin()
    cache.bytes_of(a)
    cache.end()
    cache.begin()
    cache.bytes_of(b)  # dropped by the snapshot before: encoded again
    cache.end()
    assert cache.encoded == 3
    cache.clear()
    cache.begin()
    cache.bytes_of(b)
    cache.end()
    assert cache.encoded == 4
