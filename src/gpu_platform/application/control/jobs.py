"""Jobs: reading jobs, arrays, logs and the cluster's GPUs, and cancelling or killing jobs.

Submits are the control plane's own (its command path). Reads here pass the leadership's
read barrier first (replicated: linearizable on the leader, `LeaderElsewhere` elsewhere);
a cancel is one command, and the attempt it stops keeps its GPUs until its process ends.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from gpu_platform.application.control.shared import Shared
from gpu_platform.domain.cluster_state import CancelArray, CancelJob
from gpu_platform.domain.errors import InvalidRequest, NotFound
from gpu_platform.domain.model.job import Job, JobState
from gpu_platform.domain.model.node import Inventory
from gpu_platform.ports.inbound.job_service import ArrayInfo, ClusterStatus, GpuInfo

__all__ = ["Jobs"]


class Jobs:
    """The JobService's reads and stops. `inventory` is what this server found at start-up
    (its source and notes describe the cluster); `read_barrier` is the leadership's."""

    def __init__(
        self, shared: Shared, inventory: Inventory, *, read_barrier: Callable[[], None]
    ) -> None:
        self._s = shared
        self._inventory = inventory
        self._read_barrier = read_barrier

    def get_array(self, array_id: str) -> ArrayInfo:
        self._read_barrier()
        with self._s.lock:
            return self.array_info(array_id)

    def cancel_array(self, array_id: str, reason: str = "cancelled by user") -> ArrayInfo:
        with self._s.lock:
            self._s.execute(CancelArray(array_id, self._s.now(), reason))
            info = self.array_info(array_id)
        self._s.wake.set()
        return info

    def array_info(self, array_id: str) -> ArrayInfo:
        """The array and its tasks as the state holds them (call it under the lock)."""
        state = self._s.state
        return ArrayInfo.of(array_id, state.array(array_id), state.array_tasks(array_id))

    def get(self, job_id: str) -> Job:
        self._read_barrier()
        with self._s.lock:
            return self._s.state.job(job_id)

    def list_jobs(self, state: str | None = None) -> list[Job]:
        if state is not None and state.upper() not in JobState.__members__:
            raise InvalidRequest("state", f"unknown job state {state!r}")
        self._read_barrier()
        with self._s.lock:
            jobs = list(self._s.state.jobs())
        return [j for j in jobs if state is None or j.state == state.upper()]

    def cancel(self, job_id: str, reason: str = "cancelled by user") -> Job:
        with self._s.lock:
            self._s.execute(CancelJob(job_id, self._s.now(), reason))
            job = self._s.state.job(job_id)
        self._s.wake.set()
        return job

    def kill(self, job_id: str, reason: str = "killed by user") -> Job:
        """`cancel` with a zero grace period: the attempt gets SIGKILL at once. On a job
        already cancelled whose attempt is still in its grace period, it escalates: SIGKILL."""
        with self._s.lock:
            job = self._s.state.job(job_id)
            stopping = [e for j, e in self._s.runs if j == job_id]
            if job.terminal and stopping:
                for epoch in stopping:
                    self._s.runner.stop(job_id, epoch, 0.0)
                return job
            grace, self._s.grace = self._s.grace, 0.0
            try:
                return self.cancel(job_id, reason)
            finally:
                self._s.grace = grace

    def logs(
        self, job_id: str, attempt: int | None = None, tail_bytes: int = 65536, rank: int = 0
    ) -> str:
        job = self.get(job_id)
        _check_rank(job, rank)
        which = job.attempt if attempt is None else attempt
        if which < 1 or which > job.attempt:
            if attempt is None:
                return ""
            raise NotFound("attempt", f"{job_id}#{attempt}")
        return self._s.runner.read_log(job_id, which, tail_bytes, rank)

    def log_from(
        self, job_id: str, attempt: int, offset: int, max_bytes: int = 65536, rank: int = 0
    ) -> tuple[bytes, bool]:
        job = self.get(job_id)
        _check_rank(job, rank)
        if attempt < 1 or attempt > job.attempt:
            raise NotFound("attempt", f"{job_id}#{attempt}")
        live = job.attempt == attempt and job.holds_gpus
        return self._s.runner.read_log_from(job_id, attempt, offset, max_bytes, rank), live

    def gpus(self) -> list[GpuInfo]:
        self._read_barrier()
        with self._s.lock:
            return [
                GpuInfo(
                    g,
                    self._s.state.gpu_state(g),
                    self._s.state.holder(g),
                    self._s.state.reason(g.uuid),
                    self._s.state.hot(g),
                    self._s.state.share_book.shares(g.uuid),
                )
                for n in self._s.state.nodes
                for g in n.gpus
            ]

    def status(self) -> ClusterStatus:
        self._read_barrier()
        with self._s.lock:
            jobs = Counter(str(j.state) for j in self._s.state.jobs())
            free = sum(len(v.free) for v in self._s.state.node_views())
            nodes = self._s.state.nodes
            shared = [len(s) for s in self._s.state.share_book.gpus.values()]
        source = "agents"  # replicated: the nodes are what agents registered
        if self._s.replication is None:  # embedded: the inventory this server found
            source = self._inventory.source
        elif self._s.local_node is not None:  # with this host's own agent
            source = self._inventory.source + (" + agents" if len(nodes) > 1 else "")
        return ClusterStatus(
            inventory_source=source,
            simulated=self._inventory.simulated,
            nodes=len(nodes),
            gpus_total=sum(len(n.gpus) for n in nodes),
            gpus_free=free,
            jobs_by_state=dict(jobs),
            notes=self._inventory.notes,
            gpus_shared=len(shared),
            shares=sum(shared),
        )


def _check_rank(job: Job, rank: int) -> None:
    if not 0 <= rank < job.spec.tasks:
        raise InvalidRequest("rank", f"job {job.id} has tasks 0..{job.spec.tasks - 1}, not {rank}")
