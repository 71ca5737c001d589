"""Durable storage adapters."""

from gpu_platform.adapters.outbound.storage.audit_file import AuditChainBroken, JsonlAuditLog
from gpu_platform.adapters.outbound.storage.sqlite_access import SqliteAccessStore
from gpu_platform.adapters.outbound.storage.sqlite_hardware import SqliteHardwareStore
from gpu_platform.adapters.outbound.storage.sqlite_quotas import SqliteQuotaStore
from gpu_platform.adapters.outbound.storage.sqlite_run_as import SqliteRunAsStore
from gpu_platform.adapters.outbound.storage.sqlite_store import SqliteJobStore

__all__ = [
    "AuditChainBroken",
    "JsonlAuditLog",
    "SqliteAccessStore",
    "SqliteHardwareStore",
    "SqliteJobStore",
    "SqliteQuotaStore",
    "SqliteRunAsStore",
]
