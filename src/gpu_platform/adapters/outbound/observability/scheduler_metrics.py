"""PrometheusSchedulerMetrics: placement decisions and job lifecycle events as Prometheus series.

It is both a `SchedulerMetrics` (the control plane reports each placement decision) and an
`EventPublisher` (domain events: state transitions, preemptions, recovery times). Events do
not say which state a job left, so the transition counter reads the job's history through a
lookup bound with `watch_jobs` before the control plane starts; it is called on the
publishing thread, inside the control plane's lock, which is re-entrant.

Recovery time is measured with the control plane's clock (also bound by `watch_jobs`): from a
job's requeue (its attempt was stopped by a GPU or node fault, or lost in a restart) to its
next attempt RUNNING. Events published before `watch_jobs` count only as preemptions.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter, Histogram

from gpu_platform.domain.events import (
    DomainEvent,
    JobAborted,
    JobBound,
    JobCancelled,
    JobFinished,
    JobRequeued,
    JobStarted,
    JobSubmitted,
)
from gpu_platform.domain.model.job import Job, JobState
from gpu_platform.domain.placement import Unschedulable

__all__ = [
    "PLACEMENT_BUCKETS_US",
    "RECOVERY_BUCKETS_S",
    "PrometheusSchedulerMetrics",
    "failure_reason",
    "preemption_reason",
]

log = structlog.get_logger(__name__)

PLACEMENT_BUCKETS_US = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 50_000)
RECOVERY_BUCKETS_S = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800)

# how many job state transitions each event stands for (a requeue is RUNNING -> PREEMPTED ->
# QUEUED); events not listed move no job
_MOVES: dict[type, int] = {
    JobSubmitted: 1,
    JobBound: 1,
    JobStarted: 1,
    JobFinished: 1,
    JobCancelled: 1,
    JobAborted: 1,
    JobRequeued: 2,
}
# the state a bind or start moves into: one command may bind and start (`BindJob.start`), so
# the job's history may already be past it when the bind's event is counted
_INTO: dict[type, JobState] = {JobBound: JobState.SCHEDULED, JobStarted: JobState.RUNNING}
# a submit's move is the job's first: its event may be published after the job's bind and start
# (the scheduler took the applied job while the submitting thread had yet to publish)
_FIRST: dict[type, JobState] = {JobSubmitted: JobState.QUEUED}


def failure_reason(failure: Unschedulable) -> str:
    """A bounded label for why placement failed: the constraint that ruled out most nodes
    (`free_gpus`, `gpu_model`, `cpu`, `gang`, ...), `no_nodes`, or `other`."""
    if failure.constraints:
        what, _ = max(failure.constraints, key=lambda c: (c[1], c[0]))
        return what.replace(" ", "_")
    if failure.reason.endswith("no nodes"):
        return "no_nodes"
    return "other"


def preemption_reason(reason: str) -> str:
    """A bounded label for a requeue's free-text reason: priority or reclaim (the scheduler
    chose it as a victim), gpu_fault, node_fault, restart, shutdown or other."""
    if reason.startswith("preempted: "):
        cause = reason.removeprefix("preempted: ").split(" ", 1)[0]
        return cause if cause in ("priority", "reclaim") else "other"
    if reason.startswith("gpu "):
        return "gpu_fault"
    if reason.startswith("node "):
        return "node_fault"
    if "control plane restarted" in reason:
        return "restart"
    if "control plane shut down" in reason:
        return "shutdown"
    return "other"


class PrometheusSchedulerMetrics:
    """Implements SchedulerMetrics and EventPublisher on `registry`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._now: Callable[[], float] | None = None
        self._lock = threading.Lock()
        self._jobs: Callable[[str], Job] | None = None
        self._requeued_at: dict[str, float] = {}
        self._transition: dict[tuple[JobState, JobState], Any] = {}
        self.placement_latency = Histogram(
            "gpu_platform_placement_decision_microseconds",
            "Time the placement engine took to decide for one job, in microseconds",
            ["outcome"],
            buckets=PLACEMENT_BUCKETS_US,
            registry=registry,
        )
        self.placement_failures = Counter(
            "gpu_platform_placement_failures",
            "Placement decisions that found no room, by the constraint that ruled most out",
            ["reason"],
            registry=registry,
        )
        self.transitions = Counter(
            "gpu_platform_job_transitions",
            "Job state transitions",
            ["from_state", "to_state"],
            registry=registry,
        )
        self.preemptions = Counter(
            "gpu_platform_preemptions",
            "Attempts stopped and requeued (transitions into PREEMPTED), by cause",
            ["reason"],
            registry=registry,
        )
        self.recovery = Histogram(
            "gpu_platform_recovery_seconds",
            "Time from a job's requeue (fault, lost attempt) to its next attempt running",
            buckets=RECOVERY_BUCKETS_S,
            registry=registry,
        )

    def watch_jobs(self, lookup: Callable[[str], Job], now: Callable[[], float]) -> None:
        """Read job histories through `lookup` (the control plane's `get`) and time
        recoveries with `now` (its clock, seconds)."""
        self._jobs, self._now = lookup, now

    # -- SchedulerMetrics ------------------------------------------------------------------

    def placement_decided(
        self, job_id: str, latency_us: float, failure: Unschedulable | None
    ) -> None:
        outcome = "placed" if failure is None else "unschedulable"
        self.placement_latency.labels(outcome=outcome).observe(latency_us)
        if failure is not None:
            self.placement_failures.labels(reason=failure_reason(failure)).inc()

    def placement_refused(self, job_id: str, failure: Unschedulable) -> None:
        self.placement_failures.labels(reason=failure_reason(failure)).inc()

    # -- EventPublisher --------------------------------------------------------------------

    def publish(self, event: DomainEvent) -> None:
        if type(event) is JobSubmitted:  # the domain's ACCEPT: always PENDING -> QUEUED
            if self._jobs is not None:
                self._moved(JobState.PENDING, JobState.QUEUED)
            return
        moves = _MOVES.get(type(event), 0)
        if not moves:
            return
        job_id: str = getattr(event, "job_id")  # noqa: B009 - every moving event has one
        self._count_transitions(job_id, moves, _INTO.get(type(event)), _FIRST.get(type(event)))
        now = self._now
        if isinstance(event, JobRequeued):
            self.preemptions.labels(reason=preemption_reason(event.reason)).inc()
            if now is not None:
                with self._lock:
                    self._requeued_at.setdefault(job_id, now())
        elif isinstance(event, JobStarted):
            with self._lock:
                since = self._requeued_at.pop(job_id, None)
            if since is not None and now is not None:
                self.recovery.observe(max(0.0, now() - since))
        elif isinstance(event, JobFinished | JobCancelled | JobAborted):
            with self._lock:
                self._requeued_at.pop(job_id, None)

    def _count_transitions(
        self,
        job_id: str,
        moves: int,
        into: JobState | None = None,
        first: JobState | None = None,
    ) -> None:
        if self._jobs is None:
            return
        try:
            job = self._jobs(job_id)
        except Exception as exc:  # a publisher must not raise into the control plane
            log.warning("job transition not counted", job_id=job_id, error=str(exc))
            return
        states = [JobState.PENDING, *(state for _, state, _ in job.history)]
        if into is not None and into in states:  # a bind that also started: its own move
            states = states[: len(states) - states[::-1].index(into)]
        elif first is not None and first in states:  # the job's first move, whatever came after
            states = states[: states.index(first) + 1]
        path = states[-moves - 1 :]
        for old, new in itertools.pairwise(path):
            self._moved(old, new)

    def _moved(self, old: JobState, new: JobState) -> None:
        child = self._transition.get((old, new))
        if child is None:  # the labelled child, looked up once per pair
            child = self.transitions.labels(from_state=str(old), to_state=str(new))
            self._transition[(old, new)] = child
        child.inc()
