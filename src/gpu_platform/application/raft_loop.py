"""The Raft driver's loop: the work done under the loop lock, the only code that touches
the `RawNode`.

`RaftLoop` is a mixin of `RaftNode` (`raft_node`, whose docstring gives the theory of
operation): it drains the inbox (messages, proposals, reads, conf changes, transport reports,
the applier's snapshots, stop), group-commits the proposals taken in one drain, ticks the core
when due (unless `raft_stalls` defers it), handles each `Ready` (`raft_ready`) and publishes
the status; on stop it fails whatever is still pending with `NodeStopped`. That work runs on
the loop's own thread (`_run`) or, for a transport's reader thread that found the loop lock
free, on that thread (`_deliver`, see `raft_inbox`), and so does a sole voter's proposer
(`drive`); if it fails there, the loop's thread ends the node as if it had failed itself.
Split from `raft_node` only for size; it shares `RaftNode`'s attributes and is not used alone.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from concurrent.futures import Future

from gpu_platform.application.raft_applier import MadeSnapshot
from gpu_platform.application.raft_errors import (
    InvalidMembershipChange,
    MembershipChangeInProgress,
    NodeStopped,
)
from gpu_platform.application.raft_inbox import Inbox
from gpu_platform.application.raft_membership import PENDING, refusal
from gpu_platform.application.raft_proposals import PendingProposals
from gpu_platform.application.raft_proposals import fail_future as _fail
from gpu_platform.application.raft_ready import ReadyHandling
from gpu_platform.domain.consensus import (
    NONE,
    ConfChange,
    ConfState,
    Message,
    ProposalDroppedError,
    Role,
)
from gpu_platform.ports.outbound.thread_priority import ThreadPriority

__all__ = ["RaftLoop"]

# The driver's lines keep `raft_node`'s logger name (this module was split from it).
log = logging.getLogger("gpu_platform.application.raft_node")

# An inbox item: (kind, argument, waiter or extra).
_Item = tuple[str, object, object]


class RaftLoop(ReadyHandling):
    """The Raft loop's thread body, its tick, its shutdown and the inbox's handlers."""

    _inbox: Inbox[_Item]
    _crashed: BaseException | None  # the loop's work failed on a transport thread
    _next_tick: float  # monotonic seconds
    priority: ThreadPriority
    _proposals: PendingProposals  # appended, awaiting apply
    _read_seq: int
    _stopped: threading.Event

    def _run(self) -> None:
        self.priority.raise_current(f"raft-{self.config.id}")
        inbox = self._inbox
        try:
            while True:
                inbox.wait(max(0.0, self._next_tick - time.monotonic()))
                with inbox.lock:
                    if self._crashed is not None:
                        raise RuntimeError("the Raft loop's work failed on another thread")
                    if not self._work():
                        return
        except BaseException:
            log.exception("raft loop of node %d crashed", self.config.id)
            raise
        finally:
            with inbox.lock:
                self._shutdown()

    def _work(self) -> bool:
        """One round of the loop's work, on whichever thread holds the loop lock: the inbox,
        the tick when due, the `Ready`s, the status; False once stopped."""
        if not self._running or not self._drain():
            return False
        now = time.monotonic()
        if now >= self._next_tick:
            if now - self._next_tick > self._slow_s:  # no heartbeat went out meanwhile
                log.warning(
                    "raft node %d: tick %.0f ms late (loop busy or starved of CPU)",
                    self.config.id,
                    (now - self._next_tick) * 1000,
                )
            self._next_tick = self._tick(now, self._next_tick)
        self._process_ready()
        self._status = self._snapshot_status()
        return True

    def _drain(self) -> bool:
        """Handle what is queued (up to `max_inbox_batch` items) and append the proposals
        taken as one batch; False once stop was taken (under the loop lock)."""
        inbox = self._inbox
        for _ in range(self.config.max_inbox_batch + 1):
            item = inbox.take()
            if item is None:
                break
            if not self._handle(item):
                self._running = False  # also when taken by `_deliver`: the loop then ends
                inbox.wake()
                return False
        if self._batch:
            self._append_batch()
        return True

    def _deliver(self, message: Message) -> None:
        """A received message from a transport thread that may block (`Inbox.offer`): run
        the loop's work on this thread when the loop lock is free, else queue it."""
        inbox = self._inbox
        if not inbox.offer(("msg", message, None)):
            return
        try:
            if self._crashed is None:
                self._work()
        except BaseException as exc:  # the loop's thread ends the node, as if it had failed
            log.exception(
                "raft node %d: the loop's work failed on a transport thread", self.config.id
            )
            self._crashed = exc
            inbox.wake()
        finally:
            inbox.lock.release()

    def drive(self) -> None:
        """For a proposer about to wait on its futures, holding no lock: the sole voter runs
        the loop's work (append, write and fsync, hand over) on this thread when the loop
        lock is free, then applies on it when the applier is idle (`Applier.help`): a lone
        proposal crosses no thread. Otherwise, or with peers (whose heartbeats the
        raised-priority loop thread keeps), the loop's thread is woken as `propose` does."""
        inbox, cs = self._inbox, self._conf_state
        sole = cs.voters == (self.config.id,) and not cs.learners
        if not (sole and self._running and inbox.lock.acquire(blocking=False)):
            inbox.wake()
            return
        self._applier.driver = threading.get_ident()
        try:
            if self._crashed is None:
                self._work()
        except BaseException as exc:  # the loop's thread ends the node, as if it had failed
            log.exception("raft node %d: the loop's work failed on a proposer", self.config.id)
            self._crashed = exc
            inbox.wake()
        finally:
            self._applier.driver = None
            inbox.lock.release()
        self._applier.help()

    def _tick(self, now: float, due: float) -> float:
        """Tick the core (unless `raft_stalls` defers it); returns when the next tick is due."""
        interval, rn, stalls = self.config.tick_interval, self.rawnode, self._stalls
        stalls.ticked_late(now, now - due)
        # Never a leader's tick: it sends the heartbeats its followers wait for.
        follows = rn.raft.state is not Role.LEADER
        if follows and self.config.stall_defer and stalls.defer(now, rn.tick_ends_period()):
            return now + interval
        rn.tick()
        self._keeper.ticked()
        return max(due + interval, now)

    def _shutdown(self) -> None:
        self._running = False
        try:
            self._save_commit()
        except Exception:  # the storage failed (maybe why we stop): it is volatile state anyway
            log.exception("node %d: could not save the commit index on stop", self.config.id)
        self._keeper.stop()
        self._applier.stop()  # what was committed and handed over is applied first
        self._stopped.set()
        err = NodeStopped()
        self._batch.fail(err)
        self._proposals.fail_all(err)
        for rfut in self._reads.values():
            _fail(rfut, err)
        self._reads.clear()
        while (item := self._inbox.take()) is not None:  # requests that raced with stop
            kind, arg, waiter = item
            if kind in ("propose", "read", "conf") and isinstance(waiter, Future):
                _fail(waiter, err)
            elif isinstance(arg, MadeSnapshot):
                arg.close()
        self._status = self._snapshot_status()

    def _handle(self, item: _Item) -> bool:
        kind, arg, extra = item
        rn = self.rawnode
        if kind == "msg":
            assert isinstance(arg, Message)
            with contextlib.suppress(ProposalDroppedError):
                rn.step(arg)
            if arg.from_ == rn.raft.lead and rn.raft.state is not Role.LEADER:
                self._stalls.heard(time.monotonic())
        elif kind == "propose":
            assert isinstance(arg, bytes) and isinstance(extra, Future)
            self._propose(arg, extra)
        elif kind == "read":
            assert isinstance(extra, Future)
            self._read(extra)
        elif kind == "conf":
            assert isinstance(arg, ConfChange) and isinstance(extra, Future)
            self._propose_conf(arg, extra)
        elif kind == "unreachable":
            assert isinstance(arg, int)
            rn.report_unreachable(arg)
        elif kind == "snap_status":
            assert isinstance(arg, int)
            rn.report_snapshot(arg, bool(extra))
        elif kind == "snapshot":
            assert isinstance(arg, MadeSnapshot)
            self._store_snapshot(arg)
        elif kind == "campaign":
            rn.campaign()
        elif kind == "transfer":
            assert isinstance(arg, int)
            rn.transfer_leader(arg)
        elif kind == "stop":
            return False
        return True

    def _propose(self, data: bytes, fut: Future[object]) -> None:
        r = self.rawnode.raft
        if r.state is not Role.LEADER or r.lead_transferee != NONE:
            _fail(fut, self._not_leader())
            return
        self._batch.add(data, fut, time.monotonic())

    def _append_batch(self) -> None:
        """Append the queued proposals as one batch (see `raft_proposals`)."""
        batch, r = self._batch, self.rawnode.raft
        if r.state is not Role.LEADER or r.lead_transferee != NONE:
            batch.fail(self._not_leader())
            return
        try:
            self.rawnode.propose_many(batch.payloads)
        except ProposalDroppedError:
            batch.fail(self._not_leader())
            return
        self._proposals.add_batch(batch, r.raft_log.last_index(), r.term)

    def _propose_conf(self, change: ConfChange, fut: Future[ConfState]) -> None:
        r = self.rawnode.raft
        if r.state is not Role.LEADER or r.lead_transferee != NONE:
            _fail(fut, self._not_leader())
            return
        if self._batch:  # keep log order = arrival order
            self._append_batch()
        why = refusal(r, change)
        if why is not None:
            pending = why == PENDING
            _fail(fut, MembershipChangeInProgress() if pending else InvalidMembershipChange(why))
            return
        try:
            self.rawnode.propose_conf_change(change)
        except ProposalDroppedError:
            _fail(fut, self._not_leader())
            return
        self._proposals.add(r.raft_log.last_index(), r.term, fut, time.monotonic(), conf=True)

    def _read(self, fut: Future[int]) -> None:
        if self.rawnode.raft.state is not Role.LEADER:
            _fail(fut, self._not_leader())
            return
        self._read_seq += 1
        ctx = b"r%d" % self._read_seq
        self._reads[ctx] = fut
        self.rawnode.read_index(ctx)
