"""The per-cycle examination window, shared fairly across tenants.

A cycle examines (asks placement about) at most `policy.max_jobs` jobs. Jobs that cannot run
whatever the cluster looks like - unmet dependencies, over quota, larger than the whole
cluster - are answered without placement and do not use the window, so one tenant's 1,100
blocked jobs cannot hide another tenant's runnable ones.

When more candidates (jobs without unmet dependencies that could fit the cluster) wait than
the window holds, each tenant gets a max-min fair slice of it (water-filling: a tenant with
fewer candidates than an equal share keeps them all, the rest is split among the others). Once
a tenant's slice is used, its remaining jobs are deferred (`FairQueue.defer`); deferred jobs
are examined after every tenant's slice, in queue order (starvation tier, priority,
submission; fair share aside), while the window has room (slices of tenants whose candidates
turned out blocked by quota are not wasted). Without contention (candidates <= window)
nothing is deferred and the queue order is unchanged. The oldest job past the aging bound is
still examined first: it is its tenant's first job, within any slice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpu_platform.domain.scheduling.model import PendingJob

__all__ = ["Window", "fair_slices"]


def fair_slices(candidates: Mapping[str, int], size: int) -> dict[str, int]:
    """Max-min fair split of `size` slots among tenants wanting `candidates[t]` each. Every
    tenant with a candidate gets at least one slot, so with more tenants than slots the
    slices add up to more than `size` (`Window` still stops at `size`)."""
    slices: dict[str, int] = {}
    left = size
    wanting = sorted((n, t) for t, n in candidates.items() if n > 0)
    while wanting:
        share = max(1, left // len(wanting))
        n, tenant = wanting[0]
        if n <= share:  # fully served: its unused share goes to the others
            slices[tenant] = n
            left -= n
            wanting.pop(0)
            continue
        for _, t in wanting:
            slices[t] = share
        break
    return slices


class Window:
    """Counts examined jobs against `size` and each tenant's fair slice."""

    def __init__(self, jobs: Iterable[PendingJob], size: int, cluster_gpu_milli: int) -> None:
        self.size = size
        self.examined = 0
        self._per_tenant: dict[str, int] = {}
        self._slices: dict[str, int] | None = None
        jobs = list(jobs)
        if len(jobs) <= size:  # no contention possible
            return
        candidates: dict[str, int] = {}
        for job in jobs:  # this loop sees every job: `gpu_milli` inlined
            r = job.request
            if not job.waiting_on and r.tasks * r.gpus * r.gpu_milli <= cluster_gpu_milli:
                candidates[job.tenant] = candidates.get(job.tenant, 0) + 1
        if sum(candidates.values()) > size:
            self._slices = fair_slices(candidates, size)

    @property
    def full(self) -> bool:
        return self.examined >= self.size

    def admits(self, tenant: str) -> bool:
        """May a job of `tenant` be examined in the first pass (window and slice not used)?"""
        if self.full:
            return False
        if self._slices is None:
            return True
        return self._per_tenant.get(tenant, 0) < self._slices.get(tenant, 1)

    def count(self, tenant: str) -> None:
        self.examined += 1
        self._per_tenant[tenant] = self._per_tenant.get(tenant, 0) + 1
