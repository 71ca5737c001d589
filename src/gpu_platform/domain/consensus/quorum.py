"""Quorum arithmetic: committed index and vote result for majority and joint configurations.

Theory of operation. A *majority configuration* is a set of voter ids. An index is committed
when a majority has acknowledged it: sort the acknowledged indexes descending, the answer is the
one at position n//2 (voters that have not reported count as 0). A vote is won with n//2+1 yes
votes, lost when even all missing votes could not reach that, pending otherwise.

A *joint configuration* (incoming, outgoing) is used during joint consensus: a decision needs
both majorities, so the joint committed index is the minimum of the two and a joint vote is won
only if both halves win. The empty majority "commits everything" (`UNBOUNDED`) and "wins every
vote", so a joint config whose outgoing half is empty behaves as its incoming half.

These functions are exactly what etcd-raft's quorum package computes; the datadriven vectors
shipped with etcd are replayed against them in `tests/system/test_etcd_raft_vectors.py`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "UNBOUNDED",
    "JointConfig",
    "VoteResult",
    "describe",
    "joint_committed_index",
    "joint_vote_result",
    "majority_committed_index",
    "majority_vote_result",
]

UNBOUNDED = 2**64 - 1
"""The committed index of the empty majority (etcd prints it as the infinity sign)."""


class VoteResult(enum.Enum):
    PENDING = "VotePending"
    LOST = "VoteLost"
    WON = "VoteWon"


def majority_committed_index(voters: Iterable[int], acked: Mapping[int, int]) -> int:
    """Largest index acknowledged by a majority of `voters`; UNBOUNDED for no voters."""
    idxs = [acked.get(v, 0) for v in voters]
    n = len(idxs)
    if n == 0:
        return UNBOUNDED
    idxs.sort(reverse=True)
    return idxs[n // 2]


def majority_vote_result(voters: Iterable[int], votes: Mapping[int, bool]) -> VoteResult:
    """WON with a majority of yes, LOST when a majority can no longer be reached."""
    yes = missing = n = 0
    for v in voters:
        n += 1
        got = votes.get(v)
        if got is None:
            missing += 1
        elif got:
            yes += 1
    if n == 0:
        return VoteResult.WON
    q = n // 2 + 1
    if yes >= q:
        return VoteResult.WON
    if yes + missing >= q:
        return VoteResult.PENDING
    return VoteResult.LOST


@dataclass(frozen=True, slots=True)
class JointConfig:
    """Two majority configurations; `outgoing` is empty outside joint consensus."""

    incoming: frozenset[int] = frozenset()
    outgoing: frozenset[int] = frozenset()

    def ids(self) -> frozenset[int]:
        return self.incoming | self.outgoing

    def is_joint(self) -> bool:
        return bool(self.outgoing)

    def committed_index(self, acked: Mapping[int, int]) -> int:
        return joint_committed_index(self.incoming, self.outgoing, acked)

    def vote_result(self, votes: Mapping[int, bool]) -> VoteResult:
        return joint_vote_result(self.incoming, self.outgoing, votes)

    def __str__(self) -> str:
        text = _ids_str(self.incoming)
        if self.outgoing:
            text += "&&" + _ids_str(self.outgoing)
        return text


def joint_committed_index(
    incoming: Iterable[int], outgoing: Iterable[int], acked: Mapping[int, int]
) -> int:
    return min(majority_committed_index(incoming, acked), majority_committed_index(outgoing, acked))


def joint_vote_result(
    incoming: Iterable[int], outgoing: Iterable[int], votes: Mapping[int, bool]
) -> VoteResult:
    r1 = majority_vote_result(incoming, votes)
    r2 = majority_vote_result(outgoing, votes)
    if r1 is r2:
        return r1
    if VoteResult.LOST in (r1, r2):
        return VoteResult.LOST
    return VoteResult.PENDING


def _ids_str(ids: Iterable[int]) -> str:
    return "(" + " ".join(str(i) for i in sorted(ids)) + ")"


def describe(voters: Iterable[int], acked: Mapping[int, int]) -> str:
    """etcd's MajorityConfig.Describe: one line per voter with a bar showing its rank."""
    ids = sorted(set(voters))
    n = len(ids)
    if n == 0:
        return "<empty majority quorum>"
    info = sorted((acked.get(i, 0), i) for i in ids)
    # As etcd: the bar is the rank among strictly smaller indexes, 0 for a tie with the left.
    bars = {
        vid: pos if pos > 0 and info[pos - 1][0] < idx else 0 for pos, (idx, vid) in enumerate(info)
    }
    lines = [" " * n + "    idx"]
    for vid in ids:
        prefix = (
            "?" + " " * n if vid not in acked else "x" * bars[vid] + ">" + " " * (n - bars[vid])
        )
        lines.append(f"{prefix} {acked.get(vid, 0):5d}    (id={vid})")
    return "\n".join(lines) + "\n"
