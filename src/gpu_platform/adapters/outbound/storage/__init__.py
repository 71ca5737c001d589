"""Durable storage adapters."""

from gpu_platform.adapters.outbound.storage.sqlite_hardware import SqliteHardwareStore
from gpu_platform.adapters.outbound.storage.sqlite_store import SqliteJobStore

__all__ = ["SqliteHardwareStore", "SqliteJobStore"]
