"""`HeartbeatKeeper`: a leader's heartbeats keep going while its Raft loop is stuck (issue 21).

Theory of operation. The Raft loop sends the heartbeats the `RawNode` makes, once per tick.
While the loop is inside a slow storage write (an fsync on a shared disk measured 100-250 ms
under load) or handling a long burst of work, no tick happens and no heartbeat leaves: past
the followers' election timeout (500-1000 ms at the defaults) they elect another leader,
although this one is alive and reachable. The keeper remembers to whom and in which term
the leader last sent AppendEntries or heartbeats (`record`, on the Raft loop); a thread of its
own wakes every tick interval and, when the loop has not ticked for `stall_ticks` intervals,
sends each of those followers a heartbeat of that term.

Why this is safe: such a heartbeat is one the leader's core could have sent earlier and the
network delayed, which Raft tolerates: a follower of a newer term ignores it, and it carries
commit index 0 and no read-index context, so it moves no follower's commit index and confirms
no ReadIndex; the leader's core handles the answers when the loop runs again. The keeper
stops as soon as the loop says this node no longer leads (`clear`).

What it costs: it covers a stall of at most `cover_s` (12 ticks, 600 ms, by default). A
leader whose loop hangs longer (a disk that stopped) is given up by its followers that much
later than without the keeper, then failed over as before.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from gpu_platform.domain.consensus import Message, MessageType
from gpu_platform.ports.outbound.raft import RaftTransport
from gpu_platform.ports.outbound.thread_priority import NoThreadPriority, ThreadPriority

__all__ = ["HeartbeatKeeper"]

log = logging.getLogger(__name__)

_LEADER_SENDS = frozenset({MessageType.APP, MessageType.HEARTBEAT})


class HeartbeatKeeper:
    """Repeats the leader's last heartbeats while the Raft loop does not tick (see above)."""

    def __init__(
        self,
        node_id: int,
        transport: RaftTransport,
        tick_s: float,
        cover_s: float,
        stall_ticks: int = 2,
        priority: ThreadPriority | None = None,
    ) -> None:
        self.node_id = node_id
        self.priority = priority or NoThreadPriority()
        self.transport = transport
        self.tick_s = tick_s
        self.cover_s = cover_s
        self.stall_s = tick_s * stall_ticks
        self.repeated = 0  # heartbeat batches sent by the keeper (not the loop)
        self._beats: tuple[Message, ...] = ()
        self._last_tick = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def ticked(self) -> None:
        """The Raft loop ticked (on the loop)."""
        self._last_tick = time.monotonic()

    def record(self, messages: Sequence[Message]) -> None:
        """The leader's messages just handed to the transport (on the loop)."""
        to = {(m.to, m.term) for m in messages if m.type in _LEADER_SENDS}
        if not to:
            return
        old = {(m.to, m.term) for m in self._beats}
        if not to <= old:
            me = self.node_id
            beats = {(t, term): Message(MessageType.HEARTBEAT, t, me, term) for t, term in old}
            beats.update({(t, term): Message(MessageType.HEARTBEAT, t, me, term) for t, term in to})
            top = max(term for _, term in beats)  # a newer term's followers only
            self._beats = tuple(m for m in beats.values() if m.term == top)

    def clear(self) -> None:
        """This node no longer leads (on the loop): repeat nothing."""
        self._beats = ()

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name=f"raft-beat-{self.node_id}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        self.priority.raise_current(f"raft-beat-{self.node_id}")
        covered = 0.0  # the last tick of the stall being covered (logged once per stall)
        while not self._stop.wait(self.tick_s):
            beats, last = self._beats, self._last_tick
            stalled = time.monotonic() - last
            if beats and self.stall_s < stalled < self.cover_s:
                self.transport.send(beats)
                self.repeated += 1
                if covered != last:
                    covered = last
                    log.info("raft node %d: loop stalled, heartbeats sent for it", self.node_id)
