"""Agents (replicated): the leader's side of each node agent's hello, heartbeats and reports.

An agent's hello registers its node and reconciles: the exits it kept while it had no leader
are taken, attempts the cluster no longer owns (or is stopping) are stopped, the start of
what was launched just before a failover is recorded, and every task the cluster places on
the node that the agent neither runs nor reported ended is lost with the node (the job is
re-queued as an interruption). Heartbeats are kept in memory (the leader judges liveness from
them, `health.check_nodes`); one is committed only when it changes the node's state.
"""

from __future__ import annotations

import structlog

from gpu_platform.application.agent_hub import AttemptRef
from gpu_platform.application.control.health import Health
from gpu_platform.application.control.shared import LOG_NAME, Shared
from gpu_platform.domain.cluster_state import FinishJob, RegisterNode, RequeueJob, StartJob
from gpu_platform.domain.errors import DomainError, NotFound
from gpu_platform.domain.faults.health import HealthEvent, Heartbeat
from gpu_platform.domain.membership import registration_changes_nothing
from gpu_platform.domain.model.job import JobState
from gpu_platform.domain.model.node import Node, NodeState
from gpu_platform.ports.outbound.job_runner import ExitReport

__all__ = ["Agents"]

log = structlog.get_logger(LOG_NAME)


class Agents:
    """What the control plane does with what its agents tell it (the hub's AgentListener)."""

    def __init__(self, shared: Shared, health: Health) -> None:
        self._s = shared
        self._health = health

    def agent_connected(
        self,
        node: Node,
        running: tuple[AttemptRef, ...],
        exited: tuple[ExitReport, ...] = (),
    ) -> None:
        """Register the node, take the exits its agent kept while it had no leader, then
        reconcile: stop what the cluster no longer owns or is stopping, record the start of
        what was launched just before a failover, and treat every task the cluster places
        here that the agent neither runs nor reported ended as lost with the node (an
        interruption: the job is re-queued without using up its attempts)."""
        now = self._s.now()
        try:
            registered: Node | None = self._s.state.node(node.name)
        except NotFound:
            registered = None
        if not registration_changes_nothing(registered, node):  # after an election: a heartbeat
            self._s.execute(RegisterNode(node, now))
        self._s.beats[node.name] = now
        with self._s.lock:
            self._s.agents_seen.add(node.name)
        for report in exited:
            self._s.on_exit(report)
        known = {(r.job_id, r.epoch, r.rank) for r in running}
        known |= {(r.job_id, r.epoch, r.rank) for r in exited}
        reported = {(r.job_id, r.epoch) for r in running}
        to_start: list[tuple[str, int]] = []
        lost: dict[tuple[str, int], set[int]] = {}
        with self._s.lock:
            jobs = {j.id: j for j in self._s.state.open_jobs()}  # not O(every job kept)
            for job_id, epoch in sorted(reported):
                job = jobs.get(job_id)
                alloc = job.allocation if job is not None else None
                if job is None or alloc is None or alloc.epoch != epoch or not job.holds_gpus:
                    log.warning(
                        "stopping an attempt the cluster does not own",
                        job_id=job_id,
                        epoch=epoch,
                        node=node.name,
                    )
                    self._s.runner.stop(job_id, epoch, 0.0)
                elif job.releasing:
                    self._s.runner.stop(job_id, epoch, self._s.grace)
                elif job.state is JobState.SCHEDULED:
                    to_start.append((job_id, epoch))
            for job in jobs.values():
                alloc = job.allocation
                if not (job.holds_gpus and alloc is not None):
                    continue
                for rank, slot in enumerate(alloc.tasks):
                    if slot.node == node.name and (job.id, alloc.epoch, rank) not in known:
                        lost.setdefault((job.id, alloc.epoch), set()).add(rank)
        for job_id, epoch in to_start:
            try:
                self._s.execute(StartJob(job_id, epoch, self._s.now()))
            except DomainError as exc:
                log.warning("could not record a reconciled start", job_id=job_id, error=str(exc))
        for (job_id, epoch), ranks in sorted(lost.items()):
            if self._s.hub is not None:  # processes of an earlier agent there may linger
                self._s.hub.stop_on(node.name, job_id, epoch)
            self.lost(job_id, epoch, ranks, f"lost: the agent on {node.name} no longer runs it")
        self._s.wake.set()

    def lost(
        self, job_id: str, epoch: int, ranks: set[int], why: str, *, ended: bool = False
    ) -> None:
        """Tasks of an attempt vanished with their node's processes (an agent or control plane
        restarted): re-queue the job as an interruption, not a fault of its own work, and once
        none of its tasks runs any more, record its end so its GPUs are free."""
        with self._s.lock:
            job = self._s.state.job(job_id)
            run = self._s.runs.get((job_id, epoch))
            if run is not None:
                run.live -= ranks
            log.warning("tasks lost", job_id=job_id, epoch=epoch, ranks=sorted(ranks), why=why)
            if not job.releasing:
                self._s.execute(RequeueJob(job_id, epoch, self._s.now(), why))
            run = self._s.runs.get((job_id, epoch))
            if (run is None and ended) or (run is not None and not run.live):
                self._s.runs.pop((job_id, epoch), None)
                self._s.execute(FinishJob(job_id, epoch, None, self._s.now(), why))

    def agent_heartbeat(self, node: str) -> None:
        """Note a node's heartbeat in memory (the leader judges liveness from these); commit
        one only when it changes the node's state: a SUSPECT node is READY again (at most
        once per third of the suspect period while the commit is under way)."""
        now = self._s.now()
        self._s.beats[node] = now
        try:  # no lock: one dict read, and a stale answer only delays or repeats a commit
            suspect = self._s.state.node(node).state is NodeState.SUSPECT
        except NotFound:
            return
        last = self._s.beats_committed.get(node, 0.0)
        if not suspect or now - last < self._s.state.policy.node_suspect_after_s / 3:
            return
        self._s.beats_committed[node] = now
        self._health.report_health(Heartbeat(node))

    def agent_finding(self, event: HealthEvent) -> None:
        if isinstance(event, Heartbeat):
            self.agent_heartbeat(event.node)
        else:
            self._health.report_health(event)

    def accounted(self, node: str) -> bool:
        """We know what `node` runs: its agent said hello to this leader, or it is DOWN."""
        if node in self._s.agents_seen:
            return True
        try:
            return self._s.state.node(node).state is NodeState.DOWN
        except NotFound:
            return True
