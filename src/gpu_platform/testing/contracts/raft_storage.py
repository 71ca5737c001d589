"""The RaftStorage contract: what the Raft driver relies on from any storage.

Subclass and provide `make_storage`: a factory; calling it again must reopen the same data
(the in-memory fake returns the same object). Every test closes and reopens at least once, so
"durable on return" is checked for adapters that keep their state on disk.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_platform.domain.consensus import (
    CompactedError,
    ConfState,
    Entry,
    EntryType,
    HardState,
    LogInvariantError,
    Snapshot,
    SnapshotMetadata,
    SnapshotOutOfDateError,
    UnavailableError,
)
from gpu_platform.domain.consensus.storage import NO_LIMIT
from gpu_platform.ports.outbound.raft import RaftStorage

__all__ = ["RaftStorageContract"]

CONF = ConfState(voters=(1, 2, 3))


def _ents(lo: int, hi: int, term: int = 1) -> list[Entry]:
    return [Entry(term, i, EntryType.NORMAL, f"e{i}t{term}".encode()) for i in range(lo, hi)]


def _log(s: RaftStorage) -> list[Entry]:
    return s.entries(s.first_index(), s.last_index() + 1, NO_LIMIT)


class RaftStorageContract:
    """The promises of `RaftStorage`, run against one adapter."""

    @pytest.fixture
    def make_storage(self) -> Callable[[], RaftStorage]:
        raise NotImplementedError

    def test_a_new_storage_is_empty(self, make_storage: Callable[[], RaftStorage]) -> None:
        s = make_storage()
        assert s.initial_state() == (HardState(), ConfState())
        assert (s.first_index(), s.last_index()) == (1, 0)
        assert s.snapshot().is_empty()
        with pytest.raises(UnavailableError):
            s.entries(1, 1, NO_LIMIT)
        assert s.term(0) == 0
        s.close()

    def test_saved_entries_and_hard_state_survive_a_reopen(
        self, make_storage: Callable[[], RaftStorage]
    ) -> None:
        s = make_storage()
        s.save(HardState(2, 1, 3), _ents(1, 6, term=2))
        s.close()
        s = make_storage()
        assert s.initial_state()[0] == HardState(2, 1, 3)
        assert _log(s) == _ents(1, 6, term=2)
        assert [s.term(i) for i in range(1, 6)] == [2] * 5
        with pytest.raises(UnavailableError):
            s.term(6)
        s.close()

    def test_a_save_without_hard_state_keeps_the_previous_one(
        self, make_storage: Callable[[], RaftStorage]
    ) -> None:
        s = make_storage()
        s.save(HardState(1, 2, 0), _ents(1, 3))
        s.save(None, _ents(3, 4))
        s.close()
        s = make_storage()
        assert s.initial_state()[0] == HardState(1, 2, 0)
        assert s.last_index() == 3
        s.close()

    def test_an_unsynced_save_is_still_atomic_and_survives_a_reopen(
        self, make_storage: Callable[[], RaftStorage]
    ) -> None:
        s = make_storage()
        s.save(HardState(1, 1, 0), _ents(1, 4))
        s.save(HardState(1, 1, 3), [], sync=False)  # only the commit index moved
        s.save(None, _ents(4, 5))
        s.close()
        s = make_storage()
        assert s.initial_state()[0] == HardState(1, 1, 3)
        assert _log(s) == _ents(1, 5)
        s.close()

    def test_appending_a_conflicting_suffix_overwrites_it_durably(
        self, make_storage: Callable[[], RaftStorage]
    ) -> None:
        s = make_storage()
        s.save(HardState(1, 0, 0), _ents(1, 8, term=1))
        s.save(HardState(2, 0, 0), _ents(4, 6, term=2))
        expected = _ents(1, 4, term=1) + _ents(4, 6, term=2)
        assert _log(s) == expected
        s.close()
        s = make_storage()
        assert _log(s) == expected
        assert s.last_index() == 5
        s.close()

    def test_an_append_leaving_a_gap_is_refused(
        self, make_storage: Callable[[], RaftStorage]
    ) -> None:
        s = make_storage()
        s.save(None, _ents(1, 3))
        with pytest.raises(LogInvariantError):
            s.save(None, _ents(5, 6))
        assert s.last_index() == 2
        s.close()

    def test_entries_respect_the_size_limit_but_return_at_least_one(
        self, make_storage: Callable[[], RaftStorage]
    ) -> None:
        s = make_storage()
        s.save(None, _ents(1, 11))
        assert len(s.entries(1, 11, 0)) == 1
        one = _ents(1, 2)[0].size()
        assert len(s.entries(1, 11, 3 * one)) == 3
        assert s.entries(3, 6, NO_LIMIT) == _ents(3, 6)
        s.close()

    def test_a_snapshot_then_compaction_survive_a_reopen(
        self, make_storage: Callable[[], RaftStorage]
    ) -> None:
        s = make_storage()
        s.save(HardState(3, 1, 9), _ents(1, 10, term=3))
        snap = s.create_snapshot(7, CONF, b"state@7")
        assert snap.metadata == SnapshotMetadata(CONF, 7, 3)
        s.compact(5)
        s.close()
        s = make_storage()
        assert s.snapshot() == Snapshot(b"state@7", SnapshotMetadata(CONF, 7, 3))
        assert s.initial_state() == (HardState(3, 1, 9), CONF)
        assert (s.first_index(), s.last_index()) == (6, 9)
        assert s.term(5) == 3
        with pytest.raises(CompactedError):
            s.term(4)
        with pytest.raises(CompactedError):
            s.entries(5, 7, NO_LIMIT)
        assert _log(s) == _ents(6, 10, term=3)
        s.close()

    def test_an_older_snapshot_is_refused(self, make_storage: Callable[[], RaftStorage]) -> None:
        s = make_storage()
        s.save(None, _ents(1, 10))
        s.create_snapshot(5, CONF, b"x")
        with pytest.raises(SnapshotOutOfDateError):
            s.create_snapshot(4, CONF, b"y")
        with pytest.raises(SnapshotOutOfDateError):
            s.save(None, [], Snapshot(b"old", SnapshotMetadata(CONF, 3, 1)))
        s.close()

    def test_a_received_snapshot_replaces_the_log_atomically_with_its_entries(
        self, make_storage: Callable[[], RaftStorage]
    ) -> None:
        s = make_storage()
        s.save(HardState(1, 0, 3), _ents(1, 5, term=1))
        snap = Snapshot(b"leader-state", SnapshotMetadata(CONF, 20, 4))
        s.save(HardState(4, 0, 20), _ents(21, 23, term=4), snap)
        s.close()
        s = make_storage()
        assert s.snapshot() == snap
        assert s.initial_state() == (HardState(4, 0, 20), CONF)
        assert (s.first_index(), s.last_index()) == (21, 22)
        assert s.term(20) == 4
        assert _log(s) == _ents(21, 23, term=4)
        s.close()

    def test_compacting_beyond_the_log_or_before_it_is_refused(
        self, make_storage: Callable[[], RaftStorage]
    ) -> None:
        s = make_storage()
        s.save(None, _ents(1, 4))
        with pytest.raises(LogInvariantError):
            s.compact(9)
        s.compact(2)
        with pytest.raises(CompactedError):
            s.compact(2)
        s.close()

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        ops=st.lists(
            st.tuples(st.integers(0, 3), st.integers(1, 6), st.integers(0, 4)),
            min_size=1,
            max_size=12,
        )
    )
    def test_the_log_after_any_sequence_of_writes_matches_a_list_model_after_reopen(
        self, make_storage: Callable[[], RaftStorage], ops: list[tuple[int, int, int]]
    ) -> None:
        s = make_storage()
        # Start from whatever earlier examples left: the model starts from the current log.
        model = {e.index: e for e in _log(s)} if s.last_index() >= s.first_index() else {}
        term = max((e.term for e in model.values()), default=0) + 1
        for back, count, _ in ops:
            start = max(s.first_index(), s.last_index() + 1 - back)
            new = _ents(start, start + count, term=term)
            s.save(HardState(term, 0, 0), new)
            for i in [i for i in model if i >= start]:
                del model[i]
            model.update({e.index: e for e in new})
            term += 1
        s.close()
        s = make_storage()
        assert _log(s) == [model[i] for i in sorted(model)]
        assert s.initial_state()[0].term == term - 1
        s.close()
