"""SqliteQuotaStore: tenants' quotas in SQLite (the data dir's state.db, own table)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from gpu_platform.adapters.outbound.storage.sqlite_db import SqliteDb
from gpu_platform.domain.scheduling.model import Quota

__all__ = ["SqliteQuotaStore"]

_SCHEMA = "CREATE TABLE IF NOT EXISTS quotas (tenant TEXT PRIMARY KEY, quota TEXT NOT NULL);"


class SqliteQuotaStore:
    """Implements QuotaStore; each quota is one JSON row."""

    def __init__(self, path: str | Path) -> None:
        self._db = SqliteDb(path, _SCHEMA)

    def load_quotas(self) -> dict[str, Quota]:
        with self._db.reading() as db:
            rows = list(db.execute("SELECT tenant, quota FROM quotas ORDER BY tenant"))
        return {tenant: Quota(**json.loads(text)) for tenant, text in rows}

    def save_quota(self, tenant: str, quota: Quota | None) -> None:
        with self._db.transaction() as db:
            if quota is None:
                db.execute("DELETE FROM quotas WHERE tenant = ?", (tenant,))
            else:
                db.execute(
                    "INSERT OR REPLACE INTO quotas (tenant, quota) VALUES (?, ?)",
                    (tenant, json.dumps(asdict(quota), sort_keys=True)),
                )

    def close(self) -> None:
        self._db.close()
