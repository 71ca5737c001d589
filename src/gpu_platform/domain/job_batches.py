"""Job batches: many job commands in one command of the cluster state machine (issue 21).

Theory of operation: a leader that binds a whole scheduling cycle, or takes the exits of many
tasks at once, proposes one `JobBatch` instead of one command per job: one Raft entry to
encode, persist, replicate, apply and acknowledge. Applying a batch is applying its items one
by one, in order, exactly as if each were its own command — the same state, the same events —
except that an item the domain refuses does not refuse the batch: it leaves the state as it
was (every job command validates before it changes anything) and its place in the events is
taken by `BatchItemRefused` (its index, job and the refusal's message). So the batch is
deterministic as any command, and a replica replaying the log gets the same state whether the
items were proposed together or apart.

Only job commands that speak for one job go in a batch (`BATCHABLE`): binds, starts,
finishes, re-queues and aborts. Submits and cancels come from clients one at a time; a batch
of batches is refused (`InvalidRequest`), as is an empty one.

Split from `cluster_state` for size (a mixin of `ClusterState`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpu_platform.domain.errors import DomainError, InvalidRequest
from gpu_platform.domain.events import BatchItemRefused, DomainEvent
from gpu_platform.domain.job_commands import AbortJob, BindJob, FinishJob, RequeueJob, StartJob

__all__ = ["BATCHABLE", "BatchHandlers", "JobBatch", "JobItem", "split_outcomes"]

JobItem = BindJob | StartJob | FinishJob | RequeueJob | AbortJob

#: The command classes a JobBatch may carry.
BATCHABLE: tuple[type[JobItem], ...] = (BindJob, StartJob, FinishJob, RequeueJob, AbortJob)


@dataclass(frozen=True, slots=True)
class JobBatch:
    """Apply `items` in order as one command (module docstring)."""

    items: tuple[JobItem, ...]


class BatchHandlers:
    """The batch half of ClusterState; see the module docstring."""

    if TYPE_CHECKING:

        def _apply_item(self, command: JobItem) -> list[DomainEvent]: ...

    def _apply_batch(self, cmd: JobBatch) -> list[DomainEvent]:
        if not cmd.items:
            raise InvalidRequest("items", "a job batch needs at least one item")
        bad = next((i for i in cmd.items if not isinstance(i, BATCHABLE)), None)
        if bad is not None:
            raise InvalidRequest("items", f"{type(bad).__name__} cannot go in a job batch")
        events: list[DomainEvent] = []
        for n, item in enumerate(cmd.items):
            try:
                events += self._apply_item(item)
            except DomainError as exc:
                events.append(BatchItemRefused(n, item.job_id, f"{type(exc).__name__}: {exc}"))
        return events


def split_outcomes(
    batch: JobBatch, events: list[DomainEvent]
) -> list[list[DomainEvent] | BatchItemRefused]:
    """The events of an applied batch, per item: the item's own events, or its refusal.
    Each job command yields one event (a bind that starts: two, JobBound then JobStarted),
    which is how the list is cut; a property test holds this to applying the items apart."""
    out: list[list[DomainEvent] | BatchItemRefused] = []
    at = 0
    for n, item in enumerate(batch.items):
        first = events[at] if at < len(events) else None
        if isinstance(first, BatchItemRefused) and first.index == n:
            out.append(first)
            at += 1
            continue
        size = 2 if isinstance(item, BindJob) and item.start else 1
        out.append(list(events[at : at + size]))
        at += size
    return out
