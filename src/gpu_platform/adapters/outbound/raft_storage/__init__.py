"""Durable `RaftStorage` adapters."""

from gpu_platform.adapters.outbound.raft_storage.sqlite import SqliteRaftStorage

__all__ = ["SqliteRaftStorage"]
