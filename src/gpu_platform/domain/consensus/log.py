"""The Raft log: stable entries (in `Storage`) followed by unstable ones (not yet persisted).

Theory of operation. `RaftLog` presents one log made of the persisted prefix (read through the
`Storage` protocol) and an `Unstable` suffix: entries (and possibly a snapshot) received or
proposed but not yet written by the driver. `Ready.entries_to_persist` is the unstable suffix;
`advance()` calls `stable_to` once they are on disk. Invariants (`check_invariants`):

    applied <= committed <= last_index  and  first_index - 1 <= committed

`maybe_append` is the follower side of AppendEntries: the consistency check (`match_term` of
the entry preceding the batch), then truncation *only* at the first conflicting entry
(`find_conflict`), never of a committed entry. `find_conflict_by_term` gives the fast back-off
hint: the last index whose term is <= a given term, so a leader skips a whole divergent term
per round trip instead of one entry.
"""

from __future__ import annotations

from gpu_platform.domain.consensus.errors import (
    CompactedError,
    LogInvariantError,
    UnavailableError,
)
from gpu_platform.domain.consensus.storage import NO_LIMIT, Storage, limit_size
from gpu_platform.domain.consensus.types import Entry, Snapshot

__all__ = ["RaftLog", "Unstable"]


class Unstable:
    """Entries and snapshot not yet persisted; `entries[i]` has index `offset + i`."""

    __slots__ = ("entries", "offset", "snapshot")

    def __init__(self, offset: int) -> None:
        self.snapshot: Snapshot | None = None
        self.entries: list[Entry] = []
        self.offset = offset

    def maybe_first_index(self) -> int | None:
        if self.snapshot is not None:
            return self.snapshot.metadata.index + 1
        return None

    def maybe_last_index(self) -> int | None:
        if self.entries:
            return self.offset + len(self.entries) - 1
        if self.snapshot is not None:
            return self.snapshot.metadata.index
        return None

    def maybe_term(self, i: int) -> int | None:
        if i < self.offset:
            snap = self.snapshot
            if snap is not None and snap.metadata.index == i:
                return snap.metadata.term
            return None
        last = self.maybe_last_index()
        if last is None or i > last:
            return None
        return self.entries[i - self.offset].term

    def stable_to(self, i: int, t: int) -> None:
        """Entries up to (i, t) are persisted; ignore if they were replaced meanwhile."""
        gt = self.maybe_term(i)
        if gt is None:
            return
        if gt == t and i >= self.offset:
            del self.entries[: i + 1 - self.offset]
            self.offset = i + 1

    def stable_snap_to(self, i: int) -> None:
        if self.snapshot is not None and self.snapshot.metadata.index == i:
            self.snapshot = None

    def restore(self, snap: Snapshot) -> None:
        self.offset = snap.metadata.index + 1
        self.entries = []
        self.snapshot = snap

    def truncate_and_append(self, ents: list[Entry]) -> None:
        after = ents[0].index
        if after == self.offset + len(self.entries):
            self.entries.extend(ents)
        elif after <= self.offset:
            self.offset = after
            self.entries = list(ents)
        else:
            self.entries = self.entries[: after - self.offset] + ents

    def slice(self, lo: int, hi: int) -> list[Entry]:
        upper = self.offset + len(self.entries)
        if lo > hi or lo < self.offset or hi > upper:
            raise LogInvariantError(
                f"unstable.slice[{lo},{hi}) out of bound [{self.offset},{upper}]"
            )
        return self.entries[lo - self.offset : hi - self.offset]


class RaftLog:
    """Stable + unstable log with the commit and apply cursors."""

    __slots__ = ("applied", "committed", "max_next_ents_size", "storage", "unstable")

    def __init__(self, storage: Storage, max_next_ents_size: int = NO_LIMIT) -> None:
        self.storage = storage
        first = storage.first_index()
        last = storage.last_index()
        self.unstable = Unstable(last + 1)
        self.committed = first - 1
        self.applied = first - 1
        self.max_next_ents_size = max_next_ents_size

    def __repr__(self) -> str:
        return (
            f"RaftLog(committed={self.committed}, applied={self.applied}, "
            f"unstable.offset={self.unstable.offset}, len(unstable)={len(self.unstable.entries)})"
        )

    # --- follower side of AppendEntries
    def maybe_append(
        self, index: int, log_term: int, committed: int, ents: tuple[Entry, ...]
    ) -> int | None:
        """Append `ents` after (index, log_term) if it matches; the new last index, or None."""
        if not self.match_term(index, log_term):
            return None
        last_new = index + len(ents)
        ci = self.find_conflict(ents)
        if ci:
            if ci <= self.committed:
                raise LogInvariantError(
                    f"entry {ci} conflict with committed entry [committed({self.committed})]"
                )
            self.append(list(ents[ci - (index + 1) :]))
        self.commit_to(min(committed, last_new))
        return last_new

    def append(self, ents: list[Entry]) -> int:
        if not ents:
            return self.last_index()
        after = ents[0].index - 1
        if after < self.committed:
            raise LogInvariantError(f"after({after}) is out of range [committed({self.committed})]")
        self.unstable.truncate_and_append(ents)
        return self.last_index()

    def find_conflict(self, ents: tuple[Entry, ...] | list[Entry]) -> int:
        """Index of the first entry whose term differs from ours (or that we lack), else 0."""
        for e in ents:
            if not self.match_term(e.index, e.term):
                return e.index
        return 0

    def find_conflict_by_term(self, index: int, term: int) -> int:
        """The largest index <= `index` whose term is <= `term` (fast back-off hint)."""
        if index > self.last_index():
            return index
        while index > 0:
            try:
                t = self.term(index)
            except (CompactedError, UnavailableError):
                break
            if t <= term:
                break
            index -= 1
        return index

    # --- cursors
    def commit_to(self, to_commit: int) -> None:
        if self.committed < to_commit:
            if self.last_index() < to_commit:
                raise LogInvariantError(
                    f"tocommit({to_commit}) is out of range [lastIndex({self.last_index()})]"
                )
            self.committed = to_commit

    def applied_to(self, i: int) -> None:
        if i == 0:
            return
        if self.committed < i or i < self.applied:
            raise LogInvariantError(
                f"applied({i}) is out of range [prevApplied({self.applied}), "
                f"committed({self.committed})]"
            )
        self.applied = i

    def stable_to(self, i: int, t: int) -> None:
        self.unstable.stable_to(i, t)

    def stable_snap_to(self, i: int) -> None:
        self.unstable.stable_snap_to(i)

    def maybe_commit(self, max_index: int, term: int) -> bool:
        """Commit up to `max_index` only if that entry is of `term` (Raft §5.4.2)."""
        if max_index > self.committed and self._zero_term_on_compacted(max_index) == term:
            self.commit_to(max_index)
            return True
        return False

    def restore(self, snap: Snapshot) -> None:
        self.committed = snap.metadata.index
        self.unstable.restore(snap)

    # --- reads
    def unstable_entries(self) -> list[Entry]:
        return list(self.unstable.entries)

    def next_ents(self) -> list[Entry]:
        """Committed entries not yet applied (limited to max_next_ents_size bytes)."""
        off = max(self.applied + 1, self.first_index())
        if self.committed + 1 > off:
            return self.slice(off, self.committed + 1, self.max_next_ents_size)
        return []

    def has_next_ents(self) -> bool:
        return self.committed + 1 > max(self.applied + 1, self.first_index())

    def has_pending_snapshot(self) -> bool:
        return self.unstable.snapshot is not None and not self.unstable.snapshot.is_empty()

    def snapshot(self) -> Snapshot:
        if self.unstable.snapshot is not None:
            return self.unstable.snapshot
        return self.storage.snapshot()

    def first_index(self) -> int:
        i = self.unstable.maybe_first_index()
        return i if i is not None else self.storage.first_index()

    def last_index(self) -> int:
        i = self.unstable.maybe_last_index()
        return i if i is not None else self.storage.last_index()

    def last_term(self) -> int:
        return self.term(self.last_index())

    def term(self, i: int) -> int:
        """Term of entry `i`; 0 outside [first_index-1, last_index]; raises if compacted."""
        dummy = self.first_index() - 1
        if i < dummy or i > self.last_index():
            return 0
        t = self.unstable.maybe_term(i)
        if t is not None:
            return t
        return self.storage.term(i)

    def _zero_term_on_compacted(self, i: int) -> int:
        try:
            return self.term(i)
        except CompactedError:
            return 0

    def match_term(self, i: int, term: int) -> bool:
        try:
            return self.term(i) == term
        except (CompactedError, UnavailableError):
            return False

    def is_up_to_date(self, last_index: int, term: int) -> bool:
        """Is a log ending at (last_index, term) at least as up-to-date as ours (§5.4.1)?"""
        my_term = self.last_term()
        return term > my_term or (term == my_term and last_index >= self.last_index())

    def entries(self, i: int, max_size: int = NO_LIMIT) -> list[Entry]:
        last = self.last_index()
        if i > last:
            return []
        return self.slice(i, last + 1, max_size)

    def all_entries(self) -> list[Entry]:
        return self.entries(self.first_index())

    def slice(self, lo: int, hi: int, max_size: int = NO_LIMIT) -> list[Entry]:
        """Entries [lo, hi) limited to about max_size bytes; CompactedError below first_index."""
        self._check_bounds(lo, hi)
        if lo == hi:
            return []
        ents: list[Entry] = []
        off = self.unstable.offset
        if lo < off:
            stop = min(hi, off)
            stored = self.storage.entries(lo, stop, max_size)
            if len(stored) < stop - lo:
                return stored  # limited by size
            ents = stored
        if hi > off:
            tail = self.unstable.slice(max(lo, off), hi)
            ents = ents + tail if ents else tail
        return limit_size(ents, max_size)

    def _check_bounds(self, lo: int, hi: int) -> None:
        if lo > hi:
            raise LogInvariantError(f"invalid slice {lo} > {hi}")
        fi = self.first_index()
        if lo < fi:
            raise CompactedError
        if hi > self.last_index() + 1:
            raise LogInvariantError(f"slice[{lo},{hi}) out of bound [{fi},{self.last_index()}]")

    def check_invariants(self) -> None:
        first, last = self.first_index(), self.last_index()
        # applied may lag first_index - 1 between restoring a snapshot and advance()
        assert self.applied <= self.committed <= last, repr(self)
        assert first - 1 <= self.committed, repr(self)
        assert self.unstable.offset <= last + 1, repr(self)
        prev = None
        for e in self.unstable.entries:
            assert prev is None or e.index == prev.index + 1, "unstable entries not contiguous"
            assert prev is None or e.term >= prev.term, "terms decrease along the log"
            prev = e
