"""`QuorumContact`: has a quorum of voters been in this leader's term within the last W seconds?

Theory of operation. The leader renews each agent's lease (docs/replication.md, "Timing
budget"): an agent cut off from the cluster with its leader — or a leader cut off with its
agents — must have its tasks fenced before a *newer* leader re-places them. A newer leader
re-places a silent node's work `node_down_after_seconds` after it took the lead, so the
budget must cover how long the old leader can still renew leases once a newer one exists.

Left to Raft, that is until check-quorum makes the old leader step down: up to two election
timeouts after it last heard a quorum (the check runs once per timeout and needs a silent
period whole), and a newer leader may already exist by then (a follower whose link to the
leader closed campaigns at once). That ties the fence budget to the tick. Instead the leader
renews a lease only while this says a quorum of voters sent it a message *of its term*
within the last `window_s` seconds (`fresh`):

    renewal at t  =>  some voter F of every quorum sent a term-T message at >= t - W - d
                  =>  F had not voted in any later term then (its term only grows)
                  =>  any newer leader was elected, and took the lead, after t - W - d.

(d: the message's flight and the transport's hand-off, before the stamp.) A renewal lasts
`agent_lease_seconds` from the agent's sending, which came before t; so every lease the old
leader grants ends by (the newer leader's start) + W + d + `agent_lease_seconds`, whatever
check-quorum, pre-vote or the link-closing rule do. The budget's election term is W, one
election timeout, not two.

Only messages that carry their sender's own term count: append and heartbeat answers, vote
answers. A pre-vote carries a term its sender has not reached. The leader counts itself.
Quorums are majorities of the voters `status()` shows (membership changes one voter at a
time, so any two such majorities meet).

Thread-safety: `heard` runs on the transport's threads (one dict store per message),
`fresh` on any thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from gpu_platform.domain.consensus import Message, MessageType

__all__ = ["QuorumContact"]

#: Messages whose term is their sender's current term.
_OWN_TERM = frozenset({MessageType.APP_RESP, MessageType.HEARTBEAT_RESP, MessageType.VOTE_RESP})


class QuorumContact:
    """When each peer last sent this node a message of a given term (monotonic seconds)."""

    def __init__(self, node_id: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.node_id = node_id
        self._clock = clock
        self._heard: dict[int, tuple[int, float]] = {}  # peer -> (its term, when)

    def heard(self, m: Message) -> None:
        """Note `m`, just received from the network (before any queue)."""
        if m.type in _OWN_TERM:
            self._heard[m.from_] = (m.term, self._clock())

    def fresh(self, term: int, voters: Iterable[int], window_s: float) -> bool:
        """True when a majority of `voters` (this node counts) sent a message of `term`
        within the last `window_s` seconds."""
        members = tuple(voters)
        if not members:
            return False
        now = self._clock()
        recent = 0
        for v in members:
            if v == self.node_id:
                recent += 1
                continue
            seen = self._heard.get(v)
            if seen is not None and seen[0] == term and now - seen[1] <= window_s:
                recent += 1
        return recent > len(members) // 2
