"""SqliteAccessStore: tenants and token digests in SQLite (the data dir's state.db, own tables)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from gpu_platform.adapters.outbound.storage.sqlite_db import SqliteDb
from gpu_platform.domain.access_state import last_admin
from gpu_platform.domain.model.tenancy import Role
from gpu_platform.ports.outbound.access_store import TokenRecord

__all__ = ["SqliteAccessStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tenants (name TEXT PRIMARY KEY, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS tokens (
    token_id TEXT PRIMARY KEY,
    digest TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    tenant TEXT NOT NULL,
    role TEXT NOT NULL,
    created_at REAL NOT NULL,
    revoked_at REAL
);
"""
_COLUMNS = "token_id, digest, name, tenant, role, created_at, revoked_at"
_LIVE_ADMINS = "SELECT token_id FROM tokens WHERE role = 'admin' AND revoked_at IS NULL"


def _record(row: tuple[str, str, str, str, str, float, float | None]) -> TokenRecord:
    token_id, digest, name, tenant, role, created_at, revoked_at = row
    return TokenRecord(token_id, digest, name, tenant, Role(role), created_at, revoked_at)


class SqliteAccessStore:
    """Implements AccessStore."""

    def __init__(self, path: str | Path) -> None:
        self._db = SqliteDb(path, _SCHEMA)

    def add_tenant(self, name: str, created_at: float) -> None:
        with self._db.transaction() as db:
            db.execute(
                "INSERT OR IGNORE INTO tenants (name, created_at) VALUES (?, ?)", (name, created_at)
            )

    def tenants(self) -> list[tuple[str, float]]:
        with self._db.reading() as db:
            return list(db.execute("SELECT name, created_at FROM tenants ORDER BY name"))

    def add_token(self, record: TokenRecord) -> None:
        try:
            with self._db.transaction() as db:
                db.execute(
                    f"INSERT INTO tokens ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        record.token_id,
                        record.digest,
                        record.name,
                        record.tenant,
                        str(record.role),
                        record.created_at,
                        record.revoked_at,
                    ),
                )
        except sqlite3.IntegrityError as exc:
            raise ValueError(f"token {record.token_id}: {exc}") from None

    def token_by_digest(self, digest: str) -> TokenRecord | None:
        with self._db.reading() as db:
            row = db.execute(
                f"SELECT {_COLUMNS} FROM tokens WHERE digest = ?", (digest,)
            ).fetchone()
        return None if row is None else _record(row)

    def tokens(self) -> list[TokenRecord]:
        with self._db.reading() as db:
            rows = db.execute(
                f"SELECT {_COLUMNS} FROM tokens ORDER BY created_at, rowid"
            ).fetchall()
        return [_record(r) for r in rows]

    def revoke_token(self, token_id: str, at: float) -> bool:
        with self._db.transaction() as db:
            live = [r for (r,) in db.execute(_LIVE_ADMINS)]
            if live == [token_id]:
                raise last_admin(token_id)
            cur = db.execute(
                "UPDATE tokens SET revoked_at = COALESCE(revoked_at, ?) WHERE token_id = ?",
                (at, token_id),
            )
            return cur.rowcount > 0

    def add_first_admin(self, record: TokenRecord) -> bool:
        try:
            with self._db.transaction() as db:
                if db.execute(_LIVE_ADMINS).fetchone() is not None:
                    return False
                db.execute(
                    "INSERT OR IGNORE INTO tenants (name, created_at) VALUES (?, ?)",
                    (record.tenant, record.created_at),
                )
                db.execute(
                    f"INSERT INTO tokens ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, NULL)",
                    (
                        record.token_id,
                        record.digest,
                        record.name,
                        record.tenant,
                        str(Role.ADMIN),
                        record.created_at,
                    ),
                )
                return True
        except sqlite3.IntegrityError as exc:
            raise ValueError(f"token {record.token_id}: {exc}") from None

    def close(self) -> None:
        self._db.close()
