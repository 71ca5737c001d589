"""`StallWatch`: a Raft node that was itself stalled hears what arrived meanwhile before it
blames the silence on the leader (issue 21: elections under load).

Theory of operation. The Raft loop ticks every `tick_interval`; a follower that counts an
election timeout of ticks without a message from its leader campaigns (pre-vote first). On a
shared machine the whole server process is sometimes not run for 100-650 ms (measured: the
loop's ticks late by that much, the heartbeat keeper's thread silent too). When it runs
again its loop may tick before the transport thread, starved just as long, has handed over
the leader's heartbeats waiting in the socket: the node then counts as the leader's silence
what was its own. Each campaign costs the cluster an election, and every agent dials the new
leader again.

The watch remembers when this node last stalled (a tick later than `stall_s`) and when it
last heard from its leader. When the next tick of a follower (or candidate) would start an
election (the core's `tick_ends_period`) and the node stalled since it last heard from its
leader, that tick is deferred by one tick interval, once: the loop first takes what the
transport delivers in that interval. A heartbeat among it restarts the period and no
election happens; if none comes, the next tick counts as before. A leader's ticks are never
deferred: they carry the heartbeats its followers wait for (a first version deferred a
stalled leader's quorum check too, and with it a heartbeat, right after a stall).

Why this is safe: Raft's safety never depends on time (votes, terms and the log decide; reads
use ReadIndex, not leases), so ticking later cannot break it. Liveness: at most one tick in
each election period is deferred, by one interval, so a node that never hears its leader
still campaigns, at most one interval later than before (15 ms at the defaults).
"""

from __future__ import annotations

import logging

__all__ = ["StallWatch"]

log = logging.getLogger(__name__)


class StallWatch:
    """What the Raft loop knows of its own stalls (see above). Used on the loop only."""

    def __init__(self, node_id: int, tick_s: float, stall_s: float) -> None:
        self.node_id = node_id
        self.tick_s = tick_s
        self.stall_s = stall_s
        self.deferred = 0  # ticks deferred so far (a counter for tests and logs)
        self._stalled_at = -1.0  # when the last stall ended (monotonic seconds)
        self._longest = 0.0  # the longest stall since the leader was last heard
        self._heard_at = 0.0  # when the leader was last heard (or the period last ended)
        self._deferring = False

    def heard(self, now: float) -> None:
        """A message from the leader (or a new role) at `now`."""
        self._heard_at = now
        self._longest = 0.0
        self._deferring = False

    def ticked_late(self, now: float, late_s: float) -> None:
        """The loop's tick came `late_s` after it was due."""
        if late_s > self.stall_s:
            self._stalled_at = now
            self._longest = max(self._longest, late_s)

    def defer(self, now: float, ends_period: bool) -> bool:
        """Should the tick due at `now` wait one interval? (`ends_period`: the core's
        `tick_ends_period()`). True at most once per election period."""
        if not ends_period:
            return False
        if self._deferring:  # deferred once already: this one counts
            self._deferring = False
            return False
        if self._stalled_at < self._heard_at:
            return False
        self._deferring = True
        self.deferred += 1
        log.info(
            "raft node %d: stalled up to %.0f ms since its leader was last heard %.0f ms ago: "
            "one more tick to hear what arrived before an election",
            self.node_id,
            self._longest * 1000,
            (now - self._heard_at) * 1000,
        )
        return True

    def describe(self, now: float) -> str:
        """For the log line of a campaign."""
        return (
            f"leader last heard {(now - self._heard_at) * 1000:.0f} ms ago, "
            f"longest stall since {self._longest * 1000:.0f} ms"
        )
