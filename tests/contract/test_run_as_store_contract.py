"""RunAsStore contract: the SQLite adapter, the replicated store and the in-memory fake."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.storage.sqlite_run_as import SqliteRunAsStore
from gpu_platform.application.run_as_replica import ReplicatedRunAsStore
from gpu_platform.domain.model.run_as import RunAsGrant
from gpu_platform.ports.outbound.run_as_store import RunAsStore
from gpu_platform.testing.contracts.run_as_store import RunAsStoreContract
from gpu_platform.testing.fakes import InMemoryRunAsStore
from gpu_platform.testing.solo_replication import SoloReplication


class TestSqliteRunAsStore(RunAsStoreContract):
    @pytest.fixture
    def make_store(self, tmp_path: Path) -> Callable[[], RunAsStore]:
        return lambda: SqliteRunAsStore(tmp_path / "state.db")


class TestInMemoryRunAsStore(RunAsStoreContract):
    @pytest.fixture
    def make_store(self) -> Callable[[], RunAsStore]:
        shared: dict[str, RunAsGrant] = {}
        return lambda: InMemoryRunAsStore(shared)


class TestReplicatedRunAsStore(RunAsStoreContract):
    """Over a real ClusterReplica (one voter, committing in-line)."""

    @pytest.fixture
    def make_store(self) -> Callable[[], RunAsStore]:
        store = ReplicatedRunAsStore(SoloReplication())
        return lambda: store
