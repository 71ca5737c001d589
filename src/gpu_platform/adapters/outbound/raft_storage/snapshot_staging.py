"""Writing a snapshot's bytes off the Raft loop, for `SqliteRaftStorage` (issue 21).

Theory of operation. A snapshot of 20,000 jobs is 14 MB; writing it into SQLite took the Raft
loop 1.6 s on the shared machine (load 22), longer than the heartbeat keeper covers, so the
leader's followers elected another leader at every snapshot. Here the applier's thread, which
encoded the snapshot, also writes its bytes, through a second SQLite connection of its own,
into the table `snapshot_staged` (the same rows as `snapshot_chunks`, see there), one 1 MiB
chunk per transaction without fsync: the Raft loop's writes wait at most for one chunk.
Nothing reads that table. The Raft loop then *promotes* it inside its own transaction, which
changes only the schema and one metadata row:

    DROP TABLE IF EXISTS snapshot_retired;  -- gone already: refreshes a stale schema cache
    ALTER TABLE snapshot_chunks RENAME TO snapshot_retired;
    ALTER TABLE snapshot_staged RENAME TO snapshot_chunks;

and commits with fsync: in WAL mode that fsync also makes every staged frame before it
durable, so after a crash at any instant the file holds either the old snapshot with its
metadata or the new one with its own (the table swap and the metadata are one transaction).
A crash while staging leaves a half-filled `snapshot_staged`, and a promote leaves the old
chunks in `snapshot_retired`: both are dropped when the next staging begins (on the applier's
thread, never the Raft loop's). One staging at a time: `Stager.stage` waits until the previous
one was promoted or discarded, so a staging is never overwritten before the loop used it.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable
from pathlib import Path

from gpu_platform.adapters.outbound.integrity import record_crc
from gpu_platform.adapters.outbound.raft_storage.snapshot_chunks import Written, chunked
from gpu_platform.ports.outbound.raft import StagedSnapshot

__all__ = ["PROMOTE", "WAIT_S", "Stager"]

WAIT_S = 5.0
"""How long a staging waits for the previous one to be promoted or discarded."""

PROMOTE = (
    # A no-op (the staging dropped it), but it makes this connection load the schema again:
    # opened before the staging's DROP (a restart after a promote), its cached schema still
    # lists `snapshot_retired`, and ALTER's name check trusts the cache.
    "DROP TABLE IF EXISTS snapshot_retired",
    "ALTER TABLE snapshot_chunks RENAME TO snapshot_retired",
    "ALTER TABLE snapshot_staged RENAME TO snapshot_chunks",
)
"""Statements run in the Raft loop's transaction to make the staged chunks the snapshot's."""


class Stager:
    """Stages snapshots through a connection of its own (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db: sqlite3.Connection | None = None
        self._free = threading.Semaphore(1)  # taken by a staging until promoted or discarded
        self._serial = 0
        self._pending: int | None = None  # the staging not yet promoted or discarded

    def stage(self, pieces: Iterable[bytes]) -> StagedSnapshot:
        """Write the concatenation of `pieces` into `snapshot_staged` (off the Raft loop).
        Raises `TimeoutError` when the previous staging is still pending after `WAIT_S` (a
        Raft loop that stops: the caller then hands over the bytes instead)."""
        if not self._free.acquire(timeout=WAIT_S):
            raise TimeoutError("the previous snapshot staging is still pending")
        try:
            db = self._connect()
            db.execute("DROP TABLE IF EXISTS snapshot_retired")
            db.execute("DROP TABLE IF EXISTS snapshot_staged")
            db.execute(
                "CREATE TABLE snapshot_staged ("
                "seq INTEGER PRIMARY KEY, data BLOB NOT NULL, crc INTEGER NOT NULL)"
            )
            count = size = 0
            for chunk in chunked(pieces):
                db.execute("BEGIN IMMEDIATE")
                db.execute(
                    "INSERT INTO snapshot_staged (seq, data, crc) VALUES (?, ?, ?)",
                    (count, chunk, record_crc(f"snapshot/{count}", chunk)),
                )
                db.execute("COMMIT")
                count += 1
                size += len(chunk)
        except BaseException:
            self._free.release()
            raise
        self._serial += 1
        self._pending = self._serial
        return StagedSnapshot(self._serial, count, size)

    def taking(self, staged: StagedSnapshot) -> Written:
        """The staging about to be promoted (on the Raft loop); raises if it is not pending."""
        if self._pending != staged.serial:
            raise ValueError(f"snapshot staging {staged.serial} is not the pending one")
        return Written(staged.chunks, staged.size)

    def done(self, staged: StagedSnapshot) -> None:
        """The staging was promoted or discarded: the next one may begin."""
        if self._pending == staged.serial:
            self._pending = None
            self._free.release()

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA synchronous=NORMAL")  # made durable by the promoting commit
            self._db = db
        return self._db
