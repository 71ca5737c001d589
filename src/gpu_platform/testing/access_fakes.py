"""In-memory fakes of the AccessStore and AuditLog ports (the audit fake keeps the real chain
lines, so `verify` works on `lines`)."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gpu_platform.domain.access_state import last_admin
from gpu_platform.domain.model.audit_chain import GENESIS, chain_entry
from gpu_platform.domain.model.tenancy import Role
from gpu_platform.ports.outbound.access_store import TokenRecord

__all__ = ["InMemoryAccessStore", "InMemoryAuditLog"]


class InMemoryAccessStore:
    """Implements AccessStore in memory."""

    def __init__(self) -> None:
        self._tenants: dict[str, float] = {}
        self._tokens: dict[str, TokenRecord] = {}
        self._lock = threading.Lock()

    def add_tenant(self, name: str, created_at: float) -> None:
        with self._lock:
            self._tenants.setdefault(name, created_at)

    def tenants(self) -> list[tuple[str, float]]:
        with self._lock:
            return sorted(self._tenants.items())

    def add_token(self, record: TokenRecord) -> None:
        with self._lock:
            if record.token_id in self._tokens or any(
                t.digest == record.digest for t in self._tokens.values()
            ):
                raise ValueError(f"token {record.token_id}: duplicate")
            self._tokens[record.token_id] = record

    def token_by_digest(self, digest: str) -> TokenRecord | None:
        with self._lock:
            return next((t for t in self._tokens.values() if t.digest == digest), None)

    def tokens(self) -> list[TokenRecord]:
        with self._lock:
            return list(self._tokens.values())

    def revoke_token(self, token_id: str, at: float) -> bool:
        with self._lock:
            record = self._tokens.get(token_id)
            if record is None:
                return False
            if self._live_admins() == [token_id]:
                raise last_admin(token_id)
            if record.revoked_at is None:
                self._tokens[token_id] = replace(record, revoked_at=at)
            return True

    def add_first_admin(self, record: TokenRecord) -> bool:
        with self._lock:
            if self._live_admins():
                return False
            self._tenants.setdefault(record.tenant, record.created_at)
            self._tokens[record.token_id] = replace(record, role=Role.ADMIN, revoked_at=None)
            return True

    def _live_admins(self) -> list[str]:
        return [
            t.token_id
            for t in self._tokens.values()
            if t.role is Role.ADMIN and t.revoked_at is None
        ]


class InMemoryAuditLog:
    """Implements AuditLog in memory; `lines` are the chain's lines."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._prev = GENESIS
        self._lock = threading.Lock()

    def append(self, fields: Mapping[str, Any]) -> None:
        with self._lock:
            line, self._prev = chain_entry(len(self.lines) + 1, self._prev, fields)
            self.lines.append(line)

    def flush(self) -> None:
        """Nothing to wait for: every entry is kept as it is appended."""

    def tail(self, limit: int) -> list[dict[str, Any]]:
        with self._lock:
            return [json.loads(line) for line in self.lines[-limit:]] if limit > 0 else []
