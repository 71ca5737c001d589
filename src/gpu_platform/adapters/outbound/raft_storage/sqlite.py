"""`SqliteRaftStorage`: the Raft log, hard state and snapshot in one SQLite file.

Theory of operation. SQLite in WAL mode with `synchronous=FULL`: a transaction is durable
(fsynced WAL) when `COMMIT` returns, and atomic — after a `kill -9` or power loss at any
instant the file holds either all of a `save()` or none of it. Every write is one transaction,
so a `Ready`'s snapshot, entries and hard state land together.

Reads of the log never touch the disk: the log after the last compaction is mirrored in
memory (write-through; compaction keeps it bounded) and rebuilt from the file on open. The
snapshot's bytes are not kept in memory (tens of MiB at scale): they are written in chunks as
they are produced and read back by `snapshot()` when needed (`snapshot_chunks.py`); its
metadata is kept (`snapshot_metadata()`). Layout:

* `entries(idx PRIMARY KEY, term, type, data)` — the log after the compaction point;
* `meta(key, value)` — `hard_state` (term, vote, commit), `offset` (index and term of the
  entry just before the first one: the compaction point), `snapshot_meta` (index, term,
  conf state as JSON, chunk count, size in bytes);
* `snapshot_chunks(seq, data)` — the application state, bytes (a file from before chunks has
  it in the `meta` row `snapshot_data` instead, read until the next snapshot replaces it).

Integrity (`adapters/outbound/integrity.py`): every row carries `crc`, a CRC-32 over all its
fields, checked when the file is opened; after each synced write `raft.mark` beside the file
records the term, commit and last index reached (and the member and cluster, when given), so a
file that lost data — emptied, deleted, its `-wal` gone — is refused instead of starting empty.
A file from before checksums (no `crc` column) gets them computed once, on first open.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import astuple
from pathlib import Path

from gpu_platform.adapters.outbound.integrity import (
    RECOVERY_HINT,
    StorageCorrupt,
    StorageError,
    StorageLost,
    Watermark,
    entry_crc,
    record_crc,
)
from gpu_platform.adapters.outbound.process_memory import release_free_memory
from gpu_platform.adapters.outbound.raft_storage import snapshot_chunks, snapshot_staging
from gpu_platform.domain.consensus import (
    CompactedError,
    ConfState,
    Entry,
    EntryType,
    HardState,
    LogInvariantError,
    Snapshot,
    SnapshotMetadata,
    SnapshotOutOfDateError,
)
from gpu_platform.domain.consensus.storage import LogReads
from gpu_platform.ports.outbound.raft import StagedSnapshot

__all__ = ["SqliteRaftStorage"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    idx INTEGER PRIMARY KEY, term INTEGER NOT NULL, type INTEGER NOT NULL, data BLOB NOT NULL,
    crc INTEGER
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value BLOB NOT NULL, crc INTEGER);
"""


def _conf_to_json(cs: ConfState) -> str:
    return json.dumps(
        {
            "voters": list(cs.voters),
            "learners": list(cs.learners),
            "voters_outgoing": list(cs.voters_outgoing),
            "learners_next": list(cs.learners_next),
            "auto_leave": cs.auto_leave,
        }
    )


def _conf_from_json(text: str) -> ConfState:
    d = json.loads(text)
    return ConfState(
        voters=tuple(d["voters"]),
        learners=tuple(d["learners"]),
        voters_outgoing=tuple(d["voters_outgoing"]),
        learners_next=tuple(d["learners_next"]),
        auto_leave=bool(d["auto_leave"]),
    )


class SqliteRaftStorage(LogReads):
    """A durable `RaftStorage` (see the module docstring). One thread at a time.

    Opening raises `StorageCorrupt` (a record fails its checksum) or `StorageLost` (the file
    is behind its watermark); `identity` (e.g. member and cluster) is kept in the watermark."""

    def __init__(self, path: str | Path, *, identity: Mapping[str, object] | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._mark = Watermark(self.path)
        self._identity = dict(identity or {})
        self._floor = (0, 0, 0)  # (term, commit, last index) the watermark records
        self._synced = True
        self.hard_state = HardState()
        self._snapshot = Snapshot()  # metadata only: `snapshot()` reads the data
        self._chunked = True  # False: a file from before chunks (`snapshot_data` in meta)
        self._ents: list[Entry] = [Entry(0, 0)]  # [0] = the compaction point (index, term)
        self._metas: dict[str, bytes] = {}
        self._stager = snapshot_staging.Stager(self.path)
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA + snapshot_chunks.SCHEMA)
            self._migrate()
            self._load()
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise StorageCorrupt(
                f"{self.path} is unreadable ({exc}); refusing to start: {RECOVERY_HINT}"
            ) from None
        except BaseException:
            self._db.close()
            raise
        self._check_watermark()

    def _meta(self, key: str) -> bytes | None:
        return self._metas.get(key)

    def _migrate(self) -> None:
        """A file from before checksums: add the `crc` columns and fill them, once."""
        db = self._db
        for table in ("entries", "meta"):
            columns = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
            if "crc" in columns:
                continue
            db.execute("BEGIN IMMEDIATE")
            db.execute(f"ALTER TABLE {table} ADD COLUMN crc INTEGER")
            if table == "entries":
                rows = db.execute("SELECT idx, term, type, data FROM entries").fetchall()
                sums = [(entry_crc(i, t, k, _blob(d)), i) for i, t, k, d in rows]
                db.executemany("UPDATE entries SET crc = ? WHERE idx = ?", sums)
            else:
                rows = db.execute("SELECT key, value FROM meta").fetchall()
                sums = [(record_crc(k, _blob(v)), k) for k, v in rows]
                db.executemany("UPDATE meta SET crc = ? WHERE key = ?", sums)
            db.execute("COMMIT")

    def _corrupt(self, what: str, stored: object, computed: int) -> StorageCorrupt:
        got = f"0x{stored:08x}" if isinstance(stored, int) else "none"
        return StorageCorrupt(
            f"{self.path} is corrupt: {what} fails its checksum (stored {got}, computed "
            f"0x{computed:08x}); refusing to start: {RECOVERY_HINT}"
        )

    def _load(self) -> None:
        for key, value, crc in self._db.execute("SELECT key, value, crc FROM meta"):
            blob = _blob(value)
            want = record_crc(str(key), blob)
            if crc != want:
                raise self._corrupt(f"record {key!r}", crc, want)
            self._metas[str(key)] = blob
        hs = self._meta("hard_state")
        if hs is not None:
            term, vote, commit = json.loads(hs)
            self.hard_state = HardState(term, vote, commit)
        sm = self._meta("snapshot_meta")
        if sm is not None:
            idx, term, conf, *written = json.loads(sm)
            self._snapshot = Snapshot(b"", SnapshotMetadata(_conf_from_json(conf), idx, term))
            self._chunked = bool(written)
            if written:
                try:
                    snapshot_chunks.check(self._db, snapshot_chunks.Written(*written))
                except snapshot_chunks.ChunkError as exc:
                    raise StorageCorrupt(
                        f"{self.path} is corrupt: {exc}; refusing to start: {RECOVERY_HINT}"
                    ) from None
        off = self._meta("offset")
        off_index, off_term = json.loads(off) if off is not None else (0, 0)
        self._ents = [Entry(off_term, off_index)]
        rows = self._db.execute("SELECT idx, term, type, data, crc FROM entries ORDER BY idx")
        loaded = []
        for idx, term, typ, data, crc in rows:  # every checksum first: a flipped index
            blob = _blob(data)  # moves its row
            want = entry_crc(idx, term, typ, blob)
            if crc != want:
                raise self._corrupt(f"log entry {idx}", crc, want)
            loaded.append(Entry(term, idx, EntryType(typ), blob))
        for entry in loaded:
            if entry.index != self._ents[-1].index + 1:
                raise StorageCorrupt(
                    f"{self.path} is corrupt: the log has a gap before entry {entry.index}; "
                    f"refusing to start: {RECOVERY_HINT}"
                )
            self._ents.append(entry)
        self._metas.clear()  # only for this load

    def _check_watermark(self) -> None:
        """Refuse a file that holds less than its watermark says it durably held."""
        try:
            mark = self._mark.read()
        except StorageCorrupt:
            self.close()
            raise
        floor = tuple(mark.get("raft", (0, 0, 0)))
        member, was = self._identity.get("member"), mark.get("member")
        if member is not None and was is not None and member != was and any(floor):
            self.close()
            raise StorageError(
                f"{self.path} is the log of member {was} ({self._mark.path.name}), but this "
                f"server is member {member}: start it with --id {was}, or give member "
                f"{member} its own data dir"
            )
        self._identity = {**{k: v for k, v in mark.items() if k != "raft"}, **self._identity}
        have = (self.hard_state.term, self.hard_state.commit, self.last_index())
        if any(h < f for h, f in zip(have, floor, strict=True)):
            self.close()
            who = ", ".join(f"{k} {mark[k]}" for k in ("member", "cluster") if k in mark)
            raise StorageLost(
                f"{self.path} has lost data: it holds term {have[0]}, commit {have[1]}, last "
                f"index {have[2]}, but {self._mark.path.name} records that this server"
                f"{f' ({who})' if who else ''} reached term {floor[0]}, commit {floor[1]}, "
                f"last index {floor[2]}; refusing to start (it would forget acknowledged writes "
                f"or bootstrap a new cluster): {RECOVERY_HINT}"
            )
        self._write_mark()

    def _write_mark(self, last: int | None = None) -> None:
        hs = self.hard_state
        floor = (hs.term, hs.commit, self.last_index() if last is None else last)
        self._mark.write({**self._identity, "raft": list(floor)})
        self._floor = floor

    # Storage reads: LogReads, over the in-memory copy loaded above; the snapshot from the file.
    def snapshot(self) -> Snapshot:
        """The latest snapshot, its bytes read from the file (tens of MiB at scale: call
        `snapshot_metadata()` when only the index, term or configuration is needed)."""
        md = self._snapshot.metadata
        if self._chunked:
            return Snapshot(snapshot_chunks.read(self._db), md)
        row = self._db.execute("SELECT value FROM meta WHERE key = 'snapshot_data'").fetchone()
        return Snapshot(_blob(row[0]) if row is not None else b"", md)

    # ------------------------------------------------------------------ durable writes
    def save(
        self,
        hard_state: HardState | None,
        entries: Sequence[Entry],
        snapshot: Snapshot | None = None,
        sync: bool = True,
    ) -> None:
        """Install `snapshot`, append `entries`, record `hard_state`: one transaction, fsynced
        unless `sync` is false (then `synchronous=NORMAL`: atomic, survives a process crash,
        made durable by the next synced transaction)."""
        # No copy of the in-memory log: `_merge` reads it, and it is changed in place only
        # once the transaction has committed.
        if snapshot is not None and self._snapshot.metadata.index >= snapshot.metadata.index:
            raise SnapshotOutOfDateError
        base = [Entry(snapshot.metadata.term, snapshot.metadata.index)] if snapshot else self._ents
        new = self._merge(base, entries)
        last = new[1][-1].index if new is not None else base[-1].index
        if last < self._floor[2]:  # a truncation: lower the watermark first
            self._write_mark(last)
        db = self._db
        if sync != self._synced:
            db.execute(f"PRAGMA synchronous={'FULL' if sync else 'NORMAL'}")
            self._synced = sync
        db.execute("BEGIN IMMEDIATE")
        try:
            if snapshot is not None:
                db.execute("DELETE FROM entries")
                self._put_snapshot(snapshot.metadata, (snapshot.data,))
                self._put_offset(base[0])
            if new is not None:
                first, appended = new
                if snapshot is None and first <= self.last_index():  # else nothing to cut
                    db.execute("DELETE FROM entries WHERE idx >= ?", (first,))
                db.executemany(
                    "INSERT INTO entries (idx, term, type, data, crc) VALUES (?, ?, ?, ?, ?)",
                    [(e.index, e.term, e.type.value, e.data, _crc(e)) for e in appended],
                )
            if hard_state is not None:
                hs = [hard_state.term, hard_state.vote, hard_state.commit]
                self._put("hard_state", json.dumps(hs))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        if snapshot is not None:
            self._ents = base
            self._snapshot = Snapshot(b"", snapshot.metadata)
            self._chunked = True
        if new is not None:
            first, appended = new
            ents = self._ents
            del ents[first - ents[0].index :]
            ents.extend(appended)
        if hard_state is not None:
            self.hard_state = hard_state
        if sync:
            self._write_mark()

    @staticmethod
    def _merge(ents: list[Entry], entries: Sequence[Entry]) -> tuple[int, list[Entry]] | None:
        """(first index to overwrite, entries to write) for appending `entries` to `ents`."""
        if not entries:
            return None
        first = ents[0].index + 1
        last = entries[0].index + len(entries) - 1
        if last < first:
            return None
        todo = list(entries)
        if first > todo[0].index:
            todo = todo[first - todo[0].index :]
        offset = todo[0].index - ents[0].index
        if offset > len(ents):
            raise LogInvariantError(
                f"missing log entry [last: {ents[-1].index}, append at: {todo[0].index}]"
            )
        return todo[0].index, todo

    def create_snapshot(
        self, index: int, conf_state: ConfState, data: bytes | Iterable[bytes]
    ) -> Snapshot:
        """Store the snapshot at `index`: `data`, or the concatenation of its pieces, written
        as they come (none is kept). Returns the snapshot without its bytes (`snapshot()`)."""
        snap = self._snapshot_at(index, conf_state)
        self._full()
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._put_snapshot(snap.metadata, (data,) if isinstance(data, bytes) else data)
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._snapshot = snap
        self._chunked = True
        release_free_memory()  # what encoding the snapshot took (tens of MiB at scale)
        return snap

    def stage_snapshot(self, pieces: Iterable[bytes]) -> StagedSnapshot:
        """Write a snapshot's bytes ahead, from a thread other than the Raft loop's, through a
        connection of its own (`snapshot_staging`); `store_staged` makes it the snapshot."""
        staged = self._stager.stage(pieces)
        release_free_memory()  # what encoding the snapshot took, off the Raft loop too
        return staged

    def store_staged(self, index: int, conf_state: ConfState, staged: StagedSnapshot) -> Snapshot:
        """`create_snapshot` for bytes staged ahead: one small transaction, fsynced."""
        try:
            written = self._stager.taking(staged)
            snap = self._snapshot_at(index, conf_state)
            self._full()
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for statement in snapshot_staging.PROMOTE:
                    self._db.execute(statement)
                self._put_snapshot_meta(snap.metadata, written)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        finally:
            self._stager.done(staged)
        self._snapshot = snap
        self._chunked = True
        return snap

    def discard_staged(self, staged: StagedSnapshot) -> None:
        """Drop bytes staged ahead (their rows go when the next staging begins)."""
        self._stager.done(staged)

    def compact(self, compact_index: int) -> None:
        offset = self._ents[0].index
        if compact_index <= offset:
            raise CompactedError
        if compact_index > self.last_index():
            raise LogInvariantError(f"compact {compact_index} is out of bound lastindex")
        head = self._ents[compact_index - offset]
        self._full()
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.execute("DELETE FROM entries WHERE idx <= ?", (compact_index,))
            self._put_offset(head)
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._ents = [Entry(head.term, head.index), *self._ents[compact_index - offset + 1 :]]

    def close(self) -> None:
        self._stager.close()
        self._db.close()
        self._mark.close()

    # ------------------------------------------------------------------ helpers
    def _full(self) -> None:
        if not self._synced:
            self._db.execute("PRAGMA synchronous=FULL")
            self._synced = True

    def _put(self, key: str, value: str | bytes) -> None:
        blob = value.encode() if isinstance(value, str) else value
        self._db.execute(
            "INSERT INTO meta (key, value, crc) VALUES (?, ?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value, crc = excluded.crc",
            (key, blob, record_crc(key, blob)),
        )

    def _put_offset(self, head: Entry) -> None:
        self._put("offset", json.dumps([head.index, head.term]))

    def _snapshot_at(self, index: int, conf_state: ConfState) -> Snapshot:
        """The metadata of a snapshot to create at `index` (raises if it cannot be)."""
        if index <= self._snapshot.metadata.index:
            raise SnapshotOutOfDateError
        if index > self.last_index():
            raise LogInvariantError(f"snapshot {index} is out of bound lastindex")
        if index < self._ents[0].index:
            raise CompactedError
        term = self._ents[index - self._ents[0].index].term
        return Snapshot(b"", SnapshotMetadata(conf_state, index, term))

    def _put_snapshot(self, md: SnapshotMetadata, pieces: Iterable[bytes]) -> None:
        self._put_snapshot_meta(md, snapshot_chunks.write(self._db, pieces))

    def _put_snapshot_meta(self, md: SnapshotMetadata, written: snapshot_chunks.Written) -> None:
        conf = _conf_to_json(md.conf_state)
        self._put("snapshot_meta", json.dumps([md.index, md.term, conf, *astuple(written)]))
        self._db.execute("DELETE FROM meta WHERE key = 'snapshot_data'")


def _crc(e: Entry) -> int:
    return entry_crc(e.index, e.term, e.type.value, e.data)


def _blob(value: str | bytes) -> bytes:
    """A stored BLOB's bytes (TEXT, as SQLite may hold it, as UTF-8)."""
    return value.encode() if isinstance(value, str) else bytes(value)
