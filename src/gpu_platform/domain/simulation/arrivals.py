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

Failure injection (`simulate_detailed(..., failures=Failures(...))`): every healthy GPU fails
at `rate_per_gpu_hour` (a Poisson process drawn from `random.Random(seed)`: the next failure
of the whole cluster is exponential at rate x all GPUs, and a draw that lands on a GPU already
down is skipped, which thins it to exactly the per-healthy-GPU rate). A failed GPU's job stops
at once and is queued again whole with its original submission time (issue 7's policy: a gang
restarts from the beginning); the GPU is held out of the view until it is repaired
`repair_s` later. A job that failed more than `max_restarts` times is abandoned (a long gang
at a high rate would otherwise restart forever: it is not checkpointed). The process is armed
only while a job runs or arrivals remain, so a run always ends; it ends when every job has
finished or was abandoned. Failed GPUs count as not allocated.

Node failures (`Failures(node_rate_per_hour=...)`): every healthy node fails at that rate, drawn
the same way from its own stream (`random.Random(f"nodes/{seed}")`, so adding node failures
does not move the GPU failures); all its GPUs leave the view at once, every job with a task on
it stops and is queued again whole (or abandoned, counting the same restarts), and the node
is back `node_repair_s` later. A GPU that was already down stays out until both are repaired.

Preemption exempt time (`SchedulerPolicy.min_runtime_s`, production's
`scheduler_preempt_exempt_seconds`): `decide` never picks a victim that started less than that
ago. Cycles run at events only (no periodic cycle), so a preemptor whose victims were still
exempt tries again at the next event.
`simulate` (no failures) is unchanged; `simulate_detailed` also returns each attempt and a
utilization sample per event time.
"""

from __future__ import annotations

import dataclasses
import heapq
import random
from collections.abc import Callable, Iterable, Mapping, Sequence

from gpu_platform.domain.model.gpu import Gpu
from gpu_platform.domain.model.node import Node
from gpu_platform.domain.placement import (
    ClusterView,
    GangPlacement,
    GpuRequest,
    GpuShare,
    Score,
    TaskPlacement,
)
from gpu_platform.domain.placement.fragmentation import NodeShape, fragmentation
from gpu_platform.domain.placement.view import DEFAULT_TYPICAL
from gpu_platform.domain.scheduling import (
    Decision,
    PendingJob,
    Quota,
    RunningJob,
    SchedulerPolicy,
    decide,
)
from gpu_platform.domain.simulation.arrivals_model import (
    ArrivalsDetail,
    ArrivalsResult,
    Attempt,
    Failures,
    Outcome,
    Sample,
    percentile,
    uniform_cluster,
)
from gpu_platform.domain.simulation.workload import SimJob

__all__ = [
    "ArrivalsDetail",
    "ArrivalsResult",
    "Attempt",
    "Failures",
    "Outcome",
    "Sample",
    "Scheduler",
    "percentile",
    "simulate",
    "simulate_detailed",
    "uniform_cluster",
]

_FINISH, _ARRIVE, _REPAIR, _FAIL, _NODE_REPAIR, _NODE_FAIL = 0, 1, 2, 3, 4, 5
_MILLI = 1000


def _hold(node: str, gpu: Gpu) -> TaskPlacement:
    """A placement that keeps a down GPU out of the view."""
    return TaskPlacement(node, (GpuShare(gpu, _MILLI),), (), (), Score(0, 0, 0, 0.0, 0, False))


def _pct(part: float, whole: float) -> float:
    return round(100.0 * part / whole, 2) if whole else 0.0


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


def simulate_detailed(
    nodes: Sequence[Node],
    jobs: Sequence[SimJob],
    policy: SchedulerPolicy,
    quotas: Mapping[str, Quota] | None = None,
    scheduler: Scheduler = decide,
    failures: Failures | None = None,
) -> ArrivalsDetail:
    """`simulate`, with optional GPU and node `failures`, returning the attempts and samples
    too."""
    run = _Run(nodes, jobs, policy, quotas or {}, scheduler, failures)
    result = run.run()
    return ArrivalsDetail(
        result,
        tuple(run.attempts),
        tuple(run.samples),
        run.total_milli // _MILLI,
        run.failure_count,
        round(run.lost_gpu_s / 3600, 3),
        round(run.down_gpu_s / 3600, 3),
        len(run.abandoned),
        run.node_failure_count,
        run.node_requeues,
    )


class _Run:
    def __init__(
        self,
        nodes: Sequence[Node],
        jobs: Sequence[SimJob],
        policy: SchedulerPolicy,
        quotas: Mapping[str, Quota],
        scheduler: Scheduler,
        failures: Failures | None = None,
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
        self.attempts: list[Attempt] = []
        self.samples: list[Sample] = []
        # failure injection: GPU key (node, index) -> its Gpu; who holds it; what is down
        self.failures = failures
        self.rng = random.Random(failures.seed if failures else 0)
        self.gpus = [(n.name, g) for n in nodes for g in n.gpus]
        self.holder: dict[tuple[str, int], str] = {}
        self.down: dict[tuple[str, int], tuple[float, TaskPlacement]] = {}
        self.armed = False
        self.arrivals_left = len(jobs)
        self.failure_count = 0
        self.restarts: dict[str, int] = {}
        self.abandoned: set[str] = set()
        self.lost_gpu_s = self.down_gpu_s = 0.0
        # node failures: node -> its GPUs; down node -> (since, hold) per GPU it holds out
        self.node_rng = random.Random(f"nodes/{failures.seed if failures else 0}")
        self.gpus_of = {n.name: n.gpus for n in nodes}
        self.node_names = list(self.gpus_of)
        self.node_down: dict[str, list[tuple[float, TaskPlacement]]] = {}
        self.node_armed = False
        self.node_failure_count = self.node_requeues = 0

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

    def _stop(self, job_id: str, now: float, outcome: str) -> None:
        r = self.running.pop(job_id)
        for t in r.tasks:
            self.view.release(t)
            for share in t.gpus:
                self.holder.pop((t.node, share.gpu.index), None)
        self.allocated -= r.gpu_milli
        self.attempts.append(
            Attempt(job_id, r.tenant, r.gpu_milli // _MILLI, r.started_at, now, outcome)
        )

    def _start(self, job_id: str, placement: GangPlacement, now: float, borrowing: bool) -> None:
        self.pending.pop(job_id)
        j = self.by_id[job_id]
        for t in placement.tasks:
            self.view.bind(t)
            for share in t.gpus:
                self.holder[(t.node, share.gpu.index)] = job_id
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
            submitted_at=j.submit_s,
        )
        self.allocated += r.gpu_milli
        heapq.heappush(self.heap, (now + j.duration_s, _FINISH, attempt, job_id))

    def _fragmented(self) -> float:
        lost = 0.0
        for slot in self.view.slots.values():
            if not slot.free:
                continue
            model = slot.node.gpus[0].model if slot.node.gpus else ""
            shape = NodeShape(model, 1 << 40, 1 << 40, tuple(sorted(slot.free, reverse=True)))
            lost += fragmentation(shape, DEFAULT_TYPICAL)
        return round(lost / _MILLI, 3)

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
                self._stop(p.victim, now, Outcome.PREEMPTED)
                self._queue(p.victim, self.seq)
                self.seq += 1
                self.preemptions += 1
            for job_id, placement in d.binds.items():
                self._start(job_id, placement, now, job_id in d.borrowing)
            if not d.preemptions:
                return

    def _arm(self, now: float) -> None:
        """Draw the next cluster-wide failure time, while there is work that could fail."""
        f = self.failures
        if f is None or not (self.running or self.arrivals_left):
            return
        if f.rate_per_gpu_hour > 0 and not self.armed:
            rate = f.rate_per_gpu_hour * len(self.gpus) / 3600.0
            heapq.heappush(self.heap, (now + self.rng.expovariate(rate), _FAIL, 0, ""))
            self.armed = True
        if f.node_rate_per_hour > 0 and not self.node_armed:
            rate = f.node_rate_per_hour * len(self.node_names) / 3600.0
            heapq.heappush(self.heap, (now + self.node_rng.expovariate(rate), _NODE_FAIL, 0, ""))
            self.node_armed = True

    def _hit(self, job_id: str, now: float, f: Failures, outcome: str) -> bool:
        """Stop a job a failure hit: queued again (True) or abandoned past `max_restarts`."""
        r = self.running[job_id]
        self.lost_gpu_s += r.gpu_milli / _MILLI * (now - r.started_at)
        restarts = self.restarts[job_id] = self.restarts.get(job_id, 0) + 1
        if restarts > f.max_restarts:
            self._stop(job_id, now, Outcome.ABANDONED)
            self.abandoned.add(job_id)
            return False
        self._stop(job_id, now, outcome)
        self._queue(job_id, self.seq)
        self.seq += 1
        return True

    def _fail(self, now: float, f: Failures) -> None:
        self.armed = False
        node, gpu = self.gpus[self.rng.randrange(len(self.gpus))]
        key = (node, gpu.index)
        if key in self.down or node in self.node_down:
            return  # thinning: only healthy GPUs fail
        self.failure_count += 1
        job_id = self.holder.get(key)
        if job_id is not None:
            self._hit(job_id, now, f, Outcome.FAILED)
        hold = _hold(node, gpu)
        self.view.bind(hold)
        self.down[key] = (now, hold)
        heapq.heappush(self.heap, (now + f.repair_s, _REPAIR, 0, f"{node}/{gpu.index}"))

    def _repair(self, now: float, tag: str) -> None:
        node, _, index = tag.rpartition("/")
        since, hold = self.down.pop((node, int(index)))
        self.down_gpu_s += now - since
        if node in self.node_down:  # stays out, now for its node, until the node is back
            self.node_down[node].append((now, hold))
        else:
            self.view.release(hold)

    def _fail_node(self, now: float, f: Failures) -> None:
        self.node_armed = False
        node = self.node_names[self.node_rng.randrange(len(self.node_names))]
        if node in self.node_down:
            return  # thinning: only healthy nodes fail
        self.node_failure_count += 1
        gpus = self.gpus_of[node]
        hit = [self.holder[(node, g.index)] for g in gpus if (node, g.index) in self.holder]
        for job_id in dict.fromkeys(hit):  # a job once, even with several GPUs here
            self.node_requeues += self._hit(job_id, now, f, Outcome.NODE_FAILED)
        holds = []
        for g in gpus:
            if (node, g.index) not in self.down:  # a down GPU joins when it is repaired
                hold = _hold(node, g)
                self.view.bind(hold)
                holds.append((now, hold))
        self.node_down[node] = holds
        heapq.heappush(self.heap, (now + f.node_repair_s, _NODE_REPAIR, 0, node))

    def _repair_node(self, now: float, node: str) -> None:
        for since, hold in self.node_down.pop(node):
            self.view.release(hold)
            self.down_gpu_s += now - since

    def _down_gpus(self) -> int:
        return len(self.down) + sum(len(h) for h in self.node_down.values())

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
                    self.arrivals_left -= 1
                elif kind == _FAIL and self.failures is not None:
                    self._fail(now, self.failures)
                elif kind == _REPAIR:
                    self._repair(now, job_id)
                elif kind == _NODE_FAIL and self.failures is not None:
                    self._fail_node(now, self.failures)
                elif kind == _NODE_REPAIR:
                    self._repair_node(now, job_id)
                elif job_id in self.running and self.attempt[job_id] == tag:
                    # else: the end of an attempt that was preempted or failed
                    self._stop(job_id, now, Outcome.FINISHED)
                    self.finish[job_id] = now
            self._cycle(now)
            self.samples.append(
                Sample(
                    now,
                    self.allocated // _MILLI,
                    self._down_gpus(),
                    len(self.pending),
                    len(self.running),
                    self._fragmented(),
                    len(self.node_down),
                )
            )
            if self.failures is not None:
                if len(self.finish) + len(self.abandoned) == len(self.jobs):
                    break  # only failures and repairs are left
                self._arm(now)
        for since, _hold in self.down.values():
            self.down_gpu_s += last - since
        for holds in self.node_down.values():
            self.down_gpu_s += sum(last - since for since, _hold in holds)
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
