"""SqliteDb: the connection discipline every SQLite store here shares.

One connection per store (WAL, synchronous=FULL: a committed transaction survives a crash and
power loss), guarded by a lock; `transaction()` is BEGIN IMMEDIATE ... COMMIT, rolled back on
any exception.

Loss detection (`adapters/outbound/integrity.py`): each store counts its committed write
transactions in the database (`integrity(store, writes)`) and, after each commit, records the
count in the watermark beside the file (`state.db` → `state.mark`, one key per store). Opening
a database whose count is below its watermark — emptied, deleted, its `-wal` gone — raises
`StorageLost` instead of starting with fewer records. SQLite's own "malformed" errors on open
raise `StorageCorrupt`.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gpu_platform.adapters.outbound.integrity import StorageCorrupt, StorageLost, Watermark

__all__ = ["SqliteDb"]

_INTEGRITY = """
CREATE TABLE IF NOT EXISTS integrity (store TEXT PRIMARY KEY, writes INTEGER NOT NULL);
"""
_COUNT = (
    "INSERT INTO integrity (store, writes) VALUES (?, 1) "
    "ON CONFLICT(store) DO UPDATE SET writes = writes + 1 RETURNING writes"
)


def _store_name(schema: str) -> str:
    found = re.search(r"CREATE TABLE IF NOT EXISTS (\w+)", schema)
    return found.group(1) if found else "store"


class SqliteDb:
    """One store's connection; `store` names its write counter (default: its first table)."""

    def __init__(self, path: str | Path, schema: str, *, store: str | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._store = store or _store_name(schema)
        self._key = f"writes.{self._store}"  # its entry in the watermark
        self._mark = Watermark(self.path)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(schema + _INTEGRITY)
            self._check_watermark()
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise StorageCorrupt(
                f"{self.path} is unreadable ({exc}); refusing to start: restore it from a "
                "backup (docs/operations.md, 'Storage integrity')"
            ) from None
        except BaseException:
            self._db.close()
            self._mark.close()
            raise

    def _check_watermark(self) -> None:
        store = self._store
        row = self._db.execute("SELECT writes FROM integrity WHERE store = ?", (store,)).fetchone()
        writes = 0 if row is None else int(row[0])
        recorded = int(self._mark.read().get(self._key, 0))
        if writes < recorded:
            raise StorageLost(
                f"{self.path} has lost data: its {store} records are at write {writes}, but "
                f"{self._mark.path.name} records write {recorded}; refusing to start with "
                "fewer records: restore the file from a backup, or (losing what it held) move "
                f"{self.path.name} and {self._mark.path.name} aside "
                "(docs/operations.md, 'Storage integrity')"
            )
        self._mark.update(**{self._key: writes})

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """The connection inside one write transaction (holding the store's lock)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
                ((writes,),) = self._db.execute(_COUNT, (self._store,)).fetchall()
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
            self._mark.update(**{self._key: writes})

    @contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """The connection for reads (holding the store's lock)."""
        with self._lock:
            yield self._db

    def close(self) -> None:
        with self._lock:
            self._db.close()
            self._mark.close()
