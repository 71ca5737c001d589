"""Queue order: FIFO or priority with aging, a starvation bound, weighted DRF across tenants.

Every pending job gets a key, smallest first:

    (tier, -effective_priority, dominant_share / weight, submitted_at, seq)

- tier 0: the job has waited at least `aging_bound_s`; inside tier 0 only (submitted_at, seq)
  count, so the oldest starving job is always examined first. Tier 1: jobs victims were
  preempted for (`nominated`), so they get what their victims free. Tier 2: everything else.
- effective priority (PRIORITY order) = priority + floor(aging_rate x wait); 0 under FIFO.
- dominant share (fair share on) = max(GPU, CPU, memory share of the cluster the tenant's
  running and just-bound jobs hold) / weight: Dominant Resource Fairness. It changes as the
  cycle binds, so tenants are merged through a heap of per-tenant queue heads and a tenant's
  head is re-keyed after each of its binds. Other tenants' keys do not change.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from gpu_platform.domain.scheduling.model import PendingJob, QueueOrder, SchedulerPolicy

__all__ = ["Capacity", "FairQueue", "effective_priority"]

_Key = tuple[int, int, float, float, int]


def effective_priority(job: PendingJob, now: float, policy: SchedulerPolicy) -> int:
    """priority + floor(aging_rate x seconds waited) under PRIORITY order; 0 under FIFO."""
    if policy.order is QueueOrder.FIFO:
        return 0
    wait = max(0.0, now - job.submitted_at)
    return job.priority + math.floor(policy.aging_rate * wait)


def starving(job: PendingJob, now: float, policy: SchedulerPolicy) -> bool:
    bound = policy.aging_bound_s
    return bound is not None and now - job.submitted_at >= bound


@dataclass(frozen=True, slots=True)
class Capacity:
    """Cluster totals DRF divides by (GPU milli, CPU milli, memory bytes; 0 = not counted)."""

    gpu: int
    cpu: int
    memory: int


def _first(entry: tuple[tuple[int, int, float, int], PendingJob]) -> tuple[int, int, float, int]:
    return entry[0]


class FairQueue:
    """Pending jobs in policy order; `charge` tells it a tenant got more resources."""

    def __init__(
        self,
        jobs: Iterable[PendingJob],
        now: float,
        policy: SchedulerPolicy,
        capacity: Capacity,
        usage: dict[str, tuple[int, int, int]],
    ) -> None:
        self._policy = policy
        self._capacity = capacity
        self._usage = usage
        self._now = now
        per_tenant: dict[str, list[tuple[tuple[int, int, float, int], PendingJob]]] = {}
        # the keys of effective_priority() and starving(), inlined: this loop sees every job
        bound = policy.aging_bound_s if policy.aging_bound_s is not None else math.inf
        by_priority = policy.order is QueueOrder.PRIORITY
        rate = policy.aging_rate
        floor = math.floor
        for job in jobs:
            submitted = job.submitted_at
            if now - submitted >= bound:
                base = (0, 0, submitted, job.seq)
            else:
                tier = 1 if job.nominated else 2
                if by_priority:
                    boost = floor(rate * (now - submitted)) if submitted < now else 0
                    base = (tier, -job.priority - boost, submitted, job.seq)
                else:
                    base = (tier, 0, submitted, job.seq)
            entries = per_tenant.get(job.tenant)
            if entries is None:
                entries = per_tenant[job.tenant] = []
            entries.append((base, job))
        self._queues: dict[str, list[tuple[tuple[int, int, float, int], PendingJob]]] = {}
        self._pos: dict[str, int] = {}
        self._heap: list[tuple[_Key, str]] = []
        for tenant, entries in per_tenant.items():
            entries.sort(key=_first)
            self._queues[tenant] = entries
            self._pos[tenant] = 0
            self._push(tenant)

    def share(self, tenant: str) -> float:
        """Weighted dominant share of `tenant` (0 when fair share is off)."""
        if not self._policy.fair_share:
            return 0.0
        gpu, cpu, mem = self._usage.get(tenant, (0, 0, 0))
        cap = self._capacity
        dominant = max(
            gpu / cap.gpu if cap.gpu else 0.0,
            cpu / cap.cpu if cap.cpu else 0.0,
            mem / cap.memory if cap.memory else 0.0,
        )
        return dominant / self._policy.weight(tenant)

    def _push(self, tenant: str) -> None:
        pos = self._pos[tenant]
        entries = self._queues[tenant]
        if pos < len(entries):
            (tier, prio, submitted, seq), _ = entries[pos]
            share = 0.0 if tier == 0 else self.share(tenant)
            heapq.heappush(self._heap, ((tier, prio, share, submitted, seq), tenant))

    def charge(self, tenant: str, gpu: int, cpu: int, memory: int) -> None:
        """Account a bind to `tenant`; its next head is keyed with the new share."""
        g, c, m = self._usage.get(tenant, (0, 0, 0))
        self._usage[tenant] = (g + gpu, c + cpu, m + memory)

    def __iter__(self) -> Iterator[PendingJob]:
        """Jobs in order. A tenant's next job is keyed when its previous one was yielded, so
        `charge` calls made in between are seen."""
        while self._heap:
            _, tenant = heapq.heappop(self._heap)
            pos = self._pos[tenant]
            job = self._queues[tenant][pos][1]
            self._pos[tenant] = pos + 1
            yield job
            self._push(tenant)

    def defer(self, tenant: str) -> list[tuple[tuple[int, int, float, int], PendingJob]]:
        """Take `tenant`'s job just yielded and those not yet yielded out of the queue (it
        yields no more of them), each with its key without the share: (tier, -effective
        priority, submitted, seq)."""
        pos = self._pos[tenant]
        entries = self._queues[tenant]
        self._pos[tenant] = len(entries)
        return entries[pos - 1 :]

    def rest(self) -> Iterator[PendingJob]:
        """Jobs not yet yielded (any order)."""
        for tenant, entries in self._queues.items():
            for _, job in entries[self._pos[tenant] :]:
                yield job
