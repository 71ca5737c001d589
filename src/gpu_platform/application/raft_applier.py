"""`Applier`: the Raft driver's apply side, on a thread of its own (issue 21: applying is
separate from acknowledging; no lock of the state machine is ever waited for by Raft).

Theory of operation. The Raft loop (`raft_node`) owns the `RawNode`: it ticks, persists,
sends heartbeats, votes and AppendEntries and learns what is committed. It never calls the
state machine. After each `Ready` is persisted it hands what the state machine must see to
`Applier.submit`, in log order, and goes on; the applier thread takes the items one by one:

- `Committed(entries, conf_results, conf_state, snapshot_now)`: apply each entry in order,
  exactly once (`StateMachine.apply(index, data)`; the leader's empty entries only move the
  applied index), then settle the proposal future at that index (`PendingProposals`). Conf
  changes were already applied to the `RawNode` and the transport by the Raft loop (the core
  needs them at once and they do not touch the state machine); their outcomes travel in
  `conf_results`, so a conf change's future, too, resolves only after every entry before it.
- `Restore(index, data)`: a snapshot received from the leader, already durable: the state
  machine is replaced, the applied index jumps to `index`, proposals up to it fail.
- `ReadWait(index, future)`: a confirmed ReadIndex; resolved once applied >= index.
- `LeadershipLost(term, error)`: proposals of terms <= `term` that the entries before did
  not settle fail with `error` (their outcome is unknown).

A state machine that holds its lock for a long time (a scheduling cycle) delays applying and
the proposers' answers, never a heartbeat, a vote or an acknowledgement.

Snapshots: after a `Committed` batch, when `snapshot_entries` entries were applied since the
last snapshot (or the batch says `snapshot_now`: a conf change the stored snapshot does not
name), the applier encodes the state machine at exactly that applied index — nothing else
applies in between — into a temporary file (in memory up to `SPOOL_BYTES`, on disk beyond)
and hands a `MadeSnapshot(index, conf_state, file)` to `on_snapshot`; the Raft loop stores it
and compacts the log. With a storage that stages snapshots (`SnapshotStaging`, the SQLite
one) the applier also writes the bytes into it here, so that the Raft loop's part is one
small write (a 14 MB snapshot took the loop 1.6 s to write at load 22). The `conf_state` is
the one in force at that index (the batch's).

`stop()` lets the applier finish what was queued before it, then ends the thread; read waits
still open fail with `NodeStopped`.

Applying on the proposer's thread (`help`). Items are taken only by the holder of the *apply
lock*, in order. A proposer that has just run the Raft loop's work itself (`RaftNode.drive`,
the sole voter's path) calls `help()`: when the applier is idle it takes the lock and applies
what is queued (its own entry among it) on its own thread, so its answer crosses no thread
(each hand-off between Python threads costs 50-150 µs of wake-up and GIL transfer); when the
applier's thread is busy it is woken instead. What the driving thread submits while it holds
the loop lock (`driver`) wakes nobody: its `help()` follows.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import IO, Protocol, runtime_checkable

from gpu_platform.application.raft_errors import MembershipChangeInProgress, NodeStopped
from gpu_platform.application.raft_proposals import PendingProposals, fail_future
from gpu_platform.domain.consensus import ConfState, Entry, EntryType
from gpu_platform.ports.outbound.metrics import RaftMetrics
from gpu_platform.ports.outbound.raft import SnapshotStaging, StagedSnapshot

__all__ = [
    "SPOOL_BYTES",
    "Applier",
    "ChunkedStateMachine",
    "Committed",
    "LeadershipLost",
    "MadeSnapshot",
    "ReadWait",
    "Restore",
    "StateMachine",
]

log = logging.getLogger(__name__)

SPOOL_BYTES = 8 << 20  # a snapshot up to this size is spooled in memory, larger ones to disk
_PIECE = 1 << 20  # bytes read back per piece when the Raft loop stores the snapshot


@runtime_checkable
class StateMachine(Protocol):
    """The replicated state machine. Called only on the applier thread (and once, to restore
    the stored snapshot, by the `RaftNode` constructor).

    `apply` must be deterministic (same entries in the same order give the same state on every
    node) and returns the result handed to the proposer. `snapshot()` serialises the whole
    state; `restore(data)` replaces it (`b""` is the initial, empty state).
    """

    def apply(self, index: int, data: bytes) -> object: ...

    def snapshot(self) -> bytes: ...

    def restore(self, data: bytes) -> None: ...


@runtime_checkable
class ChunkedStateMachine(StateMachine, Protocol):
    """A state machine that can also hand its snapshot over in pieces (whose concatenation is
    `snapshot()`), consumed to the end on the applier thread."""

    def snapshot_chunks(self) -> Iterator[bytes]: ...


@dataclass(frozen=True, slots=True)
class Committed:
    """Committed entries in log order; `conf_state` is the configuration after the last."""

    entries: tuple[Entry, ...]
    conf_state: ConfState
    conf_results: Mapping[int, ConfState | BaseException] = field(default_factory=dict)
    snapshot_now: bool = False


@dataclass(frozen=True, slots=True)
class Restore:
    """A received snapshot at `index` (already durable): `data` is the state machine's part."""

    index: int
    data: bytes


@dataclass(frozen=True, slots=True)
class ReadWait:
    index: int
    future: Future[int]


@dataclass(frozen=True, slots=True)
class LeadershipLost:
    term: int
    error: BaseException


_Item = Committed | Restore | ReadWait | LeadershipLost | None  # None: stop


@dataclass(slots=True)
class MadeSnapshot:
    """The state machine's snapshot at `index` (with `conf_state`), spooled in `file`; with a
    staging storage, also written ahead into it (`staged`; `discard` drops it unless the Raft
    loop took it)."""

    index: int
    conf_state: ConfState
    file: IO[bytes]
    staged: StagedSnapshot | None = None
    discard: Callable[[StagedSnapshot], None] | None = None

    def pieces(self) -> Iterator[bytes]:
        self.file.seek(0)
        while piece := self.file.read(_PIECE):
            yield piece

    def take(self) -> StagedSnapshot | None:
        """The staged bytes, now the taker's to store (or discard)."""
        staged, self.staged = self.staged, None
        return staged

    def close(self) -> None:
        self.file.close()
        staged = self.take()
        if staged is not None and self.discard is not None:
            self.discard(staged)


class Applier:
    """Applies committed entries on its own thread (module docstring). `submit` never blocks."""

    def __init__(
        self,
        node_id: int,
        state_machine: StateMachine,
        proposals: PendingProposals,
        metrics: RaftMetrics,
        *,
        applied: int,
        snapshot_entries: int,
        header: Callable[[ConfState], bytes],
        on_snapshot: Callable[[MadeSnapshot], None],
        lost: Callable[[], BaseException],
        staging: SnapshotStaging | None = None,
    ) -> None:
        """`applied`: the index the state machine already reflects (the stored snapshot's);
        `header(conf_state)`: the bytes put before the state machine's in a snapshot; `lost()`:
        the error of a proposal whose index got another entry (or a snapshot); `staging`: a
        storage that takes a snapshot's bytes on this thread (the Raft loop then only
        stores the staged result)."""
        self.node_id = node_id
        self.state_machine = state_machine
        self.proposals = proposals
        self.metrics = metrics
        self.applied = applied  # read by other threads: an int, replaced whole
        self.snapshot_entries = snapshot_entries
        self._header = header
        self._on_snapshot = on_snapshot
        self._lost = lost
        self._staging = staging
        self._last_snapshot = applied
        self._reads: list[tuple[int, Future[int]]] = []
        self._items: collections.deque[_Item] = collections.deque()
        self._lock = threading.Lock()  # the apply lock: its holder takes and applies items
        self._signal = threading.Lock()  # released = "look" (as `raft_inbox.Inbox`'s)
        self._signal.acquire()
        self._ended = False  # the thread took the stop item (or applying failed)
        self.driver: int | None = None  # a thread whose submits wake nobody (`help` follows)
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name=f"raft-apply-{self.node_id}", daemon=True
        )
        self._thread.start()

    def submit(self, item: Committed | Restore | ReadWait | LeadershipLost) -> None:
        self._items.append(item)
        if self.driver != threading.get_ident():
            self._wake()

    def help(self) -> None:
        """Apply what is queued on this thread when the applier is idle, else wake its thread
        (module docstring). Call it holding no lock the state machine takes."""
        if not self._items or self._ended:
            return
        if not self._lock.acquire(blocking=False):
            self._wake()
            return
        try:
            self._drain(on_thread=False)
        except BaseException:
            log.exception("raft applier of node %d crashed (on a proposer's thread)", self.node_id)
            self._ended = True  # as when the applier's thread dies: nothing more is applied
            self._wake()
            raise
        finally:
            self._lock.release()

    def stop(self, timeout: float = 30.0) -> None:
        """Finish what was submitted before, then end the thread."""
        if self._thread is None:
            return
        self._items.append(None)
        self._wake()
        self._thread.join(timeout)

    def _wake(self) -> None:
        with contextlib.suppress(RuntimeError):  # released already: it will look anyway
            self._signal.release()

    # ------------------------------------------------------------------ the thread
    def _run(self) -> None:
        try:
            while not self._ended:
                self._signal.acquire()
                with self._lock:
                    if not self._drain(on_thread=True):
                        return
        except BaseException:
            log.exception("raft applier of node %d crashed", self.node_id)
            raise
        finally:
            with self._lock:
                self._ended = True
                err = NodeStopped()
                for _, fut in self._reads:
                    fail_future(fut, err)
                self._reads = []

    def _drain(self, *, on_thread: bool) -> bool:
        """Handle the queued items in order (under the apply lock); False once the stop item
        was taken (only the thread takes it: a helper leaves it, and wakes the thread)."""
        items = self._items
        while items and not self._ended:
            item = items[0]
            if item is None:
                if on_thread:
                    items.popleft()
                    return False
                self._wake()
                return True
            items.popleft()
            self._handle(item)
        return True

    def _handle(self, item: Committed | Restore | ReadWait | LeadershipLost) -> None:
        if isinstance(item, Committed):
            # Only at the batch's own end: its conf state is the one in force there (a batch a
            # restored snapshot covered says nothing of the configuration at that snapshot).
            ends_here = self._apply(item)
            if ends_here and (item.snapshot_now or self._snapshot_due()):
                self._snapshot(item.conf_state)
        elif isinstance(item, Restore):
            self.state_machine.restore(item.data)
            self.applied = item.index
            self._last_snapshot = item.index
            self.proposals.fail_up_to(item.index, self._lost())
        elif isinstance(item, ReadWait):
            self._reads.append((item.index, item.future))
        else:
            self.proposals.fail_terms_up_to(item.term, item.error)
        if self._reads:
            self._serve_reads()

    def _apply(self, batch: Committed) -> bool:
        """Apply the batch; True when its last entry was applied here (not skipped)."""
        sm, proposals = self.state_machine, self.proposals
        last = False
        for e in batch.entries:
            last = e.index > self.applied
            if not last:  # covered by a snapshot restored since: not again
                continue
            result: object = None
            error: BaseException | None = None
            if e.type is EntryType.CONF_CHANGE:
                outcome = batch.conf_results.get(e.index)
                if isinstance(outcome, BaseException):
                    error = outcome
                else:
                    result = outcome
            elif proposals.is_conf(e.index):  # the core replaced our change by an empty entry
                error = MembershipChangeInProgress()
            elif e.data:
                try:
                    result = sm.apply(e.index, e.data)
                except Exception as exc:  # a command the state machine rejects
                    error = exc
            self.applied = e.index
            if e.index in proposals:
                at = proposals.resolve(e.index, e.term, result, error, self._lost)
                if at is not None:
                    self.metrics.committed(time.monotonic() - at)
        return last

    def _serve_reads(self) -> None:
        still = []
        for index, fut in self._reads:
            if index <= self.applied:
                if not fut.done():
                    fut.set_result(index)
            else:
                still.append((index, fut))
        self._reads = still

    def _snapshot_due(self) -> bool:
        every = self.snapshot_entries
        return bool(every) and self.applied - self._last_snapshot >= every

    def _snapshot(self, conf_state: ConfState) -> None:
        """Encode the state machine at the applied index and hand it to the Raft loop."""
        spool: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115
        try:
            spool.write(self._header(conf_state))
            sm = self.state_machine
            if isinstance(sm, ChunkedStateMachine):
                for piece in sm.snapshot_chunks():
                    spool.write(piece)
            else:
                spool.write(sm.snapshot())
        except BaseException:
            spool.close()
            raise
        self._last_snapshot = self.applied
        made = MadeSnapshot(self.applied, conf_state, spool)
        if self._staging is not None:
            try:
                made.staged = self._staging.stage_snapshot(made.pieces())
                made.discard = self._staging.discard_staged
            except Exception:  # the Raft loop writes it itself, as without staging
                log.exception("raft applier of node %d: staging a snapshot failed", self.node_id)
        self._on_snapshot(made)
