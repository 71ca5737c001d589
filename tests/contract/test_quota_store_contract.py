"""QuotaStore contract: the SQLite adapter and the in-memory fake."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.storage.sqlite_quotas import SqliteQuotaStore
from gpu_platform.domain.scheduling.model import Quota
from gpu_platform.ports.outbound.quota_store import QuotaStore
from gpu_platform.testing.contracts.quota_store import QuotaStoreContract
from gpu_platform.testing.fakes import InMemoryQuotaStore


class TestSqliteQuotaStore(QuotaStoreContract):
    @pytest.fixture
    def make_store(self, tmp_path: Path) -> Callable[[], QuotaStore]:
        return lambda: SqliteQuotaStore(tmp_path / "state.db")


class TestInMemoryQuotaStore(QuotaStoreContract):
    @pytest.fixture
    def make_store(self) -> Callable[[], QuotaStore]:
        shared: dict[str, Quota] = {}
        return lambda: InMemoryQuotaStore(shared)
