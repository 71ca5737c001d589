"""SqliteRunAsStore: run-as grants in SQLite (the data dir's state.db, own table)."""

from __future__ import annotations

import json
from pathlib import Path

from gpu_platform.adapters.outbound.storage.sqlite_db import SqliteDb
from gpu_platform.domain.model.run_as import RunAsGrant

__all__ = ["SqliteRunAsStore"]

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS run_as "
    "(tenant TEXT PRIMARY KEY, accounts TEXT NOT NULL, allow_root INTEGER NOT NULL);"
)


class SqliteRunAsStore:
    """Implements RunAsStore; each grant is one row (accounts as a JSON list)."""

    def __init__(self, path: str | Path) -> None:
        self._db = SqliteDb(path, _SCHEMA)

    def load_grants(self) -> dict[str, RunAsGrant]:
        with self._db.reading() as db:
            rows = list(db.execute("SELECT tenant, accounts, allow_root FROM run_as"))
        return {
            tenant: RunAsGrant(tenant, tuple(json.loads(accounts)), bool(root))
            for tenant, accounts, root in sorted(rows)
        }

    def save_grant(self, tenant: str, grant: RunAsGrant | None) -> None:
        with self._db.transaction() as db:
            if grant is None:
                db.execute("DELETE FROM run_as WHERE tenant = ?", (tenant,))
            else:
                db.execute(
                    "INSERT OR REPLACE INTO run_as (tenant, accounts, allow_root) VALUES (?, ?, ?)",
                    (tenant, json.dumps(list(grant.accounts)), int(grant.allow_root)),
                )

    def close(self) -> None:
        self._db.close()
