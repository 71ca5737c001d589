"""AuditLog: the append-only, hash-chained audit trail (domain.model.audit_chain)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

__all__ = ["AuditLog"]


@runtime_checkable
class AuditLog(Protocol):
    """`append(fields)` adds one entry (JSON-serialisable values); it may return before the
    entry is on disk (adapters batch fsyncs off the request path). `flush()` returns once every
    entry appended before it is on disk (fsynced). `tail(limit)` is the newest `limit`
    entries, oldest first (appended ones included). Thread-safe."""

    def append(self, fields: Mapping[str, Any]) -> None: ...

    def flush(self) -> None: ...

    def tail(self, limit: int) -> list[dict[str, Any]]: ...
