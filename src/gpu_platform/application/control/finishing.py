"""Finishing: the exits of attempts, committed together (replicated; issue 21).

Theory of operation: every attempt's end is a FinishJob. Exit reports from many agents (and
the many tasks of one agent: their stream hands exits over without waiting for each other's
commit) arrive at once; one at a time, each would be its own Raft entry and commit round.
Here they queue, and one of the reporting threads — the first to find no commit under way —
takes everything queued and commits it as one `JobBatch`; the others wait (with the state's
lock let go) and are answered from that batch's outcome, or take the next batch themselves
once it is done. So a report is still answered only once its finish is committed (an agent
forgets an exit only when it is acknowledged), and a batch forms only while an earlier commit
is under way: a lone exit is committed at once, as before.

Embedded (no replication) a finish is executed on its own, as any command.

Thread-safety: `finish` may be called from any thread, holding the state's lock or not.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog

from gpu_platform.application.control.shared import LOG_NAME, Shared
from gpu_platform.domain.cluster_state import Command, FinishJob
from gpu_platform.domain.errors import DomainError
from gpu_platform.domain.events import BatchItemRefused, DomainEvent
from gpu_platform.domain.job_batches import JobBatch, split_outcomes

__all__ = ["Finishing"]

log = structlog.get_logger(LOG_NAME)

CommitAll = Callable[[list[Command]], list[list[DomainEvent] | DomainError]]

#: At most this many finishes in one batch (one Raft entry stays a few hundred KiB at most).
MAX_BATCH = 512


@dataclass(eq=False)
class _Slot:
    command: FinishJob
    done: bool = False
    outcome: list[DomainEvent] | BatchItemRefused | None = None
    error: BaseException | None = None


class Finishing:
    """Group commit of finishes; `commit_all`, `effects` and `lock_let_go` are the plane's
    command path (replicated)."""

    def __init__(
        self,
        shared: Shared,
        *,
        commit_all: CommitAll,
        effects: Callable[[list[DomainEvent]], list[DomainEvent]],
        lock_let_go: Callable[[], contextlib.AbstractContextManager[None]],
    ) -> None:
        self._s = shared
        self._commit_all = commit_all
        self._effects = effects
        self._lock_let_go = lock_let_go
        self._cond = threading.Condition(threading.Lock())
        self._queue: list[_Slot] = []
        self._committing = False
        self.batches = 0  # batches committed (for tests and benchmarks)
        self.finishes = 0  # finishes committed in them

    def finish(self, command: FinishJob) -> None:
        """Record that attempt `command.epoch` ended; returns once committed (module
        docstring). Raises what the commit raised (LeaderElsewhere: this server no longer
        leads); a finish the state machine refused is logged, as a stale report is."""
        self.finish_all([command])

    def finish_all(self, commands: Sequence[FinishJob]) -> None:
        """`finish` each command, queued together (one agent's exits reported at once go in
        one batch); returns once every one is committed. Raises the first commit error."""
        if self._s.replication is None:
            for command in commands:
                self._s.execute(command)
            return
        slots = [_Slot(command) for command in commands]
        if not slots:
            return
        last = slots[-1]  # queued last, so answered last: every slot is done once it is
        with self._lock_let_go():
            with self._cond:
                self._queue.extend(slots)
            while not last.done:
                with self._cond:
                    while self._committing and not last.done:
                        self._cond.wait()
                    if last.done:
                        break
                    self._committing = True  # nobody commits: take the queue's head
                    batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
                self._commit(batch)
        for slot in slots:
            if slot.error is not None:
                raise slot.error
        for slot in slots:
            if isinstance(slot.outcome, BatchItemRefused):
                log.warning("finish refused", job_id=slot.outcome.job_id, error=slot.outcome.error)

    def _commit(self, batch: list[_Slot]) -> None:
        """Commit `batch` as one JobBatch, answer its slots, let the next committer go."""
        items = JobBatch(tuple(s.command for s in batch))
        outcomes: list[list[DomainEvent] | BatchItemRefused] = []
        error: BaseException | None = None
        try:
            (result,) = self._commit_all([items])
            if isinstance(result, DomainError):
                raise result
            self._effects(result)
            outcomes = split_outcomes(items, result)
        except BaseException as exc:  # every waiter of the batch gets it
            error = exc
        with self._cond:
            self._committing = False
            if error is None:
                self.batches += 1
                self.finishes += len(batch)
            for n, slot in enumerate(batch):
                slot.done = True
                slot.error = error
                slot.outcome = outcomes[n] if error is None else None
            self._cond.notify_all()
