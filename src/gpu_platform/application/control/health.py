"""Health and resets: monitors' findings, node heartbeat verdicts, GPU resets.

Every finding becomes a cluster-state command, so the fault tables decide (docs/faults.md)
and the plane's lock orders it with everything else. A GPU that reaches RESETTING is reset by
the GpuReset port once no attempt holds it (on a worker thread when `reset_in_background`),
and the outcome is fed back as `CompleteGpuReset`. Replicated, the leader judges heartbeat
ages from the beats it heard in memory and commits only verdicts that change a node.
"""

from __future__ import annotations

import threading

import structlog

from gpu_platform.application.consistency import LeaderElsewhere
from gpu_platform.application.control.shared import LOG_NAME, Shared
from gpu_platform.application.raft_node import RaftNodeError
from gpu_platform.domain.cluster_state import Command
from gpu_platform.domain.errors import DomainError
from gpu_platform.domain.events import DomainEvent, NodeStateChanged
from gpu_platform.domain.faults.commands import (
    CheckNodes,
    CompleteGpuReset,
    NodeHeartbeat,
    ReportEcc,
    ReportGpuLost,
    ReportThermal,
    ReportXid,
)
from gpu_platform.domain.faults.health import (
    EccReading,
    GpuLostReport,
    HealthEvent,
    Heartbeat,
    ReplicaProbe,
    ThermalReading,
    XidReport,
)
from gpu_platform.domain.model.node import NodeState
from gpu_platform.domain.services.commands import ReportReplicaHealth
from gpu_platform.ports.outbound.gpu_reset import GpuReset, GpuResetError

__all__ = ["Health"]

log = structlog.get_logger(LOG_NAME)


class Health:
    """Turns findings into commands and resets GPUs that are due (`gpu_reset` None: a GPU
    needing a reset goes OFFLINE, nothing can reset it)."""

    def __init__(
        self, shared: Shared, gpu_reset: GpuReset | None, *, reset_in_background: bool
    ) -> None:
        self._s = shared
        self._gpu_reset = gpu_reset
        self._reset_in_background = reset_in_background
        self._resets_inflight: set[str] = set()

    def report_health(self, event: HealthEvent) -> None:
        """A monitor's finding (called from its thread). Never raises: a finding about an
        unknown GPU or node is logged and dropped."""
        if self._s.stopping.is_set():
            return
        now = self._s.now()
        command: Command
        match event:
            case XidReport(node, index, xid):
                command = ReportXid(node, index, xid, now)
            case EccReading(node, index, corrected, uncorrected, pending, failed):
                command = ReportEcc(node, index, corrected, uncorrected, pending, failed, now)
            case ThermalReading(node, index, temperature, reasons):
                command = ReportThermal(node, index, temperature, reasons, now)
            case GpuLostReport(node, index, detail):
                command = ReportGpuLost(node, index, now, detail)
            case Heartbeat(node):
                command = NodeHeartbeat(node, now)
            case ReplicaProbe(_, job_id, epoch, ready, address, detail):
                command = ReportReplicaHealth(job_id, epoch, ready, address, detail, now)
        try:
            events = self._s.execute(command)
        except DomainError as exc:
            log.warning("health finding dropped", finding=repr(event), error=str(exc))
            return
        except (RaftNodeError, LeaderElsewhere) as exc:  # not (or no longer) the leader
            log.info("health finding not committed", finding=repr(event), error=str(exc))
            return
        if events:  # most readings change nothing; only a change can free or block GPUs
            self._s.wake.set()

    def check_nodes(self) -> None:
        """Judge node heartbeat ages now (SUSPECT / DOWN per the fault policy). Replicated,
        the leader judges the heartbeats it heard (in memory; a node it has not heard since
        it took the lead counts from then) and commits only the verdicts that change a node."""
        with self._s.lock:
            now = self._s.now()
            if self._s.replication is None:
                events = self._s.execute(CheckNodes(now))
            else:
                silent = self._silent_nodes(now)
                events = self._s.execute(CheckNodes(now, silent)) if silent else []
        if events:  # waking on every check made the loop propose CheckNodes back to back
            self._s.wake.set()

    def _silent_nodes(self, now: float) -> tuple[tuple[str, float], ...]:
        """(node, seconds silent) for each node whose state a heartbeat verdict would change."""
        policy = self._s.state.policy
        out = []
        for node in self._s.state.nodes:
            silent = now - self._s.beats.get(node.name, self._s.leader_since)
            if (silent >= policy.node_down_after_s and node.state is not NodeState.DOWN) or (
                silent >= policy.node_suspect_after_s and node.state is NodeState.READY
            ):
                out.append((node.name, silent))
        return tuple(out)

    def release_down_nodes(self, events: list[DomainEvent]) -> None:
        """A node went DOWN: attempts already being stopped there cannot report; stop them
        again so they are recorded ended (the hub reports tasks on silent nodes lost)."""
        down = {
            e.node for e in events if isinstance(e, NodeStateChanged) and e.new is NodeState.DOWN
        }
        if not down:
            return
        for job in self._s.state.jobs():
            alloc = job.allocation
            if job.holds_gpus and job.releasing and alloc is not None and down & set(alloc.nodes):
                self._s.stop_attempt(job.id, alloc.epoch, alloc.nodes)

    def start_due_resets(self) -> None:
        """Reset every GPU that is due and not being reset already."""
        with self._s.lock:
            due = [g for g in self._s.state.resets_due() if g.uuid not in self._resets_inflight]
            for gpu in due:
                self._resets_inflight.add(gpu.uuid)
        for gpu in due:
            args = (gpu.node, gpu.index, gpu.uuid)
            if self._reset_in_background:
                threading.Thread(target=self._reset, args=args, name="gpu-reset").start()
            else:
                self._reset(*args)

    def _reset(self, node: str, index: int, uuid: str) -> None:
        ok, detail = True, ""
        try:
            if self._gpu_reset is None:
                raise GpuResetError("no GPU reset controller is configured")
            self._gpu_reset.reset(node, index)
        except GpuResetError as exc:
            ok, detail = False, str(exc)
        except Exception as exc:  # an adapter bug must not leave the GPU RESETTING forever
            log.exception("gpu reset crashed", node=node, gpu=index)
            ok, detail = False, f"reset crashed: {exc}"
        with self._s.lock:
            self._resets_inflight.discard(uuid)
            if self._s.stopping.is_set():  # stores may be closing; the GPU is reset after restart
                log.warning("gpu reset outcome dropped at shutdown", node=node, gpu=index, ok=ok)
                return
            try:
                self._s.execute(CompleteGpuReset(node, index, ok, self._s.now(), detail))
            except DomainError as exc:  # an operator moved it meanwhile (offline, online)
                log.warning("gpu reset outcome dropped", node=node, gpu=index, error=str(exc))
            except (RaftNodeError, LeaderElsewhere) as exc:  # the next leader resets it again
                log.warning("gpu reset outcome not committed", node=node, gpu=index, error=str(exc))
        self._s.wake.set()
