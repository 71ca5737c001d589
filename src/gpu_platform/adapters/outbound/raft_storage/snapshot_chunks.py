"""The snapshot's bytes in `SqliteRaftStorage`, stored as numbered chunks (issue 21).

Theory of operation. A snapshot of the whole cluster is tens of MiB (about 85 MiB at 100,000
jobs). Holding it in memory beside the state it encodes, and building it as one `bytes`
object before writing it (then SQLite's own copy of the bound value), made the leader's RSS
spike by several times its size. Here the snapshot is written as it is produced: the pieces
of an iterable are gathered into chunks of `CHUNK` bytes, each one row of
`snapshot_chunks(seq, data, crc)`, inside the caller's transaction; nothing but the current
chunk is held. Reading it back (`read`) joins the rows: done only when the snapshot is needed
(a restart, a follower that fell behind the compacted log).

Integrity: every row has a CRC-32 over its key (`snapshot/<seq>`) and data, and the snapshot's
metadata records how many chunks and bytes there are (`Written`); `check` verifies all of it
one row at a time when the file is opened. Rows are numbered from 0 with no gaps.

A file written before chunks keeps its snapshot in the `meta` row `snapshot_data`; the
storage reads that when the metadata names no chunks, and the next snapshot replaces it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from gpu_platform.adapters.outbound.integrity import record_crc

__all__ = ["CHUNK", "SCHEMA", "ChunkError", "Written", "check", "chunked", "read", "write"]

CHUNK = 1 << 20
"""Bytes per stored chunk (the last one may be shorter)."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS snapshot_chunks (
    seq INTEGER PRIMARY KEY, data BLOB NOT NULL, crc INTEGER NOT NULL
);
"""


class ChunkError(Exception):
    """The stored chunks do not match their checksums or the recorded count and size."""


@dataclass(frozen=True, slots=True)
class Written:
    """How many chunks and bytes a stored snapshot has."""

    chunks: int
    size: int


def _key(seq: int) -> str:
    return f"snapshot/{seq}"


def chunked(pieces: Iterable[bytes], size: int = CHUNK) -> Iterator[bytes]:
    """The concatenation of `pieces` cut into chunks of `size` bytes (the last may be
    shorter; none is empty). Holds at most one chunk: a big piece is cut, never copied whole."""
    buf = bytearray()
    for piece in pieces:
        view = memoryview(piece)
        while view:
            take = size - len(buf)
            buf += view[:take]
            view = view[take:]
            if len(buf) == size:
                yield bytes(buf)
                buf.clear()
    if buf:
        yield bytes(buf)


def write(db: sqlite3.Connection, pieces: Iterable[bytes]) -> Written:
    """Replace the stored chunks by the concatenation of `pieces`, in the open transaction."""
    db.execute("DELETE FROM snapshot_chunks")
    count = size = 0
    for chunk in chunked(pieces):
        db.execute(
            "INSERT INTO snapshot_chunks (seq, data, crc) VALUES (?, ?, ?)",
            (count, chunk, record_crc(_key(count), chunk)),
        )
        count += 1
        size += len(chunk)
    return Written(count, size)


def read(db: sqlite3.Connection) -> bytes:
    """The stored snapshot's bytes (the chunks joined in order)."""
    rows = db.execute("SELECT data FROM snapshot_chunks ORDER BY seq")
    return b"".join(bytes(data) for (data,) in rows)


def check(db: sqlite3.Connection, written: Written) -> None:
    """Raise ChunkError unless the rows are 0..chunks-1, pass their CRCs and add up to size."""
    count = size = 0
    for seq, data, crc in db.execute("SELECT seq, data, crc FROM snapshot_chunks ORDER BY seq"):
        blob = bytes(data)
        if crc != record_crc(_key(seq), blob):  # first: the key covers `seq`
            raise ChunkError(f"snapshot chunk {seq} fails its checksum")
        if seq != count:
            raise ChunkError(f"snapshot chunk {count} is missing")
        count += 1
        size += len(blob)
    if (count, size) != (written.chunks, written.size):
        raise ChunkError(
            f"the snapshot has {count} chunks of {size} bytes, its metadata says "
            f"{written.chunks} chunks of {written.size} bytes"
        )
