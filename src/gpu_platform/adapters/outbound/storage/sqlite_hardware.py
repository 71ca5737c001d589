"""SqliteHardwareStore: GPU/node states and the audit log, in their own tables.

It normally shares the job database file (`state.db`) — one file to back up — but keeps its own
connection and tables: hardware records are keyed by GPU uuid or node name, not by job, and the
audit log only grows. WAL and synchronous=FULL: durable when a call returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gpu_platform.adapters.outbound.storage.sqlite_db import SqliteDb
from gpu_platform.domain.faults.commands import HardwareRecord
from gpu_platform.domain.model.audit import AuditRecord

__all__ = ["SqliteHardwareStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS hardware (
    kind   TEXT NOT NULL,
    name   TEXT NOT NULL,
    state  TEXT NOT NULL,
    reason TEXT NOT NULL,
    at     REAL NOT NULL,
    PRIMARY KEY (kind, name)
);
CREATE TABLE IF NOT EXISTS audit (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    at      REAL NOT NULL,
    actor   TEXT NOT NULL,
    action  TEXT NOT NULL,
    target  TEXT NOT NULL,
    reason  TEXT NOT NULL,
    outcome TEXT NOT NULL
);
"""


class SqliteHardwareStore:
    """Implements HardwareStore. One connection guarded by a lock; each call one transaction."""

    def __init__(self, path: str | Path) -> None:
        self._sql = SqliteDb(path, _SCHEMA)
        self.path = self._sql.path

    def save_hardware(self, records: Sequence[HardwareRecord]) -> None:
        if not records:
            return
        rows = [(r.kind, r.name, r.state, r.reason, r.at) for r in records]
        with self._sql.transaction() as db:
            db.executemany(
                "INSERT INTO hardware(kind, name, state, reason, at) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT(kind, name) DO UPDATE SET state=excluded.state, "
                "reason=excluded.reason, at=excluded.at",
                rows,
            )

    def load_hardware(self) -> list[HardwareRecord]:
        with self._sql.reading() as db:
            rows = db.execute(
                "SELECT kind, name, state, reason, at FROM hardware ORDER BY kind, name"
            ).fetchall()
        return [HardwareRecord(k, n, s, r, a) for k, n, s, r, a in rows]

    def append_audit(self, record: AuditRecord) -> None:
        with self._sql.reading() as db:
            db.execute(
                "INSERT INTO audit(at, actor, action, target, reason, outcome) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (
                    record.at,
                    record.actor,
                    record.action,
                    record.target,
                    record.reason,
                    record.outcome,
                ),
            )

    def audit(self, limit: int = 100) -> list[AuditRecord]:
        with self._sql.reading() as db:
            rows = db.execute(
                "SELECT at, actor, action, target, reason, outcome FROM audit "
                "ORDER BY id DESC LIMIT ?",
                (limit,),
            ).fetchall()
        return [AuditRecord(*row) for row in reversed(rows)]

    def close(self) -> None:
        self._sql.close()
