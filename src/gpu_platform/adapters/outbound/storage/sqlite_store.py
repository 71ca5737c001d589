"""SqliteJobStore: job records in one SQLite file (WAL, synchronous=FULL: durable on return)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from gpu_platform.adapters.outbound.storage.codec import job_from_dict, job_to_dict
from gpu_platform.adapters.outbound.storage.sqlite_db import SqliteDb
from gpu_platform.domain.model.job import Job
from gpu_platform.domain.model_codec import encode_spec

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
        self._sql = SqliteDb(path, _SCHEMA)
        self.path = self._sql.path

    def save(self, jobs: Sequence[Job]) -> None:
        if not jobs:
            return
        specs: dict[int, str] = {}  # id(spec) -> its JSON: an array's tasks share one spec
        rows = [(j.id, j.seq, j.state.value, _body(j, specs)) for j in jobs]
        with self._sql.transaction() as db:
            db.executemany(
                "INSERT INTO jobs(id, seq, state, body) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(id) DO UPDATE SET seq=excluded.seq, state=excluded.state, "
                "body=excluded.body",
                rows,
            )

    def get(self, job_id: str) -> Job | None:
        with self._sql.reading() as db:
            row = db.execute("SELECT body FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return None if row is None else job_from_dict(json.loads(row[0]))

    def load(self) -> list[Job]:
        with self._sql.reading() as db:
            rows = db.execute("SELECT body FROM jobs ORDER BY seq").fetchall()
        return [job_from_dict(json.loads(r[0])) for r in rows]

    def close(self) -> None:
        self._sql.close()


def _body(job: Job, specs: dict[int, str]) -> str:
    """The job's JSON record, its spec's JSON encoded once per spec object."""
    spec = specs.get(id(job.spec))
    if spec is None:
        spec = specs[id(job.spec)] = json.dumps(encode_spec(job.spec))
    rest = json.dumps(job_to_dict(job, with_spec=False))
    return f'{rest[:-1]}, "spec": {spec}}}'
