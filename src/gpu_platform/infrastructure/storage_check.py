"""Refuse a damaged data dir before anything starts (issue 20.6).

`serve` opens each store of the data dir once and closes it again before the container starts
Raft, the agents' server or the REST server: a store that fails its checks
(`adapters/outbound/integrity.py`: a record failing its checksum, a database behind its
watermark) raises `StorageError`, which `serve` turns into one line and exit status 1 — with
nothing started yet, so nothing is left to stop and no other log line precedes it.
"""

from __future__ import annotations

from gpu_platform.adapters.outbound.raft_storage import SqliteRaftStorage
from gpu_platform.adapters.outbound.storage import (
    SqliteAccessStore,
    SqliteHardwareStore,
    SqliteJobStore,
    SqliteQuotaStore,
)
from gpu_platform.infrastructure.config import Settings

__all__ = ["check_storage"]


def check_storage(settings: Settings) -> None:
    """Open and close every store `serve` will use; raises `StorageError` on damage."""
    if settings.server_id:
        identity = {"member": settings.server_id}  # another member's log is refused too
        SqliteRaftStorage(settings.data_dir / "raft.db", identity=identity).close()
    state = settings.data_dir / "state.db"
    for store in (SqliteJobStore, SqliteHardwareStore, SqliteAccessStore, SqliteQuotaStore):
        store(state).close()
