"""`SqliteRaftStorage` snapshots staged off the Raft loop (`snapshot_staging`): what is
stored is the staged bytes at the named index, whole after reopening; a staging that is
discarded or never stored leaves the previous snapshot in place."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.raft_storage import SqliteRaftStorage
from gpu_platform.adapters.outbound.raft_storage.snapshot_chunks import CHUNK
from gpu_platform.domain.consensus import ConfState, Entry, HardState

CONF = ConfState(voters=(1, 2, 3))
BIG = [b"a" * CHUNK, b"b" * (CHUNK // 2), b"c" * CHUNK]  # 3 chunks, cut across pieces


def storage(path: Path) -> SqliteRaftStorage:
    s = SqliteRaftStorage(path)
    s.save(HardState(1, 1, 20), [Entry(1, i) for i in range(1, 21)])
    return s


def test_a_staged_snapshot_is_stored_whole_at_its_index_and_survives_reopening(
    tmp_path: Path,
) -> None:
    path = tmp_path / "raft.db"
    s = storage(path)
    s.create_snapshot(5, CONF, b"old")
    staged = s.stage_snapshot(BIG)
    assert (staged.chunks, staged.size) == (3, len(b"".join(BIG)))
    assert s.snapshot().data == b"old"  # nothing is visible before it is stored
    s.store_staged(10, CONF, staged)
    assert s.snapshot_metadata().index == 10
    assert s.snapshot().data == b"".join(BIG)
    s.close()
    again = SqliteRaftStorage(path)  # every chunk's checksum and the count are checked
    assert again.snapshot().data == b"".join(BIG)
    assert again.snapshot_metadata().index == 10
    again.close()


def test_a_discarded_or_never_stored_staging_leaves_the_previous_snapshot(
    tmp_path: Path,
) -> None:
    path = tmp_path / "raft.db"
    s = storage(path)
    s.create_snapshot(5, CONF, b"old")
    s.discard_staged(s.stage_snapshot(BIG))
    s.stage_snapshot([b"never stored"])  # as if the process died here
    s.close()
    again = SqliteRaftStorage(path)
    assert again.snapshot().data == b"old"
    assert again.snapshot_metadata().index == 5
    staged = again.stage_snapshot([b"new"])  # the leftovers are dropped, staging goes on
    again.store_staged(12, CONF, staged)
    assert again.snapshot().data == b"new"
    again.close()


def test_only_the_pending_staging_can_be_stored(tmp_path: Path) -> None:
    s = storage(tmp_path / "raft.db")
    first = s.stage_snapshot([b"one"])
    s.discard_staged(first)
    second = s.stage_snapshot([b"two"])
    with pytest.raises(ValueError, match="not the pending one"):
        s.store_staged(10, CONF, first)
    s.discard_staged(second)
    s.close()


def test_a_staging_after_a_restart_is_stored_although_the_last_promote_left_old_chunks(
    tmp_path: Path,
) -> None:
    # The loop's connection opens with `snapshot_retired` in its schema; the staging drops it
    # through its own connection; the promote must not trust the stale schema (a Raft loop
    # crashed on "there is already another table ... snapshot_retired" in `make chaos`).
    path = tmp_path / "raft.db"
    s = storage(path)
    s.store_staged(5, CONF, s.stage_snapshot([b"first"]))  # leaves the old chunks retired
    s.close()
    again = SqliteRaftStorage(path)
    again.store_staged(10, CONF, again.stage_snapshot([b"second"]))
    assert again.snapshot().data == b"second"
    again.close()
