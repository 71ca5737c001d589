"""Stable storage as the core reads it, and `MemoryStorage`, its in-memory implementation.

The core only *reads* storage (`Storage` protocol); the driver *writes* it from each `Ready`
(append `entries_to_persist`, set `hard_state`, apply `snapshot`) before sending messages. The
log held by storage starts after its snapshot: `first_index() == snapshot.index + 1`.
`MemoryStorage` keeps a dummy entry at position 0 carrying the snapshot's index and term, like
etcd-raft's MemoryStorage; the simulated network crashes a node by dropping everything *but*
its MemoryStorage. Issue 10 provides a disk-backed implementation of the same protocol.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from gpu_platform.domain.consensus.errors import (
    CompactedError,
    LogInvariantError,
    SnapshotOutOfDateError,
    UnavailableError,
)
from gpu_platform.domain.consensus.types import (
    ConfState,
    Entry,
    HardState,
    Snapshot,
    SnapshotMetadata,
)

__all__ = ["NO_LIMIT", "LogReads", "MemoryStorage", "Storage", "limit_size"]

NO_LIMIT = 2**63
"""A byte limit that never limits."""


def limit_size(ents: list[Entry], max_size: int) -> list[Entry]:
    """The longest prefix of `ents` within `max_size` bytes, but at least one entry."""
    if max_size >= NO_LIMIT or len(ents) <= 1:
        return ents
    size = ents[0].size()
    for n in range(1, len(ents)):
        size += ents[n].size()
        if size > max_size:
            return ents[:n]
    return ents


class Storage(Protocol):
    """Read access to the persisted log. Errors: CompactedError, UnavailableError."""

    def initial_state(self) -> tuple[HardState, ConfState]: ...

    def entries(self, lo: int, hi: int, max_size: int) -> list[Entry]:
        """Entries [lo, hi), limited to about `max_size` bytes (at least one)."""
        ...

    def term(self, index: int) -> int: ...

    def first_index(self) -> int: ...

    def last_index(self) -> int: ...

    def snapshot(self) -> Snapshot: ...


class LogReads:
    """The `Storage` read side over an in-memory copy of the log: `_ents[0]` is a dummy entry
    at the snapshot's position. Shared by MemoryStorage and durable storages that keep such a
    copy (their writes go to disk first, then to these fields)."""

    hard_state: HardState
    _snapshot: Snapshot
    _ents: list[Entry]

    def initial_state(self) -> tuple[HardState, ConfState]:
        return self.hard_state, self._snapshot.metadata.conf_state

    def entries(self, lo: int, hi: int, max_size: int) -> list[Entry]:
        offset = self._ents[0].index
        if lo <= offset:
            raise CompactedError
        if hi > self.last_index() + 1:
            raise LogInvariantError(f"entries' hi({hi}) is out of bound lastindex")
        if len(self._ents) == 1:
            raise UnavailableError  # only the dummy entry
        return limit_size(self._ents[lo - offset : hi - offset], max_size)

    def term(self, index: int) -> int:
        offset = self._ents[0].index
        if index < offset:
            raise CompactedError
        if index - offset >= len(self._ents):
            raise UnavailableError
        return self._ents[index - offset].term

    def first_index(self) -> int:
        return self._ents[0].index + 1

    def last_index(self) -> int:
        return self._ents[0].index + len(self._ents) - 1

    def snapshot(self) -> Snapshot:
        return self._snapshot

    def snapshot_metadata(self) -> SnapshotMetadata:
        """The latest snapshot's index, term and configuration, without reading its data."""
        return self._snapshot.metadata


class MemoryStorage(LogReads):
    """A `Storage` in memory; also the write side a driver (or the simulator) uses."""

    def __init__(self, conf_state: ConfState | None = None) -> None:
        """An empty log; `conf_state` seeds the configuration (an index-0 snapshot's)."""
        self.hard_state = HardState()
        self._snapshot = Snapshot(metadata=SnapshotMetadata(conf_state or ConfState()))
        self._ents: list[Entry] = [Entry(0, 0)]  # dummy entry at the snapshot's position

    # --- write side
    def set_hard_state(self, hs: HardState) -> None:
        self.hard_state = hs

    def apply_snapshot(self, snap: Snapshot) -> None:
        """Replace the log by `snap` (received from a leader)."""
        if self._snapshot.metadata.index >= snap.metadata.index:
            raise SnapshotOutOfDateError
        self._snapshot = snap
        self._ents = [Entry(snap.metadata.term, snap.metadata.index)]

    def create_snapshot(
        self, index: int, conf_state: ConfState, data: bytes | Iterable[bytes]
    ) -> Snapshot:
        """Record a snapshot of the applied state at `index`: `data`, or the concatenation of
        its pieces (compaction is separate)."""
        if index <= self._snapshot.metadata.index:
            raise SnapshotOutOfDateError
        if index > self.last_index():
            raise LogInvariantError(f"snapshot {index} is out of bound lastindex")
        term = self._ents[index - self._ents[0].index].term
        blob = data if isinstance(data, bytes) else b"".join(data)
        self._snapshot = Snapshot(blob, SnapshotMetadata(conf_state, index, term))
        return self._snapshot

    def compact(self, compact_index: int) -> None:
        """Discard entries before `compact_index` (keep it as the new dummy entry)."""
        offset = self._ents[0].index
        if compact_index <= offset:
            raise CompactedError
        if compact_index > self.last_index():
            raise LogInvariantError(f"compact {compact_index} is out of bound lastindex")
        i = compact_index - offset
        head = self._ents[i]
        self._ents = [Entry(head.term, head.index), *self._ents[i + 1 :]]

    def append(self, entries: Sequence[Entry]) -> None:
        """Append, overwriting any conflicting suffix; entries before first_index are ignored."""
        if not entries:
            return
        first = self.first_index()
        last = entries[0].index + len(entries) - 1
        if last < first:
            return
        if first > entries[0].index:
            entries = entries[first - entries[0].index :]
        offset = entries[0].index - self._ents[0].index
        if offset > len(self._ents):
            raise LogInvariantError(
                f"missing log entry [last: {self.last_index()}, append at: {entries[0].index}]"
            )
        del self._ents[offset:]
        self._ents.extend(entries)
