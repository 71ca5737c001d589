from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.storage import SqliteJobStore
from gpu_platform.ports.outbound.job_store import JobStore
from gpu_platform.testing.contracts import JobStoreContract
from gpu_platform.testing.fakes import InMemoryJobStore


class TestSqliteJobStore(JobStoreContract):
    @pytest.fixture
    def make_store(self, tmp_path: Path) -> Callable[[], JobStore]:
        path = tmp_path / "state.db"
        return lambda: SqliteJobStore(path)


class TestInMemoryJobStore(JobStoreContract):
    @pytest.fixture
    def make_store(self) -> Callable[[], JobStore]:
        store = InMemoryJobStore()
        return lambda: store
