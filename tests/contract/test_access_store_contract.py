from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.storage import JsonlAuditLog, SqliteAccessStore
from gpu_platform.application.access_replica import ReplicatedAccessStore
from gpu_platform.ports.outbound.access_store import AccessStore
from gpu_platform.ports.outbound.audit_log import AuditLog
from gpu_platform.testing.access_fakes import InMemoryAccessStore, InMemoryAuditLog
from gpu_platform.testing.contracts.access_store import AccessStoreContract, AuditLogContract
from gpu_platform.testing.solo_replication import SoloReplication


class TestSqliteAccessStore(AccessStoreContract):
    @pytest.fixture
    def make_store(self, tmp_path: Path) -> Callable[[], AccessStore]:
        return lambda: SqliteAccessStore(tmp_path / "state.db")


class TestInMemoryAccessStore(AccessStoreContract):
    @pytest.fixture
    def make_store(self) -> Callable[[], AccessStore]:
        store = InMemoryAccessStore()
        return lambda: store


class TestReplicatedAccessStore(AccessStoreContract):
    """Over a real ClusterReplica (one voter, committing in-line)."""

    @pytest.fixture
    def make_store(self) -> Callable[[], AccessStore]:
        store = ReplicatedAccessStore(SoloReplication())
        return lambda: store


class TestJsonlAuditLog(AuditLogContract):
    @pytest.fixture
    def make_log(self, tmp_path: Path) -> Callable[[], AuditLog]:
        opened: list[JsonlAuditLog] = []

        def make() -> AuditLog:
            for log in opened:
                log.close()
            opened.append(JsonlAuditLog(tmp_path / "audit.jsonl"))
            return opened[-1]

        return make


class TestInMemoryAuditLog(AuditLogContract):
    @pytest.fixture
    def make_log(self) -> Callable[[], AuditLog]:
        log = InMemoryAuditLog()
        return lambda: log
