"""SqliteDb: the connection discipline every SQLite store here shares.

One connection per store (WAL, synchronous=FULL: a committed transaction survives a crash and
power loss), guarded by a lock; `transaction()` is BEGIN IMMEDIATE ... COMMIT, rolled back on
any exception.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["SqliteDb"]


class SqliteDb:
    def __init__(self, path: str | Path, schema: str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(schema)

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """The connection inside one write transaction (holding the store's lock)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    @contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """The connection for reads (holding the store's lock)."""
        with self._lock:
            yield self._db

    def close(self) -> None:
        with self._lock:
            self._db.close()
