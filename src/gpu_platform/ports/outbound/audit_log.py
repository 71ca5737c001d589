"""AuditLog: the append-only, hash-chained audit trail (domain.model.audit_chain)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

__all__ = ["AuditLog"]


@runtime_checkable
class AuditLog(Protocol):
    """`append(fields)` adds one entry (JSON-serialisable values) and returns once it is on
    disk (fsynced). `tail(limit)` is the newest `limit` entries, oldest first. Thread-safe."""

    def append(self, fields: Mapping[str, Any]) -> None: ...

    def tail(self, limit: int) -> list[dict[str, Any]]: ...
