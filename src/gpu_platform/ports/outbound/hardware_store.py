"""HardwareStore: durable GPU/node admin and health states, and the operator audit log."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from gpu_platform.domain.faults.commands import HardwareRecord
from gpu_platform.domain.model.audit import AuditRecord

__all__ = ["HardwareStore"]


@runtime_checkable
class HardwareStore(Protocol):
    """Durable when each call returns (survives a process crash). Thread-safe.

    `save_hardware` upserts records keyed by (kind, name); `load_hardware` returns the latest
    record of every GPU and node. `append_audit` adds one record; `audit(limit)` returns the
    newest `limit` records, oldest first.
    """

    def save_hardware(self, records: Sequence[HardwareRecord]) -> None: ...

    def load_hardware(self) -> list[HardwareRecord]: ...

    def append_audit(self, record: AuditRecord) -> None: ...

    def audit(self, limit: int = 100) -> list[AuditRecord]: ...
