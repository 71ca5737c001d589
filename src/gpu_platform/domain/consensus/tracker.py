"""The leader's view of its followers: per-peer progress, flow control and the configuration.

Theory of operation. For every peer the leader keeps a `Progress`: `match` (highest index known
to be replicated there) and `next` (next index to send). A progress is in one of three states,
changed only through `PROGRESS_TRANSITIONS`:

* PROBE: the leader does not know where the follower's log ends. It sends at most one append
  per heartbeat interval (`probe_sent` pauses it) and walks `next` back on rejections.
* REPLICATE: the follower is known to match; appends stream optimistically (`next` advances as
  soon as an append is sent), bounded by `Inflights` (at most `max_inflight` unacknowledged
  appends): this is the flow control.
* SNAPSHOT: the follower needs a snapshot; nothing else is sent until it is acknowledged or
  reported failed.

`ProgressTracker` owns the configuration (`TrackerConfig`: a joint voter config, learners and
learners_next) and computes the committed index and vote results through `quorum`.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from gpu_platform.domain.consensus.quorum import JointConfig, VoteResult
from gpu_platform.domain.consensus.types import ConfState
from gpu_platform.domain.errors import IllegalTransition

__all__ = [
    "PROGRESS_TRANSITIONS",
    "Inflights",
    "Progress",
    "ProgressState",
    "ProgressTracker",
    "TrackerConfig",
]


class ProgressState(enum.Enum):
    PROBE = "StateProbe"
    REPLICATE = "StateReplicate"
    SNAPSHOT = "StateSnapshot"


_P, _R, _S = ProgressState.PROBE, ProgressState.REPLICATE, ProgressState.SNAPSHOT

PROGRESS_TRANSITIONS: dict[tuple[ProgressState, ProgressState], str] = {
    (_P, _P): "a probe was rejected or the peer became unreachable: keep probing",
    (_P, _R): "an append was acknowledged: the follower's log end is known",
    (_P, _S): "the entries the follower needs were compacted away",
    (_R, _P): "an append was rejected or the peer became unreachable",
    (_R, _S): "the entries the follower needs were compacted away",
    (_S, _P): "the snapshot was applied, or failed: find the log end again",
}
"""Every legal (from, to) progress-state pair, with why it happens; other pairs raise."""


class Inflights:
    """Indexes of the last entry of each unacknowledged append, oldest first (bounded)."""

    __slots__ = ("_q", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self._q: deque[int] = deque()

    def add(self, index: int) -> None:
        if self.full():
            raise OverflowError("cannot add into a full inflights")
        self._q.append(index)

    def free_le(self, to: int) -> None:
        """Release every inflight append whose last index is <= `to`."""
        q = self._q
        while q and q[0] <= to:
            q.popleft()

    def free_first_one(self) -> None:
        if self._q:
            self._q.popleft()

    def full(self) -> bool:
        return len(self._q) >= self.size

    def count(self) -> int:
        return len(self._q)

    def reset(self) -> None:
        self._q.clear()

    def copy(self) -> Inflights:
        new = Inflights(self.size)
        new._q = deque(self._q)
        return new


class Progress:
    """Replication progress of one peer, as seen by the leader (mutable, leader-owned)."""

    __slots__ = (
        "appended",
        "inflights",
        "is_learner",
        "match",
        "next",
        "pending_snapshot",
        "probe_sent",
        "recent_active",
        "sent_commit",
        "state",
    )

    def __init__(
        self, next_index: int, max_inflight: int, *, is_learner: bool = False, match: int = 0
    ) -> None:
        self.match = match
        self.next = next_index
        self.state = ProgressState.PROBE
        self.pending_snapshot = 0
        self.recent_active = True
        self.probe_sent = False
        self.appended = False  # an append went out since the last periodic heartbeat round
        self.sent_commit = 0  # the commit index the last append or heartbeat carried
        self.inflights = Inflights(max_inflight)
        self.is_learner = is_learner

    def copy(self) -> Progress:
        new = Progress(self.next, self.inflights.size, is_learner=self.is_learner)
        new.match, new.state = self.match, self.state
        new.pending_snapshot, new.recent_active = self.pending_snapshot, self.recent_active
        new.probe_sent, new.inflights = self.probe_sent, self.inflights.copy()
        new.appended, new.sent_commit = self.appended, self.sent_commit
        return new

    def _transition(self, to: ProgressState) -> None:
        if (self.state, to) not in PROGRESS_TRANSITIONS:
            raise IllegalTransition("progress", self.state, to)
        self.state = to
        self.probe_sent = False
        self.pending_snapshot = 0
        self.inflights.reset()

    def become_probe(self) -> None:
        if self.state is _S:
            pending = self.pending_snapshot
            self._transition(_P)
            self.next = max(self.match + 1, pending + 1)
        else:
            self._transition(_P)
            self.next = self.match + 1

    def become_replicate(self) -> None:
        self._transition(_R)
        self.next = self.match + 1

    def become_snapshot(self, snapshot_index: int) -> None:
        self._transition(_S)
        self.pending_snapshot = snapshot_index

    def maybe_update(self, n: int) -> bool:
        """Record an acknowledgement of index `n`; False when it was stale."""
        updated = False
        if self.match < n:
            self.match = n
            updated = True
            self.probe_sent = False
        self.next = max(self.next, n + 1)
        return updated

    def optimistic_update(self, n: int) -> None:
        self.next = n + 1

    def maybe_decr_to(self, rejected: int, match_hint: int) -> bool:
        """Move `next` back after a rejection of the append at `rejected`; False if stale."""
        if self.state is _R:
            if rejected <= self.match:
                return False
            self.next = self.match + 1
            return True
        if self.next - 1 != rejected:
            return False
        self.next = max(min(rejected, match_hint + 1), 1)
        self.probe_sent = False
        return True

    def is_paused(self) -> bool:
        if self.state is _P:
            return self.probe_sent
        if self.state is _R:
            return self.inflights.full()
        return True

    def __str__(self) -> str:
        text = f"{self.state.value} match={self.match} next={self.next}"
        if self.is_learner:
            text += " learner"
        if self.is_paused():
            text += " paused"
        if self.pending_snapshot > 0:
            text += f" pendingSnap={self.pending_snapshot}"
        if not self.recent_active:
            text += " inactive"
        if n := self.inflights.count():
            text += f" inflight={n}" + ("[full]" if self.inflights.full() else "")
        return text


@dataclass(frozen=True, slots=True)
class TrackerConfig:
    """The active configuration: voters (possibly joint), learners, learners_next."""

    voters: JointConfig = field(default_factory=JointConfig)
    learners: frozenset[int] = frozenset()
    learners_next: frozenset[int] = frozenset()
    auto_leave: bool = False

    def __str__(self) -> str:
        text = f"voters={self.voters}"
        if self.learners:
            text += " learners=(" + " ".join(str(i) for i in sorted(self.learners)) + ")"
        if self.learners_next:
            text += " learners_next=(" + " ".join(str(i) for i in sorted(self.learners_next)) + ")"
        if self.auto_leave:
            text += " autoleave"
        return text

    def conf_state(self) -> ConfState:
        return ConfState(
            voters=tuple(sorted(self.voters.incoming)),
            learners=tuple(sorted(self.learners)),
            voters_outgoing=tuple(sorted(self.voters.outgoing)),
            learners_next=tuple(sorted(self.learners_next)),
            auto_leave=self.auto_leave,
        )


def progress_map_str(progress: dict[int, Progress]) -> str:
    return "".join(f"{i}: {progress[i]}\n" for i in sorted(progress))


class ProgressTracker:
    """Configuration + progress of every member + the votes of the current election."""

    __slots__ = ("config", "max_inflight", "progress", "votes")

    def __init__(self, max_inflight: int) -> None:
        self.max_inflight = max_inflight
        self.config = TrackerConfig()
        self.progress: dict[int, Progress] = {}
        self.votes: dict[int, bool] = {}

    def conf_state(self) -> ConfState:
        return self.config.conf_state()

    def is_singleton(self) -> bool:
        v = self.config.voters
        return len(v.incoming) == 1 and not v.outgoing

    def committed(self) -> int:
        """The largest index replicated on a quorum (joint-aware)."""
        acked = {i: pr.match for i, pr in self.progress.items()}
        return self.config.voters.committed_index(acked)

    def visit(self) -> Iterator[tuple[int, Progress]]:
        """(id, progress) in ascending id order: deterministic message order."""
        for i in sorted(self.progress):
            yield i, self.progress[i]

    def quorum_active(self) -> bool:
        """True when a quorum of voters was heard from recently (check-quorum)."""
        votes = {i: pr.recent_active for i, pr in self.progress.items() if not pr.is_learner}
        return self.config.voters.vote_result(votes) is VoteResult.WON

    def voter_nodes(self) -> list[int]:
        return sorted(self.config.voters.ids())

    def learner_nodes(self) -> list[int]:
        return sorted(self.config.learners)

    def reset_votes(self) -> None:
        self.votes = {}

    def record_vote(self, node: int, granted: bool) -> None:
        self.votes.setdefault(node, granted)

    def tally_votes(self) -> tuple[int, int, VoteResult]:
        granted = rejected = 0
        for i, pr in self.progress.items():
            if pr.is_learner or i not in self.votes:
                continue
            if self.votes[i]:
                granted += 1
            else:
                rejected += 1
        return granted, rejected, self.config.voters.vote_result(self.votes)

    def check_invariants(self) -> None:
        """Every member has a progress; learners are never voters; learners_next is outgoing."""
        cfg = self.config
        members = cfg.voters.ids() | cfg.learners | cfg.learners_next
        missing = members - self.progress.keys()
        assert not missing, f"no progress for {sorted(missing)}"
        assert not (cfg.learners & cfg.voters.ids()), "a learner is also a voter"
        assert cfg.learners_next <= cfg.voters.outgoing, "learners_next outside outgoing"
        for i in cfg.learners:
            assert self.progress[i].is_learner, f"{i} is a learner but not marked so"
        if not cfg.voters.is_joint():
            assert not cfg.learners_next and not cfg.auto_leave, "joint leftovers"
