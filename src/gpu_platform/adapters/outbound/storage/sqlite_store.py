"""SqliteJobStore: job records in one SQLite file (WAL, synchronous=FULL: durable on return).

Each row carries `crc`, a CRC-32 over its id, seq, state and body, checked when the store opens
and on every read (`StorageCorrupt` names the job); rows from before checksums get theirs on
the first open.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from gpu_platform.adapters.outbound.integrity import StorageCorrupt, record_crc
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
    body  TEXT NOT NULL,
    crc   INTEGER
);
CREATE INDEX IF NOT EXISTS jobs_seq ON jobs(seq);
"""


class SqliteJobStore:
    """Implements JobStore. One connection guarded by a lock; each save is one transaction."""

    def __init__(self, path: str | Path) -> None:
        self._sql = SqliteDb(path, _SCHEMA)
        self.path = self._sql.path
        try:
            self._check()
        except BaseException:
            self._sql.close()
            raise

    def _check(self) -> None:
        """Add checksums to rows from before them (once); verify every row."""
        with self._sql.reading() as db:
            columns = {row[1] for row in db.execute("PRAGMA table_info(jobs)")}
        if "crc" not in columns:
            with self._sql.transaction() as db:
                db.execute("ALTER TABLE jobs ADD COLUMN crc INTEGER")
                rows = db.execute("SELECT id, seq, state, body FROM jobs").fetchall()
                db.executemany(
                    "UPDATE jobs SET crc = ? WHERE id = ?", [(_crc(*r), r[0]) for r in rows]
                )
        with self._sql.reading() as db:
            for row in db.execute("SELECT id, seq, state, body, crc FROM jobs"):
                self._verified(row)

    def _verified(self, row: sqlite3.Row | tuple[str, int, str, str, int | None]) -> str:
        job_id, seq, state, body, crc = row
        want = _crc(job_id, seq, state, body)
        if crc != want:
            raise StorageCorrupt(
                f"{self.path} is corrupt: the record of job {job_id!r} fails its checksum "
                f"(stored {crc}, computed {want}); refusing to use it: restore the file from a "
                "backup (docs/operations.md, 'Storage integrity')"
            )
        return str(body)

    def save(self, jobs: Sequence[Job]) -> None:
        if not jobs:
            return
        encoder = _Encoder()
        rows = []
        for j in jobs:
            body = encoder.body(j)
            rows.append((j.id, j.seq, j.state.value, body, _crc(j.id, j.seq, j.state.value, body)))
        with self._sql.transaction() as db:
            db.executemany(
                "INSERT INTO jobs(id, seq, state, body, crc) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT(id) DO UPDATE SET seq=excluded.seq, state=excluded.state, "
                "body=excluded.body, crc=excluded.crc",
                rows,
            )

    def get(self, job_id: str) -> Job | None:
        with self._sql.reading() as db:
            row = db.execute(
                "SELECT id, seq, state, body, crc FROM jobs WHERE id = ?", (job_id,)
            ).fetchone()
        return None if row is None else job_from_dict(json.loads(self._verified(row)))

    def load(self) -> list[Job]:
        with self._sql.reading() as db:
            rows = db.execute("SELECT id, seq, state, body, crc FROM jobs ORDER BY seq").fetchall()
        return [job_from_dict(json.loads(self._verified(r))) for r in rows]

    def close(self) -> None:
        self._sql.close()


_ID, _SEQ, _INDEX = "\x00id\x00", -7_777_777_771, -7_777_777_772  # template holes


class _Encoder:
    """JSON records for one save. The tasks of a new job array differ only in id, seq and
    index: their record is a template filled in (the same text `job_to_dict` gives, at a
    fraction of the cost); every spec is encoded once."""

    def __init__(self) -> None:
        self._specs: dict[int, str] = {}  # id(spec) -> its JSON
        self._templates: dict[tuple[object, ...], tuple[str, str, str, str] | None] = {}

    def body(self, job: Job) -> str:
        task = job.array
        if task is None or not _fresh(job):
            return self._plain(job)
        key: tuple[object, ...] = (id(job.spec), id(job.history), id(task.array))
        key += (task.array_id, job.state, job.reason, job.submitted_at)
        if key not in self._templates:
            self._templates[key] = self._template(job)
        parts = self._templates[key]
        if parts is None:
            return self._plain(job)
        head, mid, tail, end = parts
        return f"{head}{json.dumps(job.id)}{mid}{job.seq}{tail}{task.index}{end}"

    def _template(self, job: Job) -> tuple[str, str, str, str] | None:
        assert job.array is not None
        hollow = replace(job, id=_ID, seq=_SEQ, array=replace(job.array, index=_INDEX))
        text = self._plain(hollow)
        head, sep1, rest = text.partition(json.dumps(_ID))
        mid, sep2, rest = rest.partition(str(_SEQ))
        tail, sep3, end = rest.partition(str(_INDEX))
        if not (sep1 and sep2 and sep3):  # pragma: no cover - the holes are unique
            return None
        return head, mid, tail, end

    def _plain(self, job: Job) -> str:
        spec = self._specs.get(id(job.spec))
        if spec is None:
            spec = self._specs[id(job.spec)] = json.dumps(encode_spec(job.spec))
        rest = json.dumps(job_to_dict(job, with_spec=False))
        return f'{rest[:-1]}, "spec": {spec}}}'


def _crc(job_id: str, seq: int, state: str, body: str) -> int:
    return record_crc(str(job_id), f"{seq}\0{state}\0{body}".encode())


def _fresh(job: Job) -> bool:
    """Never bound: nothing but id, seq and index tells such tasks of one array apart."""
    return (
        job.attempt == 0
        and job.allocation is None
        and job.started_at is None
        and job.finished_at is None
        and job.exit_code is None
        and not job.releasing
        and not job.borrowing
        and job.not_before == 0.0
    )
