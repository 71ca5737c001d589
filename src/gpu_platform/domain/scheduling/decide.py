"""`decide(now, pending, running, view, quotas, policy) -> Decision`: one scheduling cycle.

Theory of operation (docs/scheduling.md has the full algorithm):

1. Order the pending jobs (`order.FairQueue`: starvation tier, effective priority, weighted
   dominant share, submission).
2. Walk them. For each: unmet dependencies -> DEPENDENCY; quota (`quota.QuotaBook`) ->
   QUOTA / ADMISSION; these blocked jobs use none of the window of `policy.max_jobs` jobs
   examined per cycle, which is shared fairly across tenants (`window.Window`). In strict
   order (backfill off) everything behind the first job that did not fit -> RESERVATION;
   then `place()` on the view as the cycle has changed it. A placement is bound at once (all
   tasks of a gang or none), charged to the tenant's quota and fair share. A job of a spread
   group (`GpuRequest.spread`: a service's replicas) avoids the nodes that the group's
   running jobs, and those bound earlier in the cycle, hold (`avoid_nodes`, a preference).
3. A job that does not fit may choose victims (`preemption`, at most `max_preemptors` jobs per
   cycle) -> PREEMPTION; otherwise it is CAPACITY (not enough free GPUs) or TOPOLOGY (enough
   GPUs, no placement). With backfill on, the first such job gets the reservation
   (`backfill`); later jobs are placed around it, or on it if their time limit ends first.

The caller's view is changed only through a `Ledger` and restored before returning. Given
the same view (including its tie order) and inputs, the decision is the same.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from gpu_platform.domain.placement.engine import place
from gpu_platform.domain.placement.first_fit import Unschedulable
from gpu_platform.domain.placement.request import MILLI, GangPlacement, GpuRequest
from gpu_platform.domain.placement.view import UNKNOWN_CAPACITY, ClusterView
from gpu_platform.domain.scheduling.backfill import Hold, reserve
from gpu_platform.domain.scheduling.dependencies import dependency_reason
from gpu_platform.domain.scheduling.ledger import Ledger
from gpu_platform.domain.scheduling.model import (
    Decision,
    PendingCode,
    PendingJob,
    PendingReason,
    Preemption,
    Quota,
    Reservation,
    RunningJob,
    SchedulerPolicy,
)
from gpu_platform.domain.scheduling.order import Capacity, FairQueue
from gpu_platform.domain.scheduling.preemption import find_victims
from gpu_platform.domain.scheduling.quota import QuotaBook, gpus_text
from gpu_platform.domain.scheduling.window import Window

__all__ = ["Placer", "decide"]

# How a cycle asks the engine for one job's placement: (job id, request, view). The default
# is `place`; a caller may wrap it (to time each decision, say) as long as it answers the same.
Placer = Callable[[str, GpuRequest, ClusterView], GangPlacement | Unschedulable]


def _place(_job_id: str, request: GpuRequest, view: ClusterView) -> GangPlacement | Unschedulable:
    return place(request, view)


def decide(
    now: float,
    pending: Iterable[PendingJob],
    running: Iterable[RunningJob],
    view: ClusterView,
    quotas: Mapping[str, Quota],
    policy: SchedulerPolicy,
    placer: Placer = _place,
) -> Decision:
    """One cycle: what to bind, whom to preempt, and why every other pending job waits.
    `view` must show the running jobs' placements as bound; every node's free capacity is
    left as it was (only the order among interchangeable nodes, which breaks placement ties,
    may change). The answer does not depend on the order of `pending`. Raises ValueError
    for duplicate job ids. `placer` answers each job's own placement question (victim and
    reservation searches call the engine directly)."""
    pending = list(pending)
    running = list(running)
    ids = [j.id for j in pending] + [r.id for r in running]
    if len(set(ids)) != len(ids):
        raise ValueError("duplicate job ids among pending and running jobs")
    ledger = Ledger(view)
    try:
        return _Cycle(now, pending, running, ledger, quotas, policy, placer).run()
    finally:
        ledger.undo_all()


def _capacity(view: ClusterView) -> Capacity:
    gpu = cpu = memory = 0
    for slot in view.slots.values():
        gpu += len(view.classes[slot.hw].gpus) * MILLI
        cpu += slot.cpu_cap if slot.cpu_cap != UNKNOWN_CAPACITY else 0
        memory += slot.memory_cap if slot.memory_cap != UNKNOWN_CAPACITY else 0
    return Capacity(gpu, cpu, memory)


def _key(entry: tuple[tuple[int, int, float, int], PendingJob]) -> tuple[int, int, float, int]:
    return entry[0]


def _dependency(job: PendingJob) -> PendingReason:
    return dependency_reason(job.waiting_on)


def _when(at: float) -> str:
    return "once jobs without a time limit end" if at == float("inf") else f"at t={at:g}"


class _Cycle:
    def __init__(
        self,
        now: float,
        pending: list[PendingJob],
        running: list[RunningJob],
        ledger: Ledger,
        quotas: Mapping[str, Quota],
        policy: SchedulerPolicy,
        placer: Placer = _place,
    ) -> None:
        self.placer = placer
        self.now = now
        self.pending = pending
        self.running = running
        self.ledger = ledger
        self.policy = policy
        self.book = QuotaBook(quotas, running)
        self.capacity = _capacity(ledger.view)
        usage: dict[str, tuple[int, int, int]] = {}
        for r in running:
            g, c, m = usage.get(r.tenant, (0, 0, 0))
            usage[r.tenant] = (g + r.gpu_milli, c + r.total_cpu_milli, m + r.total_memory_bytes)
        self.queue = FairQueue(pending, now, policy, self.capacity, usage)
        self.binds: dict[str, GangPlacement] = {}
        self.reasons: dict[str, PendingReason] = {}
        self.preemptions: list[Preemption] = []
        self.borrowing: set[str] = set()
        self.hold: Hold | None = None
        self.blocker: PendingJob | None = None
        self.failed: dict[GpuRequest, PendingReason] = {}
        self.victims: set[str] = set()
        self.preemptors = 0
        self.reserve_tried = False
        self.started: list[RunningJob] = []  # bound this cycle, for the reservation
        self.spread: dict[str, set[str]] = {}  # spread group -> the nodes its jobs hold
        for r in running:
            if r.spread:
                self.spread.setdefault(r.spread, set()).update(t.node for t in r.tasks)

    def _request(self, job: PendingJob) -> GpuRequest:
        """`job`'s request, avoiding the nodes its spread group holds."""
        request = job.request
        nodes = self.spread.get(request.spread) if request.spread else None
        return replace(request, avoid_nodes=frozenset(nodes)) if nodes else request

    def run(self) -> Decision:
        window = Window(self.pending, self.policy.max_jobs, self.capacity.gpu)
        deferred: list[tuple[tuple[int, int, float, int], PendingJob]] = []
        leftover: list[PendingJob] = []
        for job in self.queue:
            if window.full:  # the rest cannot be examined: answered cheaply below
                leftover = [job, *self.queue.rest(), *(j for _, j in deferred)]
                deferred = []
                break
            admitted = self._admissible(job)
            if isinstance(admitted, PendingReason):  # blocked: answered, uses no window
                self.reasons[job.id] = admitted
            elif window.admits(job.tenant):
                self._examine(job, admitted, window)
            else:  # its tenant's slice is used: the tenant waits for the second pass
                deferred.extend(self.queue.defer(job.tenant))
        if not window.full:
            deferred.sort(key=_key)
        for _, job in deferred:  # past their tenant's slice: examined while there is room
            if window.full:
                leftover.append(job)
                continue
            admitted = self._admissible(job)  # this cycle's binds may have used the quota
            if isinstance(admitted, PendingReason):
                self.reasons[job.id] = admitted
            else:
                self._examine(job, admitted, window)
        unexamined = PendingReason(
            PendingCode.ADMISSION,
            f"not examined this cycle: the window of {self.policy.max_jobs} jobs was used by"
            " jobs ahead of it in queue order (shared fairly across tenants)",
        )
        for job in leftover:
            self.reasons[job.id] = _dependency(job) if job.waiting_on else unexamined
        return Decision(
            binds=self.binds,
            preemptions=tuple(self.preemptions),
            pending_reasons=self.reasons,
            borrowing=frozenset(self.borrowing),
            reservation=self.hold.reservation if self.hold is not None else None,
            examined=window.examined,
        )

    def _examine(self, job: PendingJob, borrowing: bool, window: Window) -> None:
        window.count(job.tenant)
        reason = self._one(job, borrowing)
        if reason is not None:
            self.reasons[job.id] = reason

    def _admissible(self, job: PendingJob) -> PendingReason | bool:
        """Why `job` cannot run whatever the cluster looks like (dependencies, quota, larger
        than the cluster), else whether admitting it borrows quota."""
        if job.waiting_on:
            return _dependency(job)
        admitted = self.book.check(job)
        if isinstance(admitted, PendingReason):
            return admitted
        if job.gpu_milli > self.capacity.gpu:  # never fits: must not hold the queue
            return PendingReason(
                PendingCode.ADMISSION,
                f"needs {gpus_text(job.gpu_milli)} GPUs; the cluster has "
                f"{gpus_text(self.capacity.gpu)}",
            )
        return admitted

    def _one(self, job: PendingJob, admitted: bool) -> PendingReason | None:
        """Bind `job` (None) or say why it waits; it passed `_admissible`."""
        if self.blocker is not None:
            return PendingReason(
                PendingCode.RESERVATION,
                f"behind {self.blocker.id}, first in queue order (strict order: backfill off)",
            )
        held = self.hold.milli if self.hold is not None else 0
        result: GangPlacement | PendingReason
        if self.ledger.free_milli + held < job.gpu_milli:  # the common case of a full cluster
            result = PendingReason(
                PendingCode.CAPACITY,
                f"needs {gpus_text(job.gpu_milli)} GPUs, {gpus_text(self.ledger.free_milli)} free",
            )
        else:
            result = self._try(job)
        if isinstance(result, GangPlacement):
            self._bound(job, result, admitted)
            return None
        reason = result
        if reason.code is not PendingCode.RESERVATION:
            reason = self._maybe_preempt(job, reason)
            blocked = reason.code in (PendingCode.CAPACITY, PendingCode.TOPOLOGY)
            if self.policy.backfill and self.hold is None and blocked and not self.reserve_tried:
                self.reserve_tried = True  # one reservation per cycle: the head's
                reservation = reserve(job, self.now, self.running + self.started, self.ledger)
                if reservation is not None:
                    self.hold = Hold(reservation, self.ledger)
                    nodes = ",".join(sorted(set(reservation.placement.nodes)))
                    reason = PendingReason(
                        reason.code,
                        f"{reason.message}; reserved {_when(reservation.at)} on {nodes}",
                    )
            if not self.policy.backfill:
                self.blocker = job
        return reason

    def _bound(self, job: PendingJob, placement: GangPlacement, borrowing: bool) -> None:
        self.binds[job.id] = placement
        if job.request.spread:
            self.spread.setdefault(job.request.spread, set()).update(placement.nodes)
        estimate = job.runtime_estimate_s
        self.started.append(
            RunningJob(
                job.id,
                job.tenant,
                placement.tasks,
                self.now,
                job.priority,
                job.preemptible,
                job.request.cpu_milli,
                job.request.memory_bytes,
                expected_end=None if estimate is None else self.now + estimate,
            )
        )
        if borrowing:
            self.borrowing.add(job.id)
        self.book.add(job.tenant, job.gpu_milli, job.cpu_milli, job.gpu_memory_bytes)
        self.queue.charge(job.tenant, job.gpu_milli, job.cpu_milli, job.memory_bytes)

    def _place(self, job: PendingJob) -> GangPlacement | PendingReason:
        """Place on the view as it stands (reservation held); binds on success."""
        cached = self.failed.get(job.request)
        if cached is not None:
            return cached
        ledger = self.ledger
        if ledger.free_milli < job.gpu_milli:
            reason = PendingReason(
                PendingCode.CAPACITY,
                f"needs {gpus_text(job.gpu_milli)} GPUs, {gpus_text(ledger.free_milli)} free",
            )
        elif not ledger.could_fit(job.request):
            r = job.request
            reason = PendingReason(
                PendingCode.TOPOLOGY,
                f"{gpus_text(ledger.free_milli)} GPUs free but not {r.tasks} x {r.gpus}"
                " on single nodes",
            )
        else:
            found = self.placer(job.id, self._request(job), ledger.view)
            if isinstance(found, GangPlacement):
                ledger.bind_gang(found, job.request.cpu_milli, job.request.memory_bytes)
                return found
            reason = PendingReason(
                PendingCode.TOPOLOGY,
                f"{gpus_text(ledger.free_milli)} GPUs free but no placement: {found.reason}",
            )
        self.failed[job.request] = reason
        return reason

    def _try(self, job: PendingJob) -> GangPlacement | PendingReason:
        result = self._place(job)
        hold = self.hold
        if isinstance(result, GangPlacement) or hold is None:
            return result
        # does it fit on the reserved GPUs? Only a job that ends before the reservation may
        # take them; any other job would delay it.
        reservation = hold.reservation
        estimate = job.runtime_estimate_s
        short = estimate is not None and self.now + estimate <= reservation.at
        ledger = self.ledger
        if ledger.free_milli + hold.milli < job.gpu_milli:
            return result
        hold.drop()
        try:
            if not ledger.could_fit(job.request):
                return result
            found = self.placer(job.id, self._request(job), ledger.view)
            if not isinstance(found, GangPlacement):
                return result
            if short:
                ledger.bind_gang(found, job.request.cpu_milli, job.request.memory_bytes)
                return found
            return PendingReason(
                PendingCode.RESERVATION,
                f"fits only on GPUs reserved for {reservation.job} {_when(reservation.at)};"
                f" its time limit ({estimate if estimate is not None else 'none'}) ends later",
            )
        finally:
            hold.take()

    def _would_overtake(self, victim: RunningJob, job: PendingJob) -> bool:
        """Re-queued, `victim` would be examined before `job`: it has waited past the aging
        bound (tier 0, oldest first) and `job` has not, or is not older."""
        bound = self.policy.aging_bound_s
        since = victim.submitted_at
        if bound is None or since is None or self.now - since < bound:
            return False
        return self.now - job.submitted_at < bound or since <= job.submitted_at

    def _maybe_preempt(self, job: PendingJob, reason: PendingReason) -> PendingReason:
        if not self.policy.preemption or self.preemptors >= self.policy.max_preemptors:
            return reason
        exempt_after = self.now - self.policy.min_runtime_s
        found = find_victims(
            job,
            [
                r
                for r in self.running
                if r.started_at <= exempt_after and not self._would_overtake(r, job)
            ],
            self.ledger,
            self.book,
            self.victims,
            self.policy.max_victims_per_node,
        )
        self.preemptors += 1  # attempts count: the search is the expensive part
        if found is None:
            return reason
        if self.policy.backfill and self.hold is None:
            self.hold = Hold(Reservation(job.id, self.now, found.placement), self.ledger)
        if not found.victims:
            return PendingReason(
                PendingCode.PREEMPTION, "waiting for preempted jobs to stop: " + reason.message
            )
        for v in found.victims:
            self.victims.add(v.id)
            self.preemptions.append(Preemption(v.id, job.id, found.causes[v.id]))
        names = ", ".join(f"{v.id} ({found.causes[v.id]})" for v in found.victims)
        return PendingReason(PendingCode.PREEMPTION, f"preempting {names} to make room")
