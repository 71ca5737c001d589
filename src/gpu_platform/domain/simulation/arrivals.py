"""Arrivals and departures on simulated time, driving the real scheduler (`decide`).

An event heap holds arrivals and completions; at each event time the completions are applied
first, then the arrivals, then one scheduling cycle runs (a second one at the same time when
the first chose victims, so the preemptor can bind). Victims stop at once (no grace period)
and are queued again with their original submission time; they restart from the beginning.
A preemptor is marked `nominated` until it binds.
Nothing sleeps: time jumps from event to event.

Metrics: `alloc_pct` = time-weighted mean share of GPUs allocated while at least one job
waits (the issue's "mean GPU allocation while the queue is non-empty"), over the whole run;
`arrivals_alloc_pct` the same up to the last arrival (without the drain, where only the
largest jobs are left); queueing delay = first start - submit; JCT = completion - submit.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpu_platform.domain.model.gpu import Gpu, Vendor
from gpu_platform.domain.model.node import Node, NumaNode
from gpu_platform.domain.placement import ClusterView, GangPlacement, GpuRequest
from gpu_platform.domain.scheduling import (
    Decision,
    PendingJob,
    Quota,
    RunningJob,
    SchedulerPolicy,
    decide,
)
from gpu_platform.domain.simulation.workload import SimJob

__all__ = ["ArrivalsResult", "Scheduler", "percentile", "simulate", "uniform_cluster"]

_FINISH, _ARRIVE = 0, 1


def uniform_cluster(nodes: int, gpus: int = 8, nodes_per_rack: int = 16) -> list[Node]:
    """`nodes` identical hosts of `gpus` 80 GiB GPUs on two NUMA nodes, racks and leaves of
    `nodes_per_rack` nodes (labels `rack`, `leaf`)."""
    out = []
    for i in range(nodes):
        name = f"sim{i:04d}"
        half = max(1, gpus // 2)
        devices = tuple(
            Gpu(f"GPU-{name}-{g}", g, name, Vendor.NVIDIA, "H100", 80 << 30, numa_node=g // half)
            for g in range(gpus)
        )
        group = f"g{i // nodes_per_rack}"
        out.append(
            Node(
                name,
                devices,
                numa_nodes=(NumaNode(0), NumaNode(1)),
                labels=(("leaf", group), ("rack", group)),
            )
        )
    return out


def _pct(part: float, whole: float) -> float:
    return round(100.0 * part / whole, 2) if whole else 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))]


@dataclass(frozen=True, slots=True)
class ArrivalsResult:
    """Outcome of one run. Times in seconds."""

    jobs: int
    finished: int
    alloc_pct: float
    arrivals_alloc_pct: float
    queue_delay_p50_s: float
    queue_delay_p99_s: float
    jct_p50_s: float
    jct_p99_s: float
    cycles: int
    preemptions: int
    end_s: float


Scheduler = Callable[
    [
        float,
        Iterable[PendingJob],
        Iterable[RunningJob],
        ClusterView,
        Mapping[str, Quota],
        SchedulerPolicy,
    ],
    Decision,
]


def simulate(
    nodes: Sequence[Node],
    jobs: Sequence[SimJob],
    policy: SchedulerPolicy,
    quotas: Mapping[str, Quota] | None = None,
    scheduler: Scheduler = decide,
) -> ArrivalsResult:
    """Run `jobs` to completion on `nodes` under `policy` (and `quotas`). `scheduler` is
    `decide` or a wrapper of it (a benchmark times each cycle that way)."""
    return _Run(nodes, jobs, policy, quotas or {}, scheduler).run()


class _Run:
    def __init__(
        self,
        nodes: Sequence[Node],
        jobs: Sequence[SimJob],
        policy: SchedulerPolicy,
        quotas: Mapping[str, Quota],
        scheduler: Scheduler,
    ) -> None:
        self.scheduler = scheduler
        self.view = ClusterView(nodes)
        self.total_milli = sum(len(n.gpus) for n in nodes) * 1000
        self.jobs = jobs
        self.policy = policy
        self.quotas = quotas
        self.by_id = {j.id: j for j in jobs}
        self.heap: list[tuple[float, int, int, str]] = []
        for seq, j in enumerate(jobs):
            heapq.heappush(self.heap, (j.submit_s, _ARRIVE, seq, j.id))
        self.pending: dict[str, PendingJob] = {}
        self.running: dict[str, RunningJob] = {}
        self.attempt: dict[str, int] = {}
        self.first_start: dict[str, float] = {}
        self.finish: dict[str, float] = {}
        self.allocated = 0
        self.cycles = self.preemptions = 0
        self.seq = len(jobs)

    def _queue(self, job_id: str, seq: int) -> None:
        j = self.by_id[job_id]
        self.pending[job_id] = PendingJob(
            job_id,
            j.tenant,
            GpuRequest(gpus=j.gpus_per_task, tasks=j.tasks),
            j.submit_s,
            seq,
            priority=j.priority,
            runtime_estimate_s=j.time_limit_s,
        )

    def _stop(self, job_id: str) -> None:
        r = self.running.pop(job_id)
        for t in r.tasks:
            self.view.release(t)
        self.allocated -= r.gpu_milli

    def _start(self, job_id: str, placement: GangPlacement, now: float, borrowing: bool) -> None:
        self.pending.pop(job_id)
        j = self.by_id[job_id]
        for t in placement.tasks:
            self.view.bind(t)
        attempt = self.attempt[job_id] = self.attempt.get(job_id, 0) + 1
        self.first_start.setdefault(job_id, now)
        limit = j.time_limit_s
        r = self.running[job_id] = RunningJob(
            job_id,
            j.tenant,
            placement.tasks,
            now,
            j.priority,
            borrowing=borrowing,
            expected_end=None if limit is None else now + limit,
        )
        self.allocated += r.gpu_milli
        heapq.heappush(self.heap, (now + j.duration_s, _FINISH, attempt, job_id))

    def _cycle(self, now: float) -> None:
        for _ in range(2):  # a second cycle lets a preemptor bind where its victims were
            d = self.scheduler(
                now,
                self.pending.values(),
                self.running.values(),
                self.view,
                self.quotas,
                self.policy,
            )
            self.cycles += 1
            for p in d.preemptions:
                nominee = self.pending[p.preemptor]
                self.pending[p.preemptor] = dataclasses.replace(nominee, nominated=True)
                self._stop(p.victim)
                self._queue(p.victim, self.seq)
                self.seq += 1
                self.preemptions += 1
            for job_id, placement in d.binds.items():
                self._start(job_id, placement, now, job_id in d.borrowing)
            if not d.preemptions:
                return

    def run(self) -> ArrivalsResult:
        heap = self.heap
        last_arrival = max((j.submit_s for j in self.jobs), default=0.0)
        busy = waiting = arrivals_busy = arrivals_waiting = 0.0
        last = 0.0
        while heap:
            now = heap[0][0]
            if self.pending:
                busy += self.allocated * (now - last)
                waiting += now - last
                if now <= last_arrival:
                    arrivals_busy += self.allocated * (now - last)
                    arrivals_waiting += now - last
            last = now
            while heap and heap[0][0] == now:
                _, kind, tag, job_id = heapq.heappop(heap)
                if kind == _ARRIVE:
                    self._queue(job_id, tag)
                elif job_id in self.running and self.attempt[job_id] == tag:
                    self._stop(job_id)  # else: the end of an attempt that was preempted
                    self.finish[job_id] = now
            self._cycle(now)
        delays = [t - self.by_id[j].submit_s for j, t in self.first_start.items()]
        jcts = [t - self.by_id[j].submit_s for j, t in self.finish.items()]
        return ArrivalsResult(
            jobs=len(self.jobs),
            finished=len(self.finish),
            alloc_pct=_pct(busy, self.total_milli * waiting),
            arrivals_alloc_pct=_pct(arrivals_busy, self.total_milli * arrivals_waiting),
            queue_delay_p50_s=percentile(delays, 50),
            queue_delay_p99_s=percentile(delays, 99),
            jct_p50_s=percentile(jcts, 50),
            jct_p99_s=percentile(jcts, 99),
            cycles=self.cycles,
            preemptions=self.preemptions,
            end_s=last,
        )
