"""The Raft snapshot written in chunks as it is produced, not held in memory (issue 21)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.adapters.outbound.integrity import StorageCorrupt, record_crc
from gpu_platform.adapters.outbound.process_memory import (
    limit_malloc_arenas,
    release_free_memory,
)
from gpu_platform.adapters.outbound.raft_storage import SqliteRaftStorage
from gpu_platform.adapters.outbound.raft_storage.snapshot_chunks import CHUNK, chunked
from gpu_platform.domain.consensus import ConfState, Entry, HardState, Snapshot, SnapshotMetadata

CONF = ConfState(voters=(1,))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=12), st.integers(1, 16))
def test_chunks_are_the_pieces_cut_to_size_and_nothing_else(pieces: list[bytes], size: int) -> None:
    chunks = list(chunked(pieces, size))
    assert b"".join(chunks) == b"".join(pieces)
    assert all(len(c) == size for c in chunks[:-1])
    assert all(0 < len(c) <= size for c in chunks)


def _storage(path: Path, last: int = 5) -> SqliteRaftStorage:
    s = SqliteRaftStorage(path)
    s.save(HardState(1, 1, last), [Entry(1, i, data=b"x") for i in range(1, last + 1)])
    return s


def test_a_snapshot_given_in_pieces_reads_back_whole_after_a_reopen(tmp_path: Path) -> None:
    pieces = [b"head:", bytes(range(256)) * (CHUNK // 256 + 3), b":tail"]
    s = _storage(tmp_path / "raft.db")
    stored = s.create_snapshot(4, CONF, iter(pieces))
    assert stored.metadata == SnapshotMetadata(CONF, 4, 1)
    assert stored.data == b""  # not kept: read back on demand
    assert s.snapshot_metadata() == stored.metadata
    s.close()
    s = SqliteRaftStorage(tmp_path / "raft.db")
    assert s.snapshot() == Snapshot(b"".join(pieces), SnapshotMetadata(CONF, 4, 1))
    s.close()


def test_a_missing_snapshot_chunk_is_refused_naming_it(tmp_path: Path) -> None:
    s = _storage(tmp_path / "raft.db")
    s.create_snapshot(4, CONF, b"z" * (2 * CHUNK + 1))
    s.close()
    db = sqlite3.connect(tmp_path / "raft.db", isolation_level=None)
    db.execute("DELETE FROM snapshot_chunks WHERE seq = 2")
    db.close()
    with pytest.raises(StorageCorrupt, match=r"the snapshot has 2 chunks of .* metadata says 3"):
        SqliteRaftStorage(tmp_path / "raft.db")


def test_a_snapshot_stored_before_chunks_is_read_then_replaced(tmp_path: Path) -> None:
    path = tmp_path / "raft.db"
    _storage(path).close()
    conf = '{"voters": [1], "learners": [], "voters_outgoing": [], "learners_next": [], '
    conf += '"auto_leave": false}'
    old = {"snapshot_meta": json.dumps([2, 1, conf]).encode(), "snapshot_data": b"old"}
    db = sqlite3.connect(path, isolation_level=None)  # the layout before chunks
    db.execute("DROP TABLE snapshot_chunks")
    for key, value in old.items():
        db.execute("INSERT INTO meta VALUES (?, ?, ?)", (key, value, record_crc(key, value)))
    db.close()
    s = SqliteRaftStorage(path)
    assert s.snapshot() == Snapshot(b"old", SnapshotMetadata(CONF, 2, 1))
    s.create_snapshot(4, CONF, [b"new"])
    s.close()
    s = SqliteRaftStorage(path)
    assert s.snapshot() == Snapshot(b"new", SnapshotMetadata(CONF, 4, 1))
    s.close()
    db = sqlite3.connect(path)
    assert db.execute("SELECT count(*) FROM meta WHERE key = 'snapshot_data'").fetchone() == (0,)
    db.close()


def test_the_allocator_tuning_works_here_and_refuses_zero_arenas() -> None:
    assert release_free_memory()  # CI and servers run glibc
    with pytest.raises(ValueError, match="arenas must be >= 1"):
        limit_malloc_arenas(0)
