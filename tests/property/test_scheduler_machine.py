"""The scheduler against a model cluster: random submits, completions, cancels, priority and
quota changes across tenants, with every policy combination. The machine applies each
decision itself (binds into the view, victims told to stop, stopped victims re-queued).

Invariants: no oversubscription; gangs never partial; every job in exactly one state; only
lower-priority (or borrowed, for reclaim) work is preempted; decide() leaves every node's
free capacity as it found it; the oldest job past the aging
bound that passes quota and fits is bound; a tenant within its guarantee whose job would fit
once borrowed work of its cohort is gone gets that work preempted (or is bound)."""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from gpu_platform.adapters.outbound.sim.inventory import build_node
from gpu_platform.domain.placement import ClusterView, GangPlacement, GpuRequest, place
from gpu_platform.domain.scheduling import (
    Decision,
    PendingCode,
    PendingJob,
    PreemptionCause,
    QueueOrder,
    Quota,
    RunningJob,
    SchedulerPolicy,
    decide,
)
from gpu_platform.domain.scheduling.quota import QuotaBook

TENANTS = ("a", "b", "c")
AGING_BOUND = 30.0


def fits(view: ClusterView, request: GpuRequest, gone: list[RunningJob]) -> bool:
    for r in gone:
        for t in r.tasks:
            view.release(t, r.cpu_milli, r.memory_bytes)
    try:
        return isinstance(place(request, view), GangPlacement)
    finally:
        for r in gone:
            for t in r.tasks:
                view.bind(t, r.cpu_milli, r.memory_bytes)


class SchedulerMachine(RuleBasedStateMachine):
    @initialize(
        priority=st.booleans(),
        fair=st.booleans(),
        backfill=st.booleans(),
        preemption=st.booleans(),
    )
    def boot(self, priority: bool, fair: bool, backfill: bool, preemption: bool) -> None:
        nodes = [
            build_node(f"n{i}", 4, numa_nodes=2, labels={"rack": f"r{i // 2}"}) for i in range(3)
        ]
        self.view = ClusterView(nodes)
        self.policy = SchedulerPolicy(
            order=QueueOrder.PRIORITY if priority else QueueOrder.FIFO,
            aging_rate=0.1,
            aging_bound_s=AGING_BOUND,
            fair_share=fair,
            backfill=backfill,
            preemption=preemption,
            max_preemptors=100,
        )
        self.quotas: dict[str, Quota] = {
            "a": Quota(4, cohort="x"),
            "b": Quota(4, borrowing_limit=4, cohort="x"),
            "c": Quota(6),
        }
        self.now = 0.0
        self.seq = 0
        self.pending: dict[str, PendingJob] = {}
        self.running: dict[str, RunningJob] = {}
        self.done: set[str] = set()
        self.requests: dict[str, GpuRequest] = {}
        self.submitted: dict[str, float] = {}

    # --- the world -------------------------------------------------------------------

    @rule(
        tenant=st.sampled_from(TENANTS),
        shape=st.sampled_from([(0, 1), (1, 1), (1, 1), (2, 1), (3, 1), (4, 1), (2, 2), (4, 2)]),
        priority=st.integers(0, 3),
        estimate=st.sampled_from([None, 5.0, 50.0]),
        depends=st.sampled_from([False] * 5 + [True]),
        count=st.integers(1, 3),
    )
    def submit(
        self,
        tenant: str,
        shape: tuple[int, int],
        priority: int,
        estimate: float | None,
        depends: bool,
        count: int,
    ) -> None:
        for _ in range(count):
            self.seq += 1
            job_id = f"j{self.seq}"
            first = next(iter(self.pending), None)
            waiting = frozenset({first}) if depends and first is not None else frozenset()
            request = GpuRequest(gpus=shape[0], tasks=shape[1])
            self.requests[job_id] = request
            self.submitted[job_id] = self.now
            self.pending[job_id] = PendingJob(
                job_id,
                tenant,
                request,
                self.now,
                self.seq,
                priority=priority,
                runtime_estimate_s=estimate,
                waiting_on=waiting,
            )

    @rule(dt=st.sampled_from([1.0, 5.0, 20.0, 40.0]))
    def tick(self, dt: float) -> None:
        self.now += dt

    @precondition(lambda self: bool(self.running))
    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.running)))
        self._release(job_id)
        self.done.add(job_id)
        self._satisfy(job_id)

    @precondition(lambda self: any(r.terminating for r in self.running.values()))
    @rule(data=st.data())
    def victim_stops(self, data: st.DataObject) -> None:
        stopping = sorted(j for j, r in self.running.items() if r.terminating)
        job_id = data.draw(st.sampled_from(stopping))
        r = self._release(job_id)
        self.pending[job_id] = PendingJob(  # PREEMPTED -> QUEUED, keeps its submission time
            job_id, r.tenant, self.requests[job_id], self.submitted[job_id], self.seq, r.priority
        )
        self.seq += 1

    @precondition(lambda self: bool(self.pending))
    @rule(data=st.data())
    def cancel_pending(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.pending)))
        del self.pending[job_id]
        self.done.add(job_id)
        self._satisfy(job_id)

    @precondition(lambda self: bool(self.pending))
    @rule(data=st.data(), priority=st.integers(0, 5))
    def change_priority(self, data: st.DataObject, priority: int) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.pending)))
        self.pending[job_id] = dataclasses.replace(self.pending[job_id], priority=priority)

    @rule(
        tenant=st.sampled_from(TENANTS),
        gpus=st.integers(0, 8),
        borrowing=st.sampled_from([None, 0, 2]),
        lending=st.sampled_from([None, 2]),
    )
    def change_quota(
        self, tenant: str, gpus: int, borrowing: int | None, lending: int | None
    ) -> None:
        cohort = self.quotas[tenant].cohort
        self.quotas[tenant] = Quota(
            gpus, borrowing_limit=borrowing, lending_limit=lending, cohort=cohort
        )

    def _release(self, job_id: str) -> RunningJob:
        r = self.running.pop(job_id)
        for t in r.tasks:
            self.view.release(t, r.cpu_milli, r.memory_bytes)
        return r

    def _satisfy(self, job_id: str) -> None:
        for pid, p in list(self.pending.items()):
            if job_id in p.waiting_on:
                self.pending[pid] = dataclasses.replace(p, waiting_on=p.waiting_on - {job_id})

    # --- the scheduler ---------------------------------------------------------------

    @rule()
    def schedule(self) -> None:
        pending, running = list(self.pending.values()), list(self.running.values())
        must_bind = self._oldest_starving_that_fits()
        before = {name: self.view.signature(name) for name in self.view.slots}
        d = decide(self.now, pending, running, self.view, self.quotas, self.policy)
        assert {name: self.view.signature(name) for name in self.view.slots} == before
        self.view.check_invariants()
        assert set(d.binds) | set(d.pending_reasons) == set(self.pending)
        assert not set(d.binds) & set(d.pending_reasons)
        if must_bind is not None:
            assert must_bind in d.binds, (must_bind, d.pending_reasons.get(must_bind))
        self._check_preemptions(d)
        self._check_guarantees(d)
        self._apply(d)

    def _oldest_starving_that_fits(self) -> str | None:
        book = QuotaBook(self.quotas, self.running.values())
        starving = sorted(
            (p for p in self.pending.values() if self.now - p.submitted_at >= AGING_BOUND),
            key=lambda p: (p.submitted_at, p.seq),
        )
        for p in starving:
            if p.waiting_on or not isinstance(book.check(p), bool):
                continue
            return p.id if fits(self.view, p.request, []) else None
        return None

    def _check_preemptions(self, d: Decision) -> None:
        seen: set[str] = set()
        for p in d.preemptions:
            assert p.victim not in seen
            seen.add(p.victim)
            victim, preemptor = self.running[p.victim], self.pending[p.preemptor]
            assert victim.preemptible and not victim.terminating
            if p.cause is PreemptionCause.PRIORITY:
                assert victim.priority < preemptor.priority
                assert victim.tenant == preemptor.tenant or victim.borrowing
            else:
                assert victim.borrowing and victim.tenant != preemptor.tenant
                assert self.quotas[victim.tenant].cohort == self.quotas[preemptor.tenant].cohort
            assert d.pending_reasons[p.preemptor].code is PendingCode.PREEMPTION

    def _check_guarantees(self, d: Decision) -> None:
        if not self.policy.preemption:
            return
        book = QuotaBook(self.quotas, self.running.values())
        for p in self.pending.values():
            if p.id in d.binds or p.waiting_on or not book.within_guarantee(p):
                continue
            cohort = self.quotas[p.tenant].cohort
            reclaimable = [
                r
                for r in self.running.values()
                if r.terminating
                or (
                    r.borrowing
                    and r.preemptible
                    and r.tenant != p.tenant
                    and cohort is not None
                    and self.quotas[r.tenant].cohort == cohort
                )
            ]
            if not reclaimable or not fits(self.view, p.request, reclaimable):
                continue
            alone = decide(
                self.now, [p], self.running.values(), self.view, self.quotas, self.policy
            )
            assert (
                p.id in alone.binds or alone.pending_reasons[p.id].code is PendingCode.PREEMPTION
            ), alone.pending_reasons[p.id]

    def _apply(self, d: Decision) -> None:
        for p in d.preemptions:
            self.running[p.victim] = dataclasses.replace(self.running[p.victim], terminating=True)
            self.pending[p.preemptor] = dataclasses.replace(
                self.pending[p.preemptor], nominated=True
            )
        for job_id, placement in d.binds.items():
            p = self.pending.pop(job_id)
            assert len(placement.tasks) == p.request.tasks  # a gang is bound whole
            for t in placement.tasks:
                assert len(t.gpus) == p.request.gpus
                self.view.bind(t, p.request.cpu_milli, p.request.memory_bytes)  # raises if taken
            estimate = p.runtime_estimate_s
            self.running[job_id] = RunningJob(
                job_id,
                p.tenant,
                placement.tasks,
                self.now,
                p.priority,
                cpu_milli=p.request.cpu_milli,
                memory_bytes=p.request.memory_bytes,
                borrowing=job_id in d.borrowing,
                expected_end=None if estimate is None else self.now + estimate,
            )

    @invariant()
    def every_job_is_in_exactly_one_state(self) -> None:
        if not hasattr(self, "view"):
            return
        states = [set(self.pending), set(self.running), self.done]
        assert sum(len(s) for s in states) == len(set().union(*states)) == len(self.requests)

    @invariant()
    def no_gpu_is_held_twice(self) -> None:
        if not hasattr(self, "view"):
            return
        held: dict[tuple[str, int], int] = {}
        for r in self.running.values():
            for t in r.tasks:
                for s in t.gpus:
                    key = (t.node, s.gpu.index)
                    held[key] = held.get(key, 0) + s.milli
        assert all(v <= 1000 for v in held.values())
        free = sum(sum(slot.free) for slot in self.view.slots.values())
        assert free + sum(held.values()) == 12 * 1000


TestSchedulerMachine = SchedulerMachine.TestCase
TestSchedulerMachine.settings = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
