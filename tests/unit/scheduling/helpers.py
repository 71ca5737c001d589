"""Small clusters and jobs for the scheduler's unit tests."""

from __future__ import annotations

from collections.abc import Mapping

from gpu_platform.adapters.outbound.sim.inventory import build_node
from gpu_platform.domain.model.node import Node
from gpu_platform.domain.placement import ClusterView, GangPlacement, GpuRequest, place
from gpu_platform.domain.scheduling import (
    Decision,
    PendingJob,
    Quota,
    RunningJob,
    SchedulerPolicy,
    decide,
)


def cluster(n: int, gpus: int = 8, racks: int = 1) -> list[Node]:
    return [
        build_node(
            f"n{i}", gpus, numa_nodes=2, labels={"rack": f"r{i % racks}", "leaf": f"l{i % racks}"}
        )
        for i in range(n)
    ]


def job(
    id: str,
    gpus: int = 1,
    *,
    tenant: str = "a",
    tasks: int = 1,
    priority: int = 0,
    at: float = 0.0,
    seq: int | None = None,
    estimate: float | None = None,
    waiting_on: frozenset[str] = frozenset(),
) -> PendingJob:
    return PendingJob(
        id,
        tenant,
        GpuRequest(gpus=gpus, tasks=tasks),
        submitted_at=at,
        seq=seq if seq is not None else int(at * 1000),
        priority=priority,
        runtime_estimate_s=estimate,
        waiting_on=waiting_on,
    )


def start(
    view: ClusterView,
    pending: PendingJob,
    *,
    now: float = 0.0,
    end: float | None = None,
    preemptible: bool = True,
    borrowing: bool = False,
    progress: float = 0.0,
    terminating: bool = False,
    on: GangPlacement | None = None,
) -> RunningJob:
    """Place and bind `pending` in `view` (or bind `on`) and describe it as running."""
    placement = on if on is not None else place(pending.request, view)
    assert isinstance(placement, GangPlacement), placement
    for task in placement.tasks:
        view.bind(task, pending.request.cpu_milli, pending.request.memory_bytes)
    return RunningJob(
        pending.id,
        pending.tenant,
        placement.tasks,
        started_at=now,
        priority=pending.priority,
        preemptible=preemptible,
        borrowing=borrowing,
        progress=progress,
        expected_end=end,
        terminating=terminating,
    )


def run_cycle(
    view: ClusterView,
    pending: list[PendingJob],
    running: list[RunningJob] | None = None,
    *,
    now: float = 100.0,
    quotas: Mapping[str, Quota] | None = None,
    policy: SchedulerPolicy | None = None,
) -> Decision:
    before = {name: view.signature(name) for name in view.slots}
    decision = decide(now, pending, running or [], view, quotas or {}, policy or SchedulerPolicy())
    assert {name: view.signature(name) for name in view.slots} == before  # view untouched
    assert set(decision.binds).isdisjoint(decision.pending_reasons)
    assert set(decision.binds) | set(decision.pending_reasons) == {j.id for j in pending}
    return decision
