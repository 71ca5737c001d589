from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.raft_storage import SqliteRaftStorage
from gpu_platform.ports.outbound.raft import RaftStorage
from gpu_platform.testing.contracts import RaftStorageContract
from gpu_platform.testing.raft_fakes import InMemoryRaftStorage


class TestSqliteRaftStorage(RaftStorageContract):
    @pytest.fixture
    def make_storage(self, tmp_path: Path) -> Callable[[], RaftStorage]:
        path = tmp_path / "raft.db"
        return lambda: SqliteRaftStorage(path)


class TestInMemoryRaftStorage(RaftStorageContract):
    @pytest.fixture
    def make_storage(self) -> Callable[[], RaftStorage]:
        storage = InMemoryRaftStorage()
        return lambda: storage


def test_both_storages_satisfy_the_port_protocol(tmp_path: Path) -> None:
    sqlite = SqliteRaftStorage(tmp_path / "raft.db")
    assert isinstance(sqlite, RaftStorage)
    assert isinstance(InMemoryRaftStorage(), RaftStorage)
    sqlite.close()
