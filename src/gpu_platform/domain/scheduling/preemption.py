"""Victim selection: the cheapest set of running jobs whose removal lets a job be placed.

Who may be a victim of preemptor P (never a non-preemptible job, never one already stopping):
- priority: victim.priority < P.priority, and (no quotas, or same tenant, or the victim runs
  on borrowed quota or for a tenant without a quota) - a tenant's guaranteed work is never
  taken by another tenant's priority;
- reclaim: P's tenant is within its nominal quota with P, and the victim is another tenant's
  job that borrows quota in P's cohort, or belongs to a tenant with no quota at all (such a
  tenant only ever runs on idle capacity: no guarantee, no cap).

Cost of a set, smallest wins: (GPUs, highest victim priority, total priority, total progress,
ids). Gangs are victims whole: releasing a victim releases every task of it.

Jobs already stopping are released first at no cost: if P then fits, it only waits for them.
A single-task P is placed on one node, so only victims on that node matter: for each node the
subsets of its (at most `max_victims_per_node` cheapest) candidates are tried in cost order,
skipping subsets that cannot free enough GPUs on the node, and the first that lets
`place_task` fit there is that node's best; the cheapest over nodes wins. Exact when no node
has more candidates than the cap. A gang is greedy: candidates in cost order are released
until `place()` fits, then each chosen victim, most expensive first, is put back if P still
fits without it (a minimal set, not always the cheapest).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

from gpu_platform.domain.placement.engine import place, place_task
from gpu_platform.domain.placement.request import GangPlacement, TaskPlacement
from gpu_platform.domain.scheduling.ledger import Ledger
from gpu_platform.domain.scheduling.model import PendingJob, PreemptionCause, RunningJob
from gpu_platform.domain.scheduling.quota import QuotaBook
from gpu_platform.domain.topology.cross_node import NodeLevel

__all__ = ["VictimSet", "cause_for", "find_victims", "set_cost"]

_Cost = tuple[int, int, int, float, tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class VictimSet:
    """Victims (empty: P only waits for stopping jobs) and P's placement once they are gone."""

    victims: tuple[RunningJob, ...]
    causes: Mapping[str, PreemptionCause]
    placement: GangPlacement


def cause_for(job: PendingJob, victim: RunningJob, quotas: QuotaBook) -> PreemptionCause | None:
    """Why `victim` may be preempted for `job`, or None if it may not."""
    if not victim.preemptible or victim.terminating:
        return None
    # a tenant without a quota holds nothing guaranteed, whenever its job was admitted
    quota_less = quotas.active and not quotas.has_quota(victim.tenant)
    unguaranteed = victim.borrowing or quota_less
    if victim.priority < job.priority and (
        not quotas.active or victim.tenant == job.tenant or unguaranteed
    ):
        return PreemptionCause.PRIORITY
    if (
        quotas.active
        and unguaranteed
        and victim.tenant != job.tenant
        and quotas.within_guarantee(job)
        and (
            quota_less
            or (
                quotas.cohort_of(job.tenant) is not None
                and quotas.cohort_of(victim.tenant) == quotas.cohort_of(job.tenant)
            )
        )
    ):
        return PreemptionCause.RECLAIM
    return None


def set_cost(victims: Sequence[RunningJob]) -> _Cost:
    return (
        sum(v.gpu_milli for v in victims),
        max((v.priority for v in victims), default=0),
        sum(v.priority for v in victims),
        sum(v.progress for v in victims),
        tuple(sorted(v.id for v in victims)),
    )


def find_victims(
    job: PendingJob,
    running: Sequence[RunningJob],
    ledger: Ledger,
    quotas: QuotaBook,
    excluded: set[str],
    max_per_node: int,
) -> VictimSet | None:
    """The cheapest victim set for `job`, or None. The view is left as it was."""
    causes: dict[str, PreemptionCause] = {}
    candidates: list[RunningJob] = []
    stopping = [r for r in running if r.terminating]
    for r in running:
        if r.id in excluded:
            continue
        cause = cause_for(job, r, quotas)
        if cause is not None:
            causes[r.id] = cause
            candidates.append(r)
    if not candidates and not stopping:
        return None
    mark = ledger.mark()
    try:
        for r in stopping:
            ledger.release_job(r)
        if stopping and ledger.free_milli >= job.gpu_milli:
            free = place(job.request, ledger.view)
            if isinstance(free, GangPlacement):
                return VictimSet((), {}, free)
        if not candidates:
            return None
        if job.request.tasks == 1:
            found = _single(job, candidates, ledger, max_per_node)
        else:
            found = _gang(job, candidates, ledger)
        if found is None:
            return None
        victims, placement = found
        return VictimSet(victims, {v.id: causes[v.id] for v in victims}, placement)
    finally:
        ledger.undo_to(mark)


def _node_free(ledger: Ledger, node: str) -> int:
    return sum(ledger.view.slots[node].free)


def _single(
    job: PendingJob, candidates: list[RunningJob], ledger: Ledger, max_per_node: int
) -> tuple[tuple[RunningJob, ...], GangPlacement] | None:
    need = job.request.gpus * job.request.gpu_milli
    by_node: dict[str, list[RunningJob]] = {}
    for r in candidates:
        for node in {t.node for t in r.tasks}:
            if node in ledger.view.slots:
                by_node.setdefault(node, []).append(r)
    best: tuple[_Cost, tuple[RunningJob, ...], TaskPlacement] | None = None
    for node in sorted(by_node):
        victims = sorted(by_node[node], key=lambda v: set_cost([v]))[:max_per_node]
        base = _node_free(ledger, node)
        on_node = {
            v.id: sum(s.milli for t in v.tasks if t.node == node for s in t.gpus) for v in victims
        }
        if base + sum(on_node.values()) < need:
            continue  # even all of them would not free enough on this node
        subsets = [
            c
            for n in range(1, len(victims) + 1)
            for c in combinations(victims, n)
            if base + sum(on_node[v.id] for v in c) >= need
        ]
        subsets.sort(key=set_cost)
        for subset in subsets:
            cost = set_cost(subset)
            if best is not None and cost >= best[0]:
                break
            mark = ledger.mark()
            for v in subset:
                ledger.release_job(v)
            task = place_task(job.request, ledger.view, within=[node])
            ledger.undo_to(mark)
            if task is not None:
                best = (cost, subset, task)
                break
    if best is None:
        return None
    return best[1], GangPlacement((best[2],), NodeLevel.SAME_NODE)


def _gang(
    job: PendingJob, candidates: list[RunningJob], ledger: Ledger
) -> tuple[tuple[RunningJob, ...], GangPlacement] | None:
    ordered = sorted(candidates, key=lambda v: set_cost([v]))
    chosen: list[RunningJob] = []
    mark = ledger.mark()
    placement: GangPlacement | None = None
    for v in ordered:
        ledger.release_job(v)
        chosen.append(v)
        if ledger.free_milli < job.gpu_milli or not ledger.could_fit(job.request):
            continue
        found = place(job.request, ledger.view)
        if isinstance(found, GangPlacement):
            placement = found
            break
    if placement is None:
        ledger.undo_to(mark)
        return None
    # minimise: put back the most expensive victims first while the job still fits
    for v in sorted(chosen, key=lambda v: set_cost([v]), reverse=True):
        inner = ledger.mark()
        ledger.bind_job(v)
        again = place(job.request, ledger.view) if ledger.could_fit(job.request) else None
        if isinstance(again, GangPlacement):
            chosen.remove(v)
            placement = again
        else:
            ledger.undo_to(inner)
    ledger.undo_to(mark)
    return tuple(sorted(chosen, key=lambda v: v.id)), placement
