"""The control plane driving the scheduler policies (docs/scheduling.md): preemption through
the runner, quotas with reclaim, backfill, dependencies, and why every waiting job waits."""

from __future__ import annotations

import pytest

from gpu_platform.adapters.outbound.sim import default_node
from gpu_platform.application.control_plane import ControlPlane
from gpu_platform.domain.errors import InvalidRequest
from gpu_platform.domain.faults.health import XidReport
from gpu_platform.domain.model.job import JobSpec, JobState
from gpu_platform.domain.model.node import Inventory
from gpu_platform.domain.scheduling import PendingCode, QueueOrder, Quota, SchedulerPolicy
from gpu_platform.testing.cluster_procs import wait_until
from gpu_platform.testing.fakes import (
    FakeJobRunner,
    InMemoryJobStore,
    InMemoryQuotaStore,
    ManualClock,
    RecordingPublisher,
    SequentialJobIds,
)

ALL_ON = SchedulerPolicy(
    order=QueueOrder.PRIORITY,
    aging_rate=0.0,
    fair_share=True,
    backfill=True,
    preemption=True,
)


class Rig:
    def __init__(
        self,
        policy: SchedulerPolicy = ALL_ON,
        quotas: dict[str, Quota] | None = None,
        quota_store: InMemoryQuotaStore | None = None,
        nodes: int = 1,
    ) -> None:
        inventory = Inventory(
            tuple(default_node(f"n{i}") for i in range(nodes)), source="sim", simulated=True
        )
        self.runner = FakeJobRunner()
        self.clock = ManualClock()
        self.plane = ControlPlane(
            inventory,
            InMemoryJobStore(),
            self.runner,
            self.clock,
            SequentialJobIds(),
            RecordingPublisher(),
            scheduler_policy=policy,
            quotas=quotas,
            quota_store=quota_store,
        )

    def submit(self, gpus: int, **kw: object) -> str:
        return self.plane.submit(JobSpec(("fake-forever",), gpus=gpus, **kw)).id  # type: ignore[arg-type]

    def state(self, job_id: str) -> JobState:
        return self.plane.get(job_id).state

    def cycle(self) -> int:
        self.clock.advance(1)
        return self.plane.schedule_once()


@pytest.fixture
def rig() -> Rig:
    return Rig()


def test_a_higher_priority_job_preempts_a_lower_one_gracefully_and_it_is_requeued(rig: Rig) -> None:
    low = rig.submit(8, priority=0)
    rig.cycle()
    high = rig.submit(8, priority=10)
    assert rig.cycle() == 0  # the victim is being stopped; its GPUs stay held
    victim = rig.plane.get(low)
    assert victim.state is JobState.QUEUED and victim.releasing
    assert victim.reason == f"preempted: priority (for job {high})"
    why = rig.plane.why(high)
    assert why is not None and why.code is PendingCode.PREEMPTION
    assert [s.job_id for s in rig.runner.live()] == [low]  # asked to stop, not yet ended
    rig.runner.deliver()  # SIGTERM lands
    assert rig.cycle() == 1
    assert rig.state(high) is JobState.RUNNING
    assert rig.state(low) is JobState.QUEUED
    assert rig.plane.get(low).attempt == 1  # it keeps its attempt count
    why_low = rig.plane.why(low)
    assert why_low is not None and why_low.code in (PendingCode.CAPACITY, PendingCode.PREEMPTION)


def test_a_non_preemptible_job_is_never_a_victim(rig: Rig) -> None:
    low = rig.submit(8, priority=0, preemptible=False)
    rig.cycle()
    high = rig.submit(8, priority=10)
    rig.cycle()
    rig.runner.deliver()
    rig.cycle()
    assert rig.state(low) is JobState.RUNNING
    why = rig.plane.why(high)
    assert why is not None and why.code is PendingCode.CAPACITY


def test_a_tenant_reclaims_its_quota_from_a_borrower() -> None:
    quotas = {"a": Quota(4, cohort="c"), "b": Quota(4, cohort="c")}
    rig = Rig(quotas=quotas)
    borrowed = [rig.submit(1, tenant="b") for _ in range(8)]
    rig.cycle()
    assert all(rig.state(j) is JobState.RUNNING for j in borrowed)
    assert sum(rig.plane.get(j).borrowing for j in borrowed) == 4
    mine = [rig.submit(1, tenant="a") for _ in range(2)]
    for _ in range(3):  # one preemptor per cycle (bounded work), victims stop in between
        rig.cycle()
        rig.runner.deliver()
    rig.cycle()
    assert all(rig.state(j) is JobState.RUNNING for j in mine)
    reclaimed = [j for j in borrowed if rig.plane.get(j).state is JobState.QUEUED]
    assert len(reclaimed) == 2  # exactly what "a" needed back, borrowed work only
    assert all(rig.plane.get(j).reason.startswith("preempted: reclaim") for j in reclaimed)
    assert all(rig.plane.why(j) is not None for j in reclaimed)


def test_a_tenant_at_its_quota_waits_with_the_reason() -> None:
    rig = Rig(quotas={"a": Quota(2, borrowing_limit=0)})
    first = [rig.submit(1, tenant="a") for _ in range(2)]
    third = rig.submit(1, tenant="a")
    rig.cycle()
    assert all(rig.state(j) is JobState.RUNNING for j in first)
    why = rig.plane.why(third)
    assert why is not None and why.code is PendingCode.QUOTA
    assert "a" in why.message
    assert rig.plane.why(first[0]) is None  # running jobs do not wait


def test_backfill_runs_a_short_job_beside_the_reservation_and_holds_a_long_one(rig: Rig) -> None:
    running = rig.submit(4, time_limit_s=100.0)
    rig.cycle()
    head = rig.submit(8)
    short = rig.submit(2, time_limit_s=10.0)
    long_ = rig.submit(2)
    rig.cycle()
    assert rig.state(running) is JobState.RUNNING
    assert rig.state(head) is JobState.QUEUED
    assert rig.state(short) is JobState.RUNNING  # ends before the head's reservation
    why_long = rig.plane.why(long_)
    assert why_long is not None and why_long.code is PendingCode.RESERVATION
    why_head = rig.plane.why(head)
    assert why_head is not None and why_head.code is PendingCode.CAPACITY


def test_strict_fifo_lets_nothing_pass_a_job_that_does_not_fit() -> None:
    rig = Rig(policy=SchedulerPolicy())
    rig.submit(4)
    rig.cycle()
    head = rig.submit(8)
    small = rig.submit(1)
    rig.cycle()
    assert rig.state(small) is JobState.QUEUED
    why = rig.plane.why(small)
    assert why is not None and why.code is PendingCode.RESERVATION
    assert rig.plane.why(head) is not None


def test_a_job_waits_for_its_dependency_and_is_cancelled_when_it_fails(rig: Rig) -> None:
    first = rig.plane.submit(JobSpec(("fake-exit", "0"), gpus=1)).id
    second = rig.submit(1, depends_on=(first,))
    doomed_parent = rig.plane.submit(JobSpec(("fake-exit", "3"), gpus=1)).id
    doomed = rig.submit(1, depends_on=(doomed_parent,))
    rig.cycle()
    why = rig.plane.why(second)
    assert why is not None and why.code is PendingCode.DEPENDENCY
    rig.runner.deliver()  # first completes, doomed_parent fails
    rig.cycle()
    assert rig.state(second) is JobState.RUNNING
    assert rig.state(doomed) is JobState.CANCELLED
    assert rig.plane.get(doomed).reason == f"dependency {doomed_parent} ended FAILED"


def test_a_job_held_by_its_dependency_says_why_before_any_cycle_has_run(rig: Rig) -> None:
    first = rig.submit(1)
    second = rig.submit(1, depends_on=(first,))  # no cycle since: it needs none to say why
    why = rig.plane.why(second)
    assert why is not None and why.code is PendingCode.DEPENDENCY
    assert why.message == f"waiting for {first}"
    assert rig.plane.why(first) is None  # waits for the cycle a runnable submit wakes


def test_a_job_held_by_its_dependency_starts_when_the_scheduler_only_runs_on_wakes() -> None:
    inventory = Inventory((default_node("n0"),), source="sim", simulated=True)
    runner = FakeJobRunner()
    plane = ControlPlane(
        inventory,
        InMemoryJobStore(),
        runner,
        ManualClock(),
        SequentialJobIds(),
        RecordingPublisher(),
        schedule_interval_s=3600.0,  # no timed cycle in this test: only wakes run one
    )
    plane.start()
    try:
        first = plane.submit(JobSpec(("fake-exit", "0"), gpus=1)).id
        assert wait_until(lambda: plane.get(first).state is JobState.RUNNING, timeout=30)
        second = plane.submit(JobSpec(("fake-forever",), gpus=1, depends_on=(first,))).id
        runner.deliver()  # first completes: its finish wakes the cycle that starts second
        assert wait_until(lambda: plane.get(second).state is JobState.RUNNING, timeout=30)
    finally:
        plane.shutdown()


def test_an_unknown_dependency_is_refused_naming_the_field(rig: Rig) -> None:
    with pytest.raises(InvalidRequest) as err:
        rig.submit(1, depends_on=("nope",))
    assert err.value.field == "depends_on"


def test_a_cycle_with_jobs_running_on_nodes_out_of_the_view_does_not_raise() -> None:
    # as after a failover, before agents reconnect: a drained node keeps its running job but
    # leaves the placement view; a job that does not fit asks for a backfill reservation
    rig = Rig(nodes=2)
    first = rig.submit(8)
    rig.cycle()
    (node,) = rig.plane.get(first).allocation.nodes  # type: ignore[union-attr]
    rig.plane.node_action(node, "drain", reason="test", actor="ops")
    rig.submit(6)
    rig.cycle()
    waiting = rig.submit(4)
    rig.cycle()  # raised KeyError: the reservation released `first` on a node not in the view
    why = rig.plane.why(waiting)
    assert rig.state(first) is JobState.RUNNING and why is not None
    assert why.code is PendingCode.CAPACITY


def test_another_tenants_job_as_a_dependency_is_refused_exactly_like_an_unknown_id(
    rig: Rig,
) -> None:
    theirs = rig.plane.submit(JobSpec(("fake-forever",), gpus=1, tenant="b")).id
    errors = []
    for dep in (theirs, "j-nope"):
        with pytest.raises(InvalidRequest) as err:
            rig.plane.submit(JobSpec(("fake-forever",), gpus=1, tenant="a", depends_on=(dep,)))
        errors.append((err.value.field, str(err.value).replace(dep, "ID")))
    assert errors[0] == errors[1] == ("depends_on", "depends_on: no such job: ID")


def test_quotas_set_at_run_time_are_stored_and_win_over_configured_ones() -> None:
    store = InMemoryQuotaStore()
    rig = Rig(quotas={"a": Quota(1)}, quota_store=store)
    rig.plane.set_quota("a", Quota(3, cohort="x"))
    rig.plane.set_quota("b", Quota(2))
    rig.plane.set_quota("b", None)
    again = Rig(quotas={"a": Quota(1)}, quota_store=store)
    assert again.plane.quotas() == {"a": Quota(3, cohort="x")}


def test_a_job_in_retry_backoff_says_so() -> None:
    rig = Rig()
    job = rig.plane.submit(JobSpec(("fake-forever",), gpus=1, retry_backoff_s=60.0)).id
    rig.cycle()
    alloc = rig.plane.get(job).allocation
    assert alloc is not None
    rig.plane.report_health(XidReport(alloc.node, alloc.gpu_indices[0], 79))  # GPU fell off
    rig.runner.deliver()
    rig.cycle()
    assert rig.state(job) is JobState.QUEUED
    why = rig.plane.why(job)
    assert why is not None and why.code is PendingCode.BACKOFF
    assert "retry backoff" in why.message


def test_placement_wishes_reach_the_engine() -> None:
    from gpu_platform.adapters.outbound.sim.profiles import profile_node

    inventory = Inventory(
        (profile_node("hgx-8x-pcie", "pcie"), profile_node("dgx-a100", "dgx")),
        source="sim",
        simulated=True,
    )
    plane = ControlPlane(
        inventory,
        InMemoryJobStore(),
        FakeJobRunner(),
        ManualClock(),
        SequentialJobIds(),
        RecordingPublisher(),
        scheduler_policy=ALL_ON,
    )
    pcie_model = inventory.nodes[0].gpus[0].model
    linked = plane.submit(JobSpec(("fake-forever",), gpus=4, nvlink="required")).id
    on_pcie = plane.submit(JobSpec(("fake-forever",), gpus=2, gpu_models=(pcie_model,))).id
    plane.schedule_once()
    assert {plane.get(linked).allocation.node, plane.get(on_pcie).allocation.node} == {  # type: ignore[union-attr]
        "dgx",
        "pcie",
    }
    assert plane.get(linked).allocation.node == "dgx"  # type: ignore[union-attr]
    with pytest.raises(InvalidRequest) as err:
        plane.submit(JobSpec(("fake-forever",), gpus=1, gpu_models=("V100",)))
    assert err.value.field == "gpu_models"
    with pytest.raises(ValueError, match="nvlink must be one of"):
        JobSpec(("x",), nvlink="always")
