"""Raft's outbound ports: durable `RaftStorage` and the `RaftTransport` between peers.

`RaftStorage` is the consensus core's read-only `Storage` plus the writes a driver makes from
each `Ready`; `RaftTransport` moves `Message`s between peers. Both are driven by one thread,
the Raft loop of `application.raft_node.RaftNode` (the transport's callbacks arrive on the
transport's own thread and must only enqueue).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from gpu_platform.domain.consensus import (
    ConfState,
    Entry,
    HardState,
    Message,
    Snapshot,
    SnapshotMetadata,
)

__all__ = [
    "MessageHandler",
    "RaftStorage",
    "RaftTransport",
    "SnapshotReport",
    "SnapshotStaging",
    "StagedSnapshot",
    "UnreachableHandler",
]


@runtime_checkable
class RaftStorage(Protocol):
    """The Raft log, hard state and latest snapshot, durable on return of every write.

    Reads are the core's `Storage` protocol (`CompactedError` / `UnavailableError` as there).
    Writes:

    * `save(hard_state, entries, snapshot, sync=True)` — one atomic step: install `snapshot`
      (if any, replacing the log), append `entries` (overwriting a conflicting suffix) and
      record `hard_state` (if any). After a crash either all of it is there or none. With
      `sync=True` it is durable on return, even across power loss; `sync=False` (allowed when
      the `Ready` says `must_sync` is false: only the commit index moved) still survives a
      process crash but may be lost with the OS, which Raft tolerates.
    * `create_snapshot(index, conf_state, data)` — record the applied state at `index`:
      `data`, or the concatenation of an iterable of pieces, consumed once on the calling
      thread (a storage may write them as they come instead of holding them). The returned
      snapshot carries the metadata; its data may be left empty (`snapshot()` has it).
    * `compact(index)` — discard entries before `index`.

    Not thread-safe: one thread (the Raft loop) reads and writes. `close()` releases files.
    """

    # --- the core's Storage (read side)
    def initial_state(self) -> tuple[HardState, ConfState]: ...

    def entries(self, lo: int, hi: int, max_size: int) -> list[Entry]: ...

    def term(self, index: int) -> int: ...

    def first_index(self) -> int: ...

    def last_index(self) -> int: ...

    def snapshot(self) -> Snapshot: ...

    def snapshot_metadata(self) -> SnapshotMetadata:
        """The latest snapshot's index, term and configuration; cheap (no data is read)."""
        ...

    # --- durable writes
    def save(
        self,
        hard_state: HardState | None,
        entries: Sequence[Entry],
        snapshot: Snapshot | None = None,
        sync: bool = True,
    ) -> None: ...

    def create_snapshot(
        self, index: int, conf_state: ConfState, data: bytes | Iterable[bytes]
    ) -> Snapshot: ...

    def compact(self, compact_index: int) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class StagedSnapshot:
    """A snapshot's bytes written ahead by `SnapshotStaging.stage_snapshot`: `chunks` pieces
    of `size` bytes in all; `serial` names the staging."""

    serial: int
    chunks: int
    size: int


@runtime_checkable
class SnapshotStaging(Protocol):
    """A `RaftStorage` that can write a snapshot's bytes from another thread (issue 21: a
    snapshot of 20,000 jobs, 14 MB, took the Raft loop 1.6 s to write).

    * `stage_snapshot(pieces)` — write the concatenation of `pieces`, off the Raft loop (the
      applier's thread), where no reader sees it; one staging at a time: it waits until the
      previous one was stored or discarded.
    * `store_staged(index, conf_state, staged)` (on the Raft loop) then makes it the
      snapshot at `index` in one small durable write (what `create_snapshot` does with the
      bytes); `discard_staged(staged)` drops it (a newer snapshot arrived meanwhile, or the
      node stops). A crash before the former leaves the previous snapshot in place."""

    def stage_snapshot(self, pieces: Iterable[bytes]) -> StagedSnapshot: ...

    def store_staged(
        self, index: int, conf_state: ConfState, staged: StagedSnapshot
    ) -> Snapshot: ...

    def discard_staged(self, staged: StagedSnapshot) -> None: ...


MessageHandler = Callable[[Message], None]
"""Called with every message received from a peer (on the transport's thread; must not block)."""

UnreachableHandler = Callable[[int], None]
"""Called with a peer's id when a batch to it could not be delivered."""

SnapshotReport = Callable[[int, bool], None]
"""Called with (peer id, ok) once a snapshot message was delivered (True) or lost (False)."""


@runtime_checkable
class RaftTransport(Protocol):
    """Best-effort, ordered-per-peer delivery of Raft messages between peers.

    `send` never blocks and never raises for a peer's failure: messages to an unreachable or
    slow peer are dropped (Raft retransmits) and reported through `on_unreachable`. Messages to
    one peer arrive in the order sent, or not at all. `addresses` is the address book
    (id -> "host:port"), used to tell clients where the leader is. `start` begins serving and
    calls `on_message` for every message received; `stop` is idempotent. `send` is thread-safe.

    Membership: `add_peer(id, address)` adds (or re-addresses) a peer and `remove_peer(id)`
    forgets one, closing its connection and dropping what is queued for it; both are called
    from the Raft loop as conf changes are applied, before or after `start`, are idempotent,
    and show in `addresses` at once. Messages to a peer not in the book are dropped.

    Optional: a transport whose `on_message` calls come from threads that may block (not an
    event loop) says so with a class attribute `inline_delivery = True`; the Raft node then
    steps, persists and sends on those threads when its loop is free (`application.raft_inbox`).
    """

    @property
    def addresses(self) -> Mapping[int, str]: ...

    def start(
        self,
        on_message: MessageHandler,
        on_unreachable: UnreachableHandler,
        on_snapshot: SnapshotReport,
    ) -> None: ...

    def send(self, messages: Sequence[Message]) -> None: ...

    def add_peer(self, node_id: int, address: str) -> None: ...

    def remove_peer(self, node_id: int) -> None: ...

    def stop(self) -> None: ...
