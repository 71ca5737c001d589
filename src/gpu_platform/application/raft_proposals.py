"""Group commit for the Raft driver: proposals queued by every caller, appended together.

Theory of operation. Client threads never touch the `RawNode`: `RaftNode.propose` puts
(data, future) on the Raft loop's inbox. The loop drains the inbox and adds each proposal to
the current `ProposalBatch`; once the inbox is empty (or `max_inbox_batch` items were taken)
the batch is appended with one `RawNode.propose_many` call — one log append, one `Ready`, one
storage write and one fsync, however many clients proposed. If the batch cannot be appended
(this node is not the leader, or it is transferring leadership) every future in it fails with
the same error.

An appended batch of n proposals takes the n indexes ending at the new last index, in the
order the proposals were queued (`ProposalBatch.indexes`). `PendingProposals` remembers, per
index, the term it was proposed in, its future and when it was proposed: when the entry at that
index is applied *with that term* the future gets the state machine's result; any other entry
there (a new leader overwrote it) or a lost leadership fails it — the outcome is then unknown.

`PendingProposals` is shared by two threads: the Raft loop adds (and fails on a lost batch),
the applier (`raft_applier`) resolves. Its own short lock guards the table only; futures are
settled outside it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

__all__ = ["PendingProposals", "ProposalBatch", "fail_future"]


def fail_future(fut: Future[Any], err: BaseException) -> None:
    """Fail `fut` with `err` unless it already has an outcome."""
    if not fut.done():
        fut.set_exception(err)


@dataclass(slots=True)
class ProposalBatch:
    """Proposals taken from the inbox since the last append, in arrival order."""

    payloads: list[bytes] = field(default_factory=list)
    futures: list[Future[Any]] = field(default_factory=list)
    queued_at: list[float] = field(default_factory=list)  # monotonic seconds

    def add(self, data: bytes, fut: Future[Any], now: float) -> None:
        self.payloads.append(data)
        self.futures.append(fut)
        self.queued_at.append(now)

    def __len__(self) -> int:
        return len(self.payloads)

    def indexes(self, last_index: int) -> range:
        """The log indexes of this batch once appended so that `last_index` is its last."""
        return range(last_index - len(self.payloads) + 1, last_index + 1)

    def fail(self, err: BaseException) -> None:
        """The batch could not be appended: every future fails with `err`."""
        for fut in self.futures:
            fail_future(fut, err)
        self.clear()

    def clear(self) -> None:
        self.payloads = []
        self.futures = []
        self.queued_at = []


@dataclass(frozen=True, slots=True)
class _Pending:
    term: int
    future: Future[Any]
    proposed_at: float
    conf: bool


class PendingProposals:
    """Proposals in the log, by index, until their entry is applied (see module docstring).
    Thread-safe."""

    def __init__(self) -> None:
        self._by_index: dict[int, _Pending] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._by_index)

    def __contains__(self, index: object) -> bool:
        return index in self._by_index

    def add(
        self, index: int, term: int, fut: Future[Any], proposed_at: float, conf: bool = False
    ) -> None:
        with self._lock:
            self._by_index[index] = _Pending(term, fut, proposed_at, conf)

    def add_batch(self, batch: ProposalBatch, last_index: int, term: int) -> None:
        """Remember an appended `batch` whose last entry is at `last_index` (then clear it)."""
        with self._lock:
            for index, fut, at in zip(
                batch.indexes(last_index), batch.futures, batch.queued_at, strict=True
            ):
                self._by_index[index] = _Pending(term, fut, at, False)
        batch.clear()

    def is_conf(self, index: int) -> bool:
        p = self._by_index.get(index)
        return p is not None and p.conf

    def resolve(
        self,
        index: int,
        term: int,
        result: object,
        error: BaseException | None,
        lost: BaseException | Callable[[], BaseException],
    ) -> float | None:
        """The entry at `index` of `term` was applied with `result` (or `error`): settle the
        proposal there. Returns when it was proposed if it was ours, else None; a proposal
        of another term fails with `lost` (or what `lost()` makes: built only then)."""
        with self._lock:
            p = self._by_index.pop(index, None)
        if p is None:
            return None
        if p.term != term:
            fail_future(p.future, lost() if callable(lost) else lost)
            return None
        if error is not None:
            fail_future(p.future, error)
        elif not p.future.done():
            p.future.set_result(result)
        return p.proposed_at

    def fail_all(self, err: BaseException) -> None:
        with self._lock:
            gone = list(self._by_index.values())
            self._by_index.clear()
        for p in gone:
            fail_future(p.future, err)

    def fail_up_to(self, index: int, err: BaseException) -> None:
        """Fail the proposals at or below `index` (a snapshot replaced that part of the log)."""
        with self._lock:
            gone = [self._by_index.pop(i) for i in [i for i in self._by_index if i <= index]]
        for p in gone:
            fail_future(p.future, err)

    def fail_terms_up_to(self, term: int, err: BaseException) -> None:
        """Fail the proposals made in `term` or before (that leadership was lost)."""
        with self._lock:
            old = [i for i, p in self._by_index.items() if p.term <= term]
            gone = [self._by_index.pop(i) for i in old]
        for p in gone:
            fail_future(p.future, err)
