"""Safety history of a simulated Raft run, and the checks of the Raft paper's Figure 3.

`SafetyHistory` records what a run did — the leader of every term, the term of every committed
index, the entry applied at every index and the state digest after it — and judges the live
nodes against that history:

* election safety: at most one leader can be elected in a given term;
* leader append-only: a leader never overwrites or deletes entries in its log;
* log matching: if two logs contain an entry with the same index and term, the logs are
  identical in all entries up through that index;
* leader completeness: an entry committed in a term is present in the logs of the leaders of
  all higher terms (the term an entry was committed in is the committing leader's term, not
  the entry's own term: a stale leader may lack an old-term entry committed after it lost);
* state-machine safety: no two servers apply different entries at one index.

A broken property raises `SafetyViolation`. The applied state is a SHA-256 chain over applied
entries (`fold`), so comparing states is comparing 32 bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from gpu_platform.domain.consensus import CompactedError, Entry, Raft, Role

__all__ = ["GENESIS", "SafetyHistory", "SafetyViolation", "fold"]

GENESIS = b"\x00" * 32
"""The digest of the empty state (the bootstrap snapshot's)."""


class SafetyViolation(AssertionError):
    """A Raft safety property was broken in a simulated run."""


def fold(digest: bytes, e: Entry) -> bytes:
    """The state digest after applying `e` to a state of digest `digest`."""
    return hashlib.sha256(digest + e.term.to_bytes(8, "big") + e.data).digest()


class SafetyHistory:
    """What happened so far in one run, with the checks that judge the present against it."""

    def __init__(self) -> None:
        self.leaders: dict[int, int] = {}  # term -> the node that led it
        self.leader_tails: dict[tuple[int, int], tuple[int, int]] = {}  # (id, term) -> tail
        self.committed_terms: dict[int, int] = {}  # index -> term of the committed entry
        # index -> the term in which it was committed: the committing leader's term (the
        # leader records a commit before anyone else can learn of it)
        self.committed_in: dict[int, int] = {}
        self.digests: dict[int, bytes] = {1: GENESIS}  # index -> state digest after it
        self.entry_at: dict[int, Entry] = {}  # index -> the entry applied there

    # ------------------------------------------------------------------ recording
    def record_apply(self, node_id: int, applied: int, digest: bytes, e: Entry) -> bytes:
        """Node `node_id` at (applied, digest) applies `e`; its new digest."""
        if e.index != applied + 1:
            raise SafetyViolation(f"node {node_id} applied {e.index} after {applied}")
        seen = self.entry_at.setdefault(e.index, e)
        if seen != e:
            raise SafetyViolation(
                f"state machine safety: index {e.index} applied as {seen} and as {e} "
                f"(node {node_id})"
            )
        new = fold(digest, e)
        if self.digests.setdefault(e.index, new) != new:
            raise SafetyViolation(f"node {node_id} state diverged at index {e.index}")
        return new

    def record_install(self, node_id: int, applied: int, digest: bytes) -> None:
        want = self.digests.get(applied)
        if want is not None and want != digest:
            raise SafetyViolation(f"node {node_id} installed a snapshot diverging at {applied}")

    def record_commit(self, raft: Raft, seen_commit: int) -> int:
        """Record the terms of indexes newly committed at `raft`; the new commit mark."""
        log = raft.raft_log
        if log.committed <= seen_commit:
            return seen_commit
        for i in range(max(seen_commit + 1, log.first_index()), log.committed + 1):
            term = log.term(i)
            known = self.committed_terms.setdefault(i, term)
            if known != term:
                raise SafetyViolation(f"index {i} committed with terms {known} and {term}")
            self.committed_in.setdefault(i, raft.term)
        return log.committed

    # ------------------------------------------------------------------ checks
    def check_election_safety(self, rafts: Iterable[Raft]) -> None:
        for r in rafts:
            if r.state is Role.LEADER:
                other = self.leaders.setdefault(r.term, r.id)
                if other != r.id:
                    raise SafetyViolation(f"election safety: {other} and {r.id} lead term {r.term}")

    def check_leader_append_only(self, rafts: Iterable[Raft]) -> None:
        for r in rafts:
            if r.state is not Role.LEADER:
                continue
            log, key = r.raft_log, (r.id, r.term)
            seen = self.leader_tails.get(key)
            if seen is not None:
                index, term = seen
                if index >= log.first_index() - 1 and (
                    index > log.last_index() or log.term(index) != term
                ):
                    raise SafetyViolation(f"leader append-only: {r.id} lost {index}@{term}")
            self.leader_tails[key] = (log.last_index(), log.last_term())

    def check_leader_completeness(self, rafts: Iterable[Raft]) -> None:
        for r in rafts:
            if r.state is not Role.LEADER:
                continue
            log, term = r.raft_log, r.term
            first, last = log.first_index(), log.last_index()
            for i, t in self.committed_terms.items():
                # Only leaders of terms *after* the commit must hold the entry: a stale
                # leader cut off before the commit legitimately lacks it.
                if self.committed_in[i] >= term or i < first:
                    continue
                if i > last or log.term(i) != t:
                    raise SafetyViolation(
                        f"leader completeness: leader {r.id} of term {term} lacks committed {i}@{t}"
                    )

    def check_state_machine_safety(self, states: Iterable[tuple[int, int, bytes]]) -> None:
        """`states`: (node id, applied index, digest) of every live node."""
        for node_id, applied, digest in states:
            want = self.digests.get(applied)
            if want is not None and want != digest:
                raise SafetyViolation(f"state machine safety: node {node_id} differs at {applied}")

    @staticmethod
    def check_log_matching(rafts: Iterable[Raft]) -> None:
        logs: dict[int, dict[int, Entry]] = {}
        for r in rafts:
            try:
                logs[r.id] = {e.index: e for e in r.raft_log.all_entries()}
            except CompactedError:
                continue
        ids = sorted(logs)
        for pos, a in enumerate(ids):
            for b in ids[pos + 1 :]:
                la, lb = logs[a], logs[b]
                common = sorted(set(la) & set(lb), reverse=True)
                agree = next((i for i in common if la[i].term == lb[i].term), None)
                if agree is None:
                    continue
                for i in common:
                    if i <= agree and la[i] != lb[i]:
                        raise SafetyViolation(
                            f"log matching: {a} and {b} agree at {agree} but differ at {i}"
                        )
