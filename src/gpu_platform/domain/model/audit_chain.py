"""The audit chain: append-only JSON lines linked by SHA-256.

Entry n is a JSON object with sorted keys and no spaces: its fields plus `seq` (n, from 1),
`prev` (the `hash` of entry n-1; `GENESIS` for the first) and `hash` = sha256 of the same
object without `hash`, hex. An edited line no longer matches its own `hash`; a removed,
inserted or reordered line breaks `seq` or `prev`. A removed *last* line leaves a valid shorter
chain, so the writer also keeps the head (`seq hash` of the newest entry) in a side file, and
`verify` compares the chain's end with it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["GENESIS", "ChainBreak", "chain_entry", "verify"]

GENESIS = "0" * 64
_RESERVED = ("seq", "prev", "hash")


_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _canonical(body: Mapping[str, Any]) -> str:
    return _ENCODER.encode(body)


def chain_entry(seq: int, prev: str, fields: Mapping[str, Any]) -> tuple[str, str]:
    """(line without newline, its hash) for entry `seq` after an entry hashing to `prev`."""
    if any(k in fields for k in _RESERVED):
        raise ValueError(f"audit fields may not be named {_RESERVED}")
    body = {"seq": seq, "prev": prev, **fields}
    # The line is the canonical JSON of body + hash. With sorted keys and no spaces that is
    # the members before "hash", then "hash", then the rest: each half is encoded once and
    # the hashed text (body alone) is the two halves joined.
    low = _canonical({k: v for k, v in body.items() if k < "hash"})[1:-1]
    high = _canonical({k: v for k, v in body.items() if k > "hash"})[1:-1]
    digest = hashlib.sha256(("{" + ",".join(p for p in (low, high) if p) + "}").encode())
    hexed = digest.hexdigest()
    return "{" + ",".join(p for p in (low, f'"hash":"{hexed}"', high) if p) + "}", hexed


@dataclass(frozen=True, slots=True)
class ChainBreak:
    """Line `line` (1-based) is where the chain stops holding, because `reason`."""

    line: int
    reason: str


def verify(lines: Iterable[str], head: tuple[int, str] | None = None) -> ChainBreak | int:
    """The number of entries when every line chains (and the end is `head`, when given: the
    (seq, hash) the writer recorded last), else the first break."""
    prev, count = GENESIS, 0
    for number, raw in enumerate(lines, start=1):
        text = raw.rstrip("\n")
        try:
            entry = json.loads(text)
        except ValueError:
            return ChainBreak(number, "not a JSON object")
        if not isinstance(entry, dict) or not isinstance(entry.get("hash"), str):
            return ChainBreak(number, "not an audit entry")
        if entry.get("seq") != number:
            return ChainBreak(number, f"seq is {entry.get('seq')!r}, expected {number}")
        if entry.get("prev") != prev:
            return ChainBreak(number, "prev is not the hash of the line before")
        fields = {k: v for k, v in entry.items() if k not in _RESERVED}
        line, digest = chain_entry(number, prev, fields)
        if digest != entry["hash"] or line != text:
            return ChainBreak(number, "content does not match its hash (edited)")
        prev, count = digest, number
    if head is not None and head != (count, prev):
        return ChainBreak(count + 1 if count < head[0] else count, "the chain ends early or late")
    return count
