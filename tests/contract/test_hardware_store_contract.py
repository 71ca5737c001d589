from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.storage import SqliteHardwareStore
from gpu_platform.ports.outbound.hardware_store import HardwareStore
from gpu_platform.testing.contracts import HardwareStoreContract
from gpu_platform.testing.fakes import InMemoryHardwareStore


class TestSqliteHardwareStore(HardwareStoreContract):
    @pytest.fixture
    def make_store(self, tmp_path: Path) -> Callable[[], HardwareStore]:
        path = tmp_path / "state.db"
        return lambda: SqliteHardwareStore(path)


class TestInMemoryHardwareStore(HardwareStoreContract):
    @pytest.fixture
    def make_store(self) -> Callable[[], HardwareStore]:
        store = InMemoryHardwareStore()
        return lambda: store
