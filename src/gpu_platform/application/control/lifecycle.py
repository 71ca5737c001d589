"""Lifecycle: recover at start-up, run the scheduling loop's thread, shut down by policy.

Child-process policy (documented in docs/operations.md): on graceful shutdown every running
attempt is first recorded as requeued (or failed, per `shutdown_policy`), then stopped with
SIGTERM, a grace period and SIGKILL of its process group. On start-up, attempts that held GPUs
belonged to a previous incarnation: their leftover processes are reaped, running jobs are
requeued and the GPUs freed. Replicated, jobs outlive a server (they run on agents): only the
attempts of this process's own agent are settled by the policy, while this server leads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Literal

import structlog

from gpu_platform.application.consistency import LeaderElsewhere
from gpu_platform.application.control.shared import LOG_NAME, Shared
from gpu_platform.application.raft_node import RaftNodeError
from gpu_platform.domain.cluster_state import AbortJob, Command, FinishJob, RequeueJob
from gpu_platform.domain.errors import DomainError
from gpu_platform.domain.model.job import Job

__all__ = ["Lifecycle", "ShutdownPolicy"]

log = structlog.get_logger(LOG_NAME)

ShutdownPolicy = Literal["requeue", "fail"]


class Lifecycle:
    """Starts and stops the control plane. `loop` is the scheduling loop (run on its own
    thread until `shared.stopping` is set); `start_due_resets` resets GPUs left RESETTING."""

    def __init__(
        self,
        shared: Shared,
        *,
        loop: Callable[[], None],
        start_due_resets: Callable[[], None],
        shutdown_policy: ShutdownPolicy,
    ) -> None:
        self._s = shared
        self._loop = loop
        self._start_due_resets = start_due_resets
        self._shutdown_policy = shutdown_policy
        self._shut_down = False
        self._thread: threading.Thread | None = None

    def recover(self) -> list[str]:
        """Requeue attempts left by a previous incarnation (reaping their processes)."""
        recovered = []
        with self._s.lock:
            for job in self._s.state.jobs():
                if not (job.holds_gpus and job.allocation is not None):
                    continue
                epoch = job.allocation.epoch
                killed = self._s.runner.reap(job.id, epoch)
                reason = f"attempt {job.attempt} lost: control plane restarted"
                if killed:
                    reason += f" ({killed} leftover processes killed)"
                if job.releasing:  # it was being stopped; its process is gone now
                    self._s.execute(FinishJob(job.id, epoch, None, self._s.now(), reason))
                else:  # the runner does not know it, so the GPUs are freed at once
                    self._s.execute(RequeueJob(job.id, epoch, self._s.now(), reason))
                    recovered.append(job.id)
        if recovered:
            log.warning("recovered lost attempts", jobs=recovered)
        self._start_due_resets()  # GPUs that were RESETTING when we stopped
        return recovered

    def start(self) -> None:
        """Recover, then run the scheduler loop on a dedicated thread (it also launches jobs).
        Replicated, there is nothing to recover here: the loop acts while this server leads,
        and agents tell the leader what still runs."""
        if self._s.replication is None:
            self.recover()
        self._thread = threading.Thread(target=self._loop, name="scheduler", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        """Record running attempts per the shutdown policy, stop them, stop the loop (once).
        Replicated, jobs outlive this server (they run on agents): the loop stops, and only
        the attempts of this process's own agent are settled by the policy."""
        with self._s.lock:
            if self._shut_down:
                return
            self._shut_down = True
        if self._s.replication is not None:
            self._s.stopping.set()
            self._s.wake.set()
            if self._thread is not None:
                self._thread.join(timeout=30)
            self._settle_local_node()
            return
        with self._s.lock:
            self._s.stopping.set()
            for job in self._s.state.jobs():
                if job.holds_gpus and job.allocation is not None and not job.releasing:
                    self._s.execute(self._shutdown_command(job))
        self._s.wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._s.runner.stop_all(self._s.grace)

    def _shutdown_command(self, job: Job) -> Command:
        """What `shutdown_policy` does to a running attempt: re-queue it or end it FAILED."""
        assert job.allocation is not None
        epoch, now, why = job.allocation.epoch, self._s.now(), "control plane shut down"
        if self._shutdown_policy == "requeue":
            return RequeueJob(job.id, epoch, now, why)
        return AbortJob(job.id, epoch, now, why)

    def _settle_local_node(self) -> None:
        """Replicated with an agent in this process: that agent's tasks go away with us, so
        while we still lead, settle its node's attempts by the shutdown policy (as the
        embedded control plane does) and wait, bounded, until their ends are recorded."""
        node = self._s.local_node
        if node is None or not self._s.leading:
            return
        with self._s.lock:
            here = [
                j
                for j in self._s.state.jobs()
                if j.holds_gpus and j.allocation is not None and node in j.allocation.nodes
            ]
        for job in here:
            if job.releasing:
                continue
            try:
                self._s.execute(self._shutdown_command(job))
            except (DomainError, RaftNodeError, LeaderElsewhere) as exc:
                log.warning("could not settle a job at shutdown", job_id=job.id, error=str(exc))
        ids = {j.id for j in here}
        deadline = time.monotonic() + self._s.grace + 5.0
        while time.monotonic() < deadline:
            with self._s.lock:
                if not any(self._s.state.job(j).holds_gpus for j in ids):
                    return
            time.sleep(0.05)
        log.warning("jobs still running at shutdown", node=node, jobs=sorted(ids))

    def wait_ready(self, timeout: float) -> bool:
        """Replicated: wait until a leader is known and, with an agent in this process, its
        node is registered and that agent connected. True when ready in time."""
        if self._s.replication is None:
            return True
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._s.replication.leader_id() is not None and self._local_ready():
                return True
            time.sleep(0.02)
        return False

    def _local_ready(self) -> bool:
        node = self._s.local_node
        if node is None:
            return True
        with self._s.lock:
            known = any(n.name == node for n in self._s.state.nodes)
        if not known:
            return False
        return not self._s.leading or self._s.hub is None or node in self._s.hub.ready_nodes()
