"""Snapshot pieces: the same bytes as one canonical dump, and a segment's bytes reused only
while its items are the same objects in the same order."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from gpu_platform.application.snapshot_encoding import (
    EncodedSegments,
    Fields,
    Items,
    canonical,
    pieces,
)


@dataclass(frozen=True)
class Thing:
    name: str
    size: int


def _segments(size: int = 2) -> EncodedSegments:
    return EncodedSegments(lambda t: {"name": t.name, "size": t.size}, size=size)


def _dump(things: list[Thing]) -> list[dict[str, object]]:
    return [{"name": t.name, "size": t.size} for t in things]


def test_pieces_join_to_one_canonical_dump_with_segmented_and_plain_arrays() -> None:
    things = [Thing(f"t{i}", i) for i in range(5)]
    ids = [f"id-{i}" for i in range(3_000)]  # more than one batch
    record = Fields(b=2, a=Fields(x=Items(things, _segments()), y=Items(ids)), c=Items([]))
    joined = b"".join(pieces(record))
    assert joined == canonical({"b": 2, "a": {"x": _dump(things), "y": ids}, "c": []})


def test_a_segment_of_the_same_objects_is_not_encoded_again_and_a_changed_one_is() -> None:
    segments = _segments()
    things = [Thing("a", 1), Thing("b", 2), Thing("c", 3)]  # segments [a, b], [c]

    def snapshot() -> bytes:
        return b"".join(pieces(Items(things, segments)))

    assert snapshot() == canonical(_dump(things))
    assert segments.encoded == 3
    assert snapshot() == canonical(_dump(things))
    assert segments.encoded == 3  # all reused
    things[1] = replace(things[1], size=20)  # an equal name, another object: [a, b] again
    assert json.loads(snapshot())[1] == {"name": "b", "size": 20}
    assert segments.encoded == 5
    del things[0]  # everything after moves: [b, c] is a new segment
    assert snapshot() == canonical(_dump(things))
    assert segments.encoded == 7


def test_a_snapshot_abandoned_half_way_keeps_what_was_kept_and_clear_forgets_all() -> None:
    segments = _segments()
    things = [Thing("a", 1), Thing("b", 2), Thing("c", 3)]
    b"".join(pieces(Items(things, segments)))
    things[2] = replace(things[2], size=30)
    half = segments.pieces(things)
    next(half)
    half.close()
    assert b"".join(pieces(Items(things, segments))) == canonical(_dump(things))
    assert segments.encoded == 4  # [a, b] reused, [c] encoded again
    segments.clear()
    b"".join(pieces(Items(things, segments)))
    assert segments.encoded == 7
