"""SqliteJobStore: job records in one SQLite file (WAL, synchronous=FULL: durable on return)."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

from gpu_platform.adapters.outbound.storage.codec import job_from_dict, job_to_dict
from gpu_platform.domain.model.job import Job

__all__ = ["SqliteJobStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id    TEXT PRIMARY KEY,
    seq   INTEGER NOT NULL,
    state TEXT NOT NULL,
    body  TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_seq ON jobs(seq);
"""


class SqliteJobStore:
    """Implements JobStore. One connection guarded by a lock; each save is one transaction."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)

    def save(self, jobs: Sequence[Job]) -> None:
        if not jobs:
            return
        rows = [(j.id, j.seq, j.state.value, json.dumps(job_to_dict(j))) for j in jobs]
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany(
                    "INSERT INTO jobs(id, seq, state, body) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT(id) DO UPDATE SET seq=excluded.seq, state=excluded.state, "
                    "body=excluded.body",
                    rows,
                )
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            row = self._db.execute("SELECT body FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return None if row is None else job_from_dict(json.loads(row[0]))

    def load(self) -> list[Job]:
        with self._lock:
            rows = self._db.execute("SELECT body FROM jobs ORDER BY seq").fetchall()
        return [job_from_dict(json.loads(r[0])) for r in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()
