"""Commands: the one path every change to the cluster state takes.

Embedded, a command is applied to `ClusterState` under the lock, the changed hardware then the
changed jobs are saved (nothing acknowledged is lost), then the events are published and their
effects carried out (stop attempts, release DOWN nodes, reset GPUs). Replicated, the command is
committed through Raft first (the lock is let go while the commit is awaited) and the events
are the ones the replica's apply returned.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import CancelledError, Future

from gpu_platform.application.cluster_replica import Applied
from gpu_platform.application.consistency import LeaderElsewhere
from gpu_platform.application.control.shared import Shared
from gpu_platform.application.raft_node import NotLeader
from gpu_platform.domain.cluster_state import Command, FinishJob
from gpu_platform.domain.errors import DomainError
from gpu_platform.domain.events import (
    ArraySubmitted,
    DomainEvent,
    GpuStateChanged,
    JobAborted,
    JobCancelled,
    JobEvent,
    JobRequeued,
    NodeStateChanged,
    StaleReportIgnored,
)
from gpu_platform.domain.faults.commands import HardwareRecord
from gpu_platform.domain.model.node import NodeState
from gpu_platform.ports.outbound.events import EventPublisher
from gpu_platform.ports.outbound.hardware_store import HardwareStore
from gpu_platform.ports.outbound.job_store import JobStore

__all__ = ["Commands", "Settle", "settling_with"]

# How a proposer waits for its commands: `settle(futures, drive)` must call `drive` and return
# once every future is done. By default the calling thread does both at once; a caller that
# runs many calls on one thread (adapters/inbound/together.py) installs its own for that
# thread, so that the calls' commands share one group commit (`settling_with`).
Settle = Callable[[Sequence[Future[object]], Callable[[], None]], None]
_settles = threading.local()


@contextlib.contextmanager
def settling_with(settle: Settle) -> Iterator[None]:
    """Wait for commits with `settle` on this thread, for the block."""
    before = getattr(_settles, "settle", None)
    _settles.settle = settle
    try:
        yield
    finally:
        _settles.settle = before


def settle_here(futures: Sequence[Future[object]], drive: Callable[[], None]) -> None:
    """The default: drive, then wait for each future on this thread."""
    drive()  # the sole voter commits and applies them on this thread
    for future in futures:
        _wait(future, None)


class Commands:
    """The command path. `elsewhere` is the leadership's (where the leader is); `accounted`
    the agents' (a node whose attempts are known); `release_down_nodes` and
    `start_due_resets` the health's."""

    def __init__(
        self,
        shared: Shared,
        *,
        store: JobStore,
        publisher: EventPublisher,
        hardware: HardwareStore | None,
        elsewhere: Callable[[], LeaderElsewhere],
        accounted: Callable[[str], bool],
        release_down_nodes: Callable[[list[DomainEvent]], None],
        start_due_resets: Callable[[], None],
    ) -> None:
        self._s = shared
        self._store = store
        self._publisher = publisher
        self._hardware = hardware
        self._elsewhere = elsewhere
        self._accounted = accounted
        self._release_down_nodes = release_down_nodes
        self._start_due_resets = start_due_resets

    def commit_all(self, commands: list[Command]) -> list[list[DomainEvent] | DomainError]:
        """Propose `commands` together and wait for all; each gets its events or the domain
        error that refused it. NotLeader (as LeaderElsewhere) ends the whole batch."""
        assert self._s.replication is not None
        if not commands:
            return []
        if not self._s.leading and not self._s.replication.is_leader():
            raise self._elsewhere()
        replication = self._s.replication
        futures = [replication.submit(c, driven=True) for c in commands]
        with self.lock_let_go():
            settle: Settle = getattr(_settles, "settle", None) or settle_here
            settle(futures, replication.drive)
        out: list[list[DomainEvent] | DomainError] = []
        for future in futures:
            try:
                applied = future.result()
            except NotLeader:
                raise self._elsewhere() from None
            assert isinstance(applied, Applied)
            out.append(applied.error if applied.error is not None else list(applied.events))
        return out

    @contextlib.contextmanager
    def lock_let_go(self) -> Iterator[None]:
        """Let go of the state's lock, however deeply this thread holds it, for the block
        (what `Condition.wait` does): a commit is never awaited under the lock, and the Raft
        thread that resolves the futures never has to take the lock to wake the waiter."""
        if not self._s.applied._is_owned():  # type: ignore[attr-defined]
            yield
            return
        saved = self._s.lock._release_save()  # type: ignore[attr-defined]
        try:
            yield
        finally:
            self._s.lock._acquire_restore(saved)  # type: ignore[attr-defined]

    def wait_for(self, future: Future[object], timeout: float) -> None:
        with self.lock_let_go():
            _wait(future, timeout)

    def execute(self, command: Command) -> list[DomainEvent]:
        """Apply, persist changed hardware then jobs, then publish and carry out effects.
        Replicated: commit the command through Raft first (the lock is released while the
        commit is awaited) and take the events the replica's apply returned."""
        if self._s.replication is not None:
            return self.effects(self._commit(command))
        with self._s.lock:
            events = self._s.state.apply(command)
            self._save_hardware(events)
            changed = {
                e.job_id
                for e in events
                if isinstance(e, JobEvent) and not isinstance(e, StaleReportIgnored)
            }
            for e in events:  # an array's tasks are one event
                if isinstance(e, ArraySubmitted):
                    changed.update(e.task_ids)
            self._store.save([self._s.state.job(j) for j in sorted(changed)])
            return self.effects(events)

    def _commit(self, command: Command) -> list[DomainEvent]:
        """Propose `command` and wait for its apply; raises the domain error that refused
        it, or LeaderElsewhere (this server does not lead; the outcome may be unknown)."""
        (outcome,) = self.commit_all([command])
        if isinstance(outcome, DomainError):
            raise outcome
        return outcome

    def effects(self, events: list[DomainEvent]) -> list[DomainEvent]:
        """Publish `events` and carry out what they ask: stop attempts, reset GPUs."""
        with self._s.lock:
            for event in events:
                self._publisher.publish(event)
            for event in events:
                if not isinstance(event, JobEvent):
                    continue
                stop = (
                    event.stop
                    if isinstance(event, JobCancelled | JobRequeued | JobAborted)
                    else None
                )
                if stop is not None:
                    self.stop_attempt(event.job_id, stop.epoch, stop.nodes)
            if self._s.replication is not None:
                self._release_down_nodes(events)
                for e in events:  # back in service (an operator's online): a fresh grace
                    if isinstance(e, NodeStateChanged) and e.new is NodeState.READY:
                        self._s.beats[e.node] = max(self._s.beats.get(e.node, 0.0), self._s.now())
            self._start_due_resets()
            return events

    def stop_attempt(self, job_id: str, epoch: int, nodes: tuple[str, ...]) -> None:
        """Stop an attempt; when no runner knows it, it has ended: record that — unless,
        replicated, one of its nodes may still run it (its agent has not spoken to this
        leader yet and the node is not DOWN): that agent's hello settles it."""
        if self._s.runner.stop(job_id, epoch, self._s.grace):
            return
        if self._s.replication is not None and not all(self._accounted(n) for n in nodes):
            return
        self._s.runs.pop((job_id, epoch), None)
        why = "attempt was not running"
        self.execute(FinishJob(job_id, epoch, None, self._s.now(), why))

    def _save_hardware(self, events: list[DomainEvent]) -> None:
        if self._hardware is None:
            return
        now = self._s.now()
        records = []
        for e in events:
            if isinstance(e, GpuStateChanged):
                records.append(HardwareRecord("gpu", e.uuid, str(e.new), e.reason, now))
            elif isinstance(e, NodeStateChanged):
                records.append(HardwareRecord("node", e.node, str(e.new), e.reason, now))
        if records:
            self._hardware.save_hardware(records)


def _wait(future: Future[object], timeout: float | None) -> None:
    """Wait until `future` is done or `timeout` passes, raising nothing (as
    `concurrent.futures.wait` does, without its waiter objects installed on every call)."""
    with contextlib.suppress(CancelledError, TimeoutError):
        future.exception(timeout)
