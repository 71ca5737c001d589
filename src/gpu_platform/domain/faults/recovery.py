"""Fault and operation handlers of the cluster state machine (a mixin of `ClusterState`).

Theory of operation: each handler judges one finding or operator action with the fault policy
(`faults.policy`), moves the GPU or node through its table (`faults.gpu_fsm`, `faults.node_fsm`)
and carries out STOP_JOBS: every live attempt on the GPU or node is stopped, and its job is
re-queued while it has attempts left (after the restart backoff) or fails with the fault as its
reason. Stopped attempts keep their GPUs until their process is reported ended, exactly as for
a cancel, so two live copies of one job never exist. Split from `cluster_state` only for size;
it shares that module's state and is not used on its own.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from gpu_platform.domain.errors import Conflict, NotFound
from gpu_platform.domain.events import (
    DomainEvent,
    EccAlertRaised,
    GpuStateChanged,
    GpuThermalChanged,
    JobAborted,
    JobRequeued,
    NodeStateChanged,
    XidReported,
)
from gpu_platform.domain.faults.commands import (
    CheckNodes,
    CompleteGpuReset,
    HardwareRecord,
    NodeHeartbeat,
    ReportEcc,
    ReportThermal,
    ReportXid,
    SetGpuAdmin,
    SetNodeAdmin,
)
from gpu_platform.domain.faults.gpu_fsm import GpuEffect, GpuInput, gpu_transition
from gpu_platform.domain.faults.job_fsm import JobEffect, JobInput, transition
from gpu_platform.domain.faults.node_fsm import NodeEffect, NodeInput, node_transition
from gpu_platform.domain.faults.policy import (
    EccVerdict,
    FaultPolicy,
    XidClass,
    classify_xid,
    ecc_verdict,
    retry_delay_s,
    thermal_hot,
)
from gpu_platform.domain.model.gpu import Gpu, GpuState
from gpu_platform.domain.model.job import Job, JobState
from gpu_platform.domain.model.node import Node, NodeState

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["FaultHandlers"]

LIVE = (JobState.SCHEDULED, JobState.RUNNING)
SICK = (GpuState.DEGRADED, GpuState.RESETTING, GpuState.OFFLINE)
_GPU_ADMIN = {"drain": GpuInput.DRAIN, "offline": GpuInput.OFFLINE, "online": GpuInput.ONLINE}
_NODE_ADMIN = {"drain": NodeInput.DRAIN, "offline": NodeInput.OFFLINE, "online": NodeInput.ONLINE}
_XID_INPUT = {
    XidClass.UNHEALTHY: GpuInput.DEGRADE,
    XidClass.RESET: GpuInput.NEED_RESET,
    XidClass.REBOOT: GpuInput.LOST,
}


class FaultHandlers:
    """The fault/operation half of ClusterState; see the module docstring."""

    _nodes: dict[str, Node]
    _jobs: dict[str, Job]
    _held: dict[str, str]
    policy: FaultPolicy
    _reasons: dict[str, str]
    _hot: dict[str, float]
    _ecc_seen: dict[str, int]
    _ecc_alerted: set[str]
    _last_heartbeat: dict[str, float]

    if TYPE_CHECKING:

        def holders(self, uuid: str) -> tuple[str, ...]: ...

        def node(self, name: str) -> Node: ...

        def _release(self, job: Job, effects: JobEffect) -> None: ...

        def _touch(self, node: str) -> None: ...

    def _gpu(self, node_name: str, index: int) -> Gpu:
        node = self.node(node_name)
        try:
            return node.gpu(index)
        except KeyError:
            raise NotFound("gpu", f"{node_name}:{index}") from None

    def _put_gpu(self, gpu: Gpu) -> None:
        node = self._nodes[gpu.node]
        gpus = tuple(gpu if g.index == gpu.index else g for g in node.gpus)
        self._nodes[node.name] = replace(node, gpus=gpus)

    def _restore_hardware(self, records: Iterable[HardwareRecord]) -> None:
        by_uuid = {g.uuid: g for n in self._nodes.values() for g in n.gpus}
        for rec in records:
            if rec.kind == "gpu" and rec.name in by_uuid:
                self._put_gpu(replace(by_uuid[rec.name], state=GpuState(rec.state)))
                self._reasons[rec.name] = rec.reason
            elif rec.kind == "node" and rec.name in self._nodes:
                node = self._nodes[rec.name]
                self._nodes[rec.name] = replace(node, state=NodeState(rec.state))
                self._reasons[rec.name] = rec.reason

    def _live_on(self, uuids: set[str]) -> list[Job]:
        """Jobs with a live attempt (not being stopped) holding any of `uuids`."""
        ids = {h for u in uuids for h in self.holders(u)}  # every sharer of a shared GPU
        return [
            self._jobs[i]
            for i in sorted(ids)
            if self._jobs[i].state in LIVE and not self._jobs[i].releasing
        ]

    def _live_on_node(self, node: str) -> list[Job]:
        """Jobs with a live attempt (not being stopped) on `node` — GPU-less ones too."""
        return [
            j
            for j in self._jobs.values()
            if j.state in LIVE
            and not j.releasing
            and j.allocation is not None
            and node in j.allocation.nodes
        ]

    def _fault_stop(
        self, job: Job, reason: str, now: float, *, fault: bool = True
    ) -> list[DomainEvent]:
        """Stop the live attempt of `job`. A `fault` uses up one of its `max_attempts`: the job is
        re-queued (after the backoff) while some are left, else it fails. Anything else (an
        operator's forced offline) re-queues it at once and counts as an interruption."""
        if job.state not in LIVE or job.releasing or job.allocation is None:
            return []
        stop = job.allocation
        if not fault:
            job, effects = transition(job, JobInput.PREEMPT, now, reason=reason)
            self._release(job, effects)
            job, _ = transition(job, JobInput.REQUEUE, now, reason=reason)
            self._jobs[job.id] = replace(job, interruptions=job.interruptions + 1)
            return [JobRequeued(job.id, stop, reason)]
        faults = job.faults + 1
        if faults < job.spec.max_attempts:
            job, effects = transition(job, JobInput.PREEMPT, now, reason=reason)
            self._release(job, effects)
            job, _ = transition(job, JobInput.REQUEUE, now, reason=reason)
            delay = retry_delay_s(self.policy, job.spec.retry_backoff_s, faults)
            self._jobs[job.id] = replace(job, faults=faults, not_before=now + delay)
            return [JobRequeued(job.id, stop, reason)]
        why = f"{reason}; no attempts left ({faults} of {job.spec.max_attempts} ended by faults)"
        job, effects = transition(job, JobInput.ABORT, now, reason=why)
        self._release(job, effects)
        self._jobs[job.id] = replace(job, faults=faults)
        return [JobAborted(job.id, stop, why)]

    def _gpu_input(
        self, gpu: Gpu, event: GpuInput, reason: str, now: float, *, fault: bool = True
    ) -> list[DomainEvent]:
        new, effects = gpu_transition(gpu.state, event)
        events: list[DomainEvent] = []
        if new is not gpu.state:
            self._put_gpu(replace(gpu, state=new))
            self._reasons[gpu.uuid] = reason
            events.append(GpuStateChanged(gpu.node, gpu.index, gpu.uuid, gpu.state, new, reason))
        if GpuEffect.STOP_JOBS in effects:
            where = f"gpu {gpu.node}:{gpu.index}"
            for job in self._live_on({gpu.uuid}):
                events += self._fault_stop(job, f"{where}: {reason}", now, fault=fault)
        return events

    def _node_input(
        self, node: Node, event: NodeInput, reason: str, now: float, *, fault: bool = True
    ) -> list[DomainEvent]:
        new, effects = node_transition(node.state, event)
        events: list[DomainEvent] = []
        if new is not node.state:
            self._nodes[node.name] = replace(node, state=new)
            self._reasons[node.name] = reason
            events.append(NodeStateChanged(node.name, node.state, new, reason))
        if NodeEffect.STOP_JOBS in effects:
            for job in self._live_on_node(node.name):
                events += self._fault_stop(job, f"node {node.name}: {reason}", now, fault=fault)
        return events

    def _xid(self, cmd: ReportXid) -> list[DomainEvent]:
        gpu = self._gpu(cmd.node, cmd.gpu_index)
        cls = classify_xid(cmd.xid, self.policy)
        events: list[DomainEvent] = [XidReported(gpu.node, gpu.index, cmd.xid, str(cls))]
        reason = f"xid {cmd.xid} ({cls})"
        if cls is XidClass.JOB:
            where = f"gpu {gpu.node}:{gpu.index}"
            for job in self._live_on({gpu.uuid}):
                events += self._fault_stop(job, f"{where}: {reason}", cmd.now)
        elif cls in _XID_INPUT:
            events += self._gpu_input(gpu, _XID_INPUT[cls], reason, cmd.now)
        return events

    def _ecc(self, cmd: ReportEcc) -> list[DomainEvent]:
        gpu = self._gpu(cmd.node, cmd.gpu_index)
        verdict = ecc_verdict(
            self.policy,
            corrected=cmd.corrected,
            uncorrected=cmd.uncorrected,
            remap_pending=cmd.remap_pending,
            remap_failed=cmd.remap_failed,
            seen_uncorrected=self._ecc_seen.get(gpu.uuid, 0),
            alerted=gpu.uuid in self._ecc_alerted,
        )
        self._ecc_seen[gpu.uuid] = cmd.uncorrected
        if verdict is EccVerdict.OFFLINE:
            return self._gpu_input(gpu, GpuInput.LOST, "row remapping failed", cmd.now)
        if verdict is EccVerdict.RESET:
            why = "row remap pending" if cmd.remap_pending else "uncorrectable ECC errors"
            return self._gpu_input(gpu, GpuInput.NEED_RESET, f"{why} ({cmd.uncorrected})", cmd.now)
        if verdict is EccVerdict.ALERT:
            self._ecc_alerted.add(gpu.uuid)
            return [EccAlertRaised(gpu.node, gpu.index, cmd.corrected)]
        return []

    def _thermal(self, cmd: ReportThermal) -> list[DomainEvent]:
        gpu = self._gpu(cmd.node, cmd.gpu_index)
        was = gpu.uuid in self._hot
        hot = thermal_hot(
            self.policy, was_hot=was, temperature_c=cmd.temperature_c, reasons=cmd.clock_reasons
        )
        if hot:
            self._hot[gpu.uuid] = cmd.temperature_c
        else:
            self._hot.pop(gpu.uuid, None)
        if hot is was:
            return []
        self._touch(gpu.node)
        return [GpuThermalChanged(gpu.node, gpu.index, hot, cmd.temperature_c)]

    def _reset_done(self, cmd: CompleteGpuReset) -> list[DomainEvent]:
        gpu = self._gpu(cmd.node, cmd.gpu_index)
        if self.holders(gpu.uuid) and gpu.state is GpuState.RESETTING:
            raise Conflict(f"gpu {gpu.node}:{gpu.index} is still held; it cannot have been reset")
        if cmd.ok:
            self._ecc_seen[gpu.uuid] = 0  # a reset clears the volatile counters
            return self._gpu_input(gpu, GpuInput.RESET_OK, "reset passed", cmd.now)
        why = f"reset failed: {cmd.detail}" if cmd.detail else "reset failed"
        return self._gpu_input(gpu, GpuInput.RESET_FAILED, why, cmd.now)

    def _gpu_admin(self, cmd: SetGpuAdmin) -> list[DomainEvent]:
        gpu = self._gpu(cmd.node, cmd.gpu_index)
        event = _GPU_ADMIN[cmd.action]
        if cmd.action == "offline" and cmd.force:
            event = GpuInput.OFFLINE_FORCE
        elif cmd.action == "offline":
            busy = self._live_on({gpu.uuid})
            if busy:
                raise Conflict(
                    f"gpu {gpu.node}:{gpu.index} runs job {busy[0].id}: drain it, or offline "
                    "with force to stop and re-queue the job"
                )
        return self._gpu_input(gpu, event, cmd.reason, cmd.now, fault=False)

    def _node_admin(self, cmd: SetNodeAdmin) -> list[DomainEvent]:
        node = self.node(cmd.node)
        event = _NODE_ADMIN[cmd.action]
        if cmd.action == "offline" and cmd.force:
            event = NodeInput.OFFLINE_FORCE
        elif cmd.action == "offline":
            busy = self._live_on_node(node.name)
            if busy:
                raise Conflict(
                    f"node {node.name} runs {len(busy)} jobs ({busy[0].id}, ...): drain it, or "
                    "offline with force to stop and re-queue them"
                )
        if cmd.action == "online":
            self._last_heartbeat[node.name] = cmd.now
        return self._node_input(node, event, cmd.reason, cmd.now, fault=False)

    def _heartbeat(self, cmd: NodeHeartbeat) -> list[DomainEvent]:
        node = self.node(cmd.node)
        self._last_heartbeat[node.name] = cmd.now
        return self._node_input(node, NodeInput.HEARTBEAT, "heartbeat", cmd.now)

    def _check_nodes(self, cmd: CheckNodes) -> list[DomainEvent]:
        events: list[DomainEvent] = []
        if cmd.silent is None:
            ages = [
                (name, cmd.now - self._last_heartbeat.setdefault(name, cmd.now))
                for name in list(self._nodes)
            ]
        else:
            ages = [(name, s) for name, s in cmd.silent if name in self._nodes]
        for name, silent in ages:
            node = self._nodes[name]
            if silent >= self.policy.node_down_after_s and node.state is not NodeState.DOWN:
                why = f"no heartbeat for {silent:g}s"
                events += self._node_input(node, NodeInput.TIMEOUT, why, cmd.now)
            elif silent >= self.policy.node_suspect_after_s and node.state is NodeState.READY:
                why = f"no heartbeat for {silent:g}s"
                events += self._node_input(node, NodeInput.MISSED, why, cmd.now)
        return events
