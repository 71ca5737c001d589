"""Checksums and watermarks of the SQLite stores (issue 20.6), on real SQLite files."""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gpu_platform.adapters.outbound.integrity import (
    StorageCorrupt,
    StorageError,
    StorageLost,
    Watermark,
)
from gpu_platform.adapters.outbound.raft_storage import SqliteRaftStorage
from gpu_platform.adapters.outbound.storage import SqliteAccessStore, SqliteJobStore
from gpu_platform.domain.consensus import ConfState, Entry, EntryType, HardState, Snapshot
from gpu_platform.domain.consensus import SnapshotMetadata as Meta
from gpu_platform.domain.model.job import Job, JobSpec, JobState


def _entries(first: int, last: int, term: int) -> list[Entry]:
    return [Entry(term, i, data=b'{"gpus":1,"tenant":"a"}') for i in range(first, last + 1)]


def _fill(path: Path) -> None:
    """A log with a snapshot at 3, entries 4..8 (one a conf change) and a hard state."""
    s = SqliteRaftStorage(path, identity={"member": 2, "cluster": "c-test"})
    snap = Snapshot(b"state-bytes", Meta(ConfState(voters=(1, 2, 3)), index=3, term=1))
    s.save(HardState(2, 1, 3), (), snap)
    ents = _entries(4, 8, 2)
    ents[1] = Entry(2, 5, EntryType.CONF_CHANGE, b"conf")
    s.save(HardState(2, 1, 7), ents)
    s.close()


@pytest.fixture(scope="module")
def template() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "raft.db"
        _fill(path)
        yield path


@pytest.fixture(scope="module")
def jobs_template() -> Iterator[Path]:
    """An embedded-mode state.db with two job records."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "state.db"
        store = SqliteJobStore(path)
        spec = JobSpec(command=("true",), gpus=1, tenant="a")
        store.save([Job(f"j-{i}", spec, JobState.QUEUED, 1.0, seq=i) for i in (1, 2)])
        store.close()
        yield path


_RECORDS = {
    "entries": ("idx", "term", "type", "data", "crc"),
    "meta": ("key", "value", "crc"),
    "snapshot_chunks": ("seq", "data", "crc"),
    "jobs": ("id", "seq", "state", "body", "crc"),
}


def _cells(path: Path) -> list[tuple[str, str, int]]:
    """Every stored field of every record: (table, column, rowid)."""
    db = sqlite3.connect(path)
    cells = []
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master")}
    for table, columns in _RECORDS.items():
        if table not in tables:
            continue
        for (rowid,) in db.execute(f"SELECT rowid FROM {table}"):
            cells += [(table, column, rowid) for column in columns]
    db.close()
    return sorted(cells)


def _flip(path: Path, cell: tuple[str, str, int], bit: int) -> None:
    table, column, rowid = cell
    db = sqlite3.connect(path, isolation_level=None)
    (value,) = db.execute(f"SELECT {column} FROM {table} WHERE rowid = ?", (rowid,)).fetchone()
    if isinstance(value, int):
        flipped: object = value ^ (1 << (bit % 63))
    else:
        raw = bytearray(value.encode() if isinstance(value, str) else value)
        raw[(bit // 8) % len(raw)] ^= 1 << (bit % 8)
        flipped = bytes(raw)
        if isinstance(value, str):  # else stored as a BLOB: a changed key all the same
            with contextlib.suppress(UnicodeDecodeError):
                flipped = bytes(raw).decode()
    try:
        db.execute(f"UPDATE {table} SET {column} = ? WHERE rowid = ?", (flipped, rowid))
    except sqlite3.IntegrityError:  # an index flipped onto another entry's
        assume(False)
    finally:
        db.close()


def test_a_filled_log_reopens_with_everything_it_held(template: Path, tmp_path: Path) -> None:
    path = tmp_path / "raft.db"
    shutil.copy(template, path)
    shutil.copy(template.with_suffix(".mark"), path.with_suffix(".mark"))
    s = SqliteRaftStorage(path)
    assert (s.first_index(), s.last_index(), s.hard_state) == (4, 8, HardState(2, 1, 7))
    assert s.snapshot().data == b"state-bytes"
    s.close()
    assert Watermark(path).read() == {"member": 2, "cluster": "c-test", "raft": [2, 7, 8]}


@settings(max_examples=60, deadline=None)
@given(data=st.data(), bit=st.integers(0, 1 << 16))
def test_any_single_bit_flip_in_any_stored_record_is_refused(
    template: Path, data: st.DataObject, bit: int
) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "raft.db"
        shutil.copy(template, path)
        cell = data.draw(st.sampled_from(_cells(path)))
        _flip(path, cell, bit)
        with pytest.raises(StorageCorrupt, match=r"raft\.db is corrupt: .* fails its checksum"):
            SqliteRaftStorage(path)


@settings(max_examples=40, deadline=None)
@given(data=st.data(), bit=st.integers(0, 1 << 16))
def test_any_single_bit_flip_in_a_stored_job_record_is_refused(
    jobs_template: Path, data: st.DataObject, bit: int
) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "state.db"
        shutil.copy(jobs_template, path)
        _flip(path, data.draw(st.sampled_from(_cells(path))), bit)
        with pytest.raises(StorageCorrupt, match=r"the record of job .* fails its checksum"):
            SqliteJobStore(path)


def test_a_log_from_before_checksums_gets_them_once_and_then_detects_flips(
    tmp_path: Path,
) -> None:
    path = tmp_path / "raft.db"
    db = sqlite3.connect(path, isolation_level=None)
    db.executescript(
        "CREATE TABLE entries (idx INTEGER PRIMARY KEY, term INTEGER NOT NULL,"
        " type INTEGER NOT NULL, data BLOB NOT NULL);"
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value BLOB NOT NULL);"
        "INSERT INTO entries VALUES (1, 1, 0, x'7b7d'), (2, 1, 0, x'7b7d');"
        "INSERT INTO meta VALUES ('hard_state', '[1, 0, 2]');"
    )
    db.close()
    s = SqliteRaftStorage(path)
    assert (s.last_index(), s.hard_state) == (2, HardState(1, 0, 2))
    s.close()
    _flip(path, ("entries", "data", 2), 0)
    with pytest.raises(StorageCorrupt, match="log entry 2 fails its checksum"):
        SqliteRaftStorage(path)


@pytest.mark.parametrize("damage", ["deleted", "emptied"])
def test_a_log_behind_its_watermark_is_refused_with_the_members_identity(
    template: Path, tmp_path: Path, damage: str
) -> None:
    path = tmp_path / "raft.db"
    shutil.copy(template, path)
    shutil.copy(template.with_suffix(".mark"), path.with_suffix(".mark"))
    if damage == "deleted":
        path.unlink()
    else:
        path.write_bytes(b"")
    with pytest.raises(StorageLost, match=r"\(member 2, cluster c-test\) reached term 2, commit 7"):
        SqliteRaftStorage(path)
    with pytest.raises(StorageLost):  # and the refused open changed nothing
        SqliteRaftStorage(path)


def test_another_members_log_is_refused(template: Path, tmp_path: Path) -> None:
    path = tmp_path / "raft.db"
    shutil.copy(template, path)
    shutil.copy(template.with_suffix(".mark"), path.with_suffix(".mark"))
    with pytest.raises(StorageError, match=r"the log of member 2 .* start it with --id 2"):
        SqliteRaftStorage(path, identity={"member": 3})
    SqliteRaftStorage(path, identity={"member": 2}).close()


def test_a_truncated_log_lowers_its_watermark_so_it_reopens(tmp_path: Path) -> None:
    path = tmp_path / "raft.db"
    s = SqliteRaftStorage(path)
    s.save(HardState(1, 1, 2), _entries(1, 10, 1))
    s.save(HardState(2, 0, 2), _entries(5, 6, 2))  # a new leader overwrote 5..10
    s.close()
    assert Watermark(path).read()["raft"] == [2, 2, 6]
    assert SqliteRaftStorage(path).last_index() == 6


def test_a_corrupt_watermark_is_refused_naming_it(template: Path, tmp_path: Path) -> None:
    path = tmp_path / "raft.db"
    shutil.copy(template, path)
    raw = bytearray(template.with_suffix(".mark").read_bytes())
    raw[raw.index(b"c-test")] ^= 1
    path.with_suffix(".mark").write_bytes(raw)
    with pytest.raises(StorageCorrupt, match=r"raft\.mark is corrupt"):
        SqliteRaftStorage(path)


def test_an_emptied_state_db_is_refused_rather_than_forgetting_tenants(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = SqliteAccessStore(path)
    store.add_tenant("a", 1.0)
    store.add_tenant("b", 2.0)
    store.close()
    assert Watermark(path).read()["writes.tenants"] == 2
    path.write_bytes(b"")
    with pytest.raises(StorageLost, match=r"state\.db has lost data: its tenants records"):
        SqliteAccessStore(path)


def test_a_fresh_data_dir_opens_and_marks_nothing_lost(tmp_path: Path) -> None:
    SqliteRaftStorage(tmp_path / "raft.db").close()
    SqliteAccessStore(tmp_path / "state.db").close()
    assert Watermark(tmp_path / "raft.db").read() == {"raft": [0, 0, 0]}
    assert Watermark(tmp_path / "state.db").read() == {"writes.tenants": 0}
