"""Durable storage adapters."""

from gpu_platform.adapters.outbound.storage.sqlite_store import SqliteJobStore

__all__ = ["SqliteJobStore"]
