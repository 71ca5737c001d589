"""`Agent`: the node side — runs the tasks the leader sends and reports how they end.

Theory of operation. The agent owns the node's `JobRunner` and health monitors. A transport
adapter keeps a stream to the leader and calls in: `hello()` for the first message (the node,
the tasks running now, and the exits not yet acknowledged), `launch`, `stop`, `read_log`,
`ack`, `reset_gpu`, `inject`. Everything the agent has to say goes out through the `emit`
callable the adapter binds while a stream is up.

Fencing: with a `NodeLease`, the transport renews the lease whenever the leader acknowledges a
heartbeat (`renew_lease`); a node that stops hearing the leader has its tasks stopped by the
lease's own process once the lease ends, so the leader may run them elsewhere without overlap.

Nothing is lost while no leader is reachable: an exit stays in the unacknowledged set until the
leader acknowledges it (it is re-sent in the next hello), and health findings other than
heartbeats are kept (up to `max_findings`) until a stream takes them. Tasks keep running across
leader changes; the leader decides from the hello what to keep and what to stop.

GPU resets and fault injection: the leader's control plane decides when a GPU of this node
needs a reset (it is RESETTING and no attempt holds it) and asks for it over the stream;
`reset_gpu` runs the node's `GpuReset` adapter (blocking: the transport calls it from a worker
thread, never from the stream's). Likewise `inject` runs a fault script on the node's
`FaultInjector` (the simulated hardware) when the agent was given one.

Thread-safety: every public method may be called from any thread.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog

from gpu_platform.application.agent_hub import AttemptRef
from gpu_platform.domain.faults.health import HealthEvent, Heartbeat
from gpu_platform.domain.model.node import Node
from gpu_platform.ports.outbound.gpu_reset import GpuReset, GpuResetError
from gpu_platform.ports.outbound.health_monitor import FaultInjector, HealthMonitor
from gpu_platform.ports.outbound.job_runner import ExitReport, JobRunner, LaunchError, LaunchSpec
from gpu_platform.ports.outbound.node_lease import NodeLease

__all__ = ["Agent", "AgentHello", "ExitNotice"]

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class ExitNotice:
    """An exit to tell the leader, numbered so its acknowledgement can name it."""

    seq: int
    report: ExitReport


@dataclass(frozen=True, slots=True)
class AgentHello:
    node: Node
    running: tuple[AttemptRef, ...]
    exited: tuple[ExitNotice, ...]


Outgoing = ExitNotice | HealthEvent


class Agent:
    """See the module docstring."""

    def __init__(
        self,
        node: Node,
        runner: JobRunner,
        monitors: Sequence[HealthMonitor] = (),
        *,
        max_findings: int = 1000,
        gpu_reset: GpuReset | None = None,
        injector: FaultInjector | None = None,
        lease: NodeLease | None = None,
    ) -> None:
        self.node = node
        self._lease = lease
        self._runner = runner
        self._monitors = tuple(monitors)
        self._gpu_reset = gpu_reset
        self._injector = injector
        self._lock = threading.Lock()
        self._running: dict[tuple[str, int, int], LaunchSpec] = {}  # (job, epoch, rank)
        self.streams = 0
        self._unacked: dict[int, ExitReport] = {}
        self._seq = itertools.count(1)
        self._findings: deque[HealthEvent] = deque(maxlen=max_findings)
        self._emit: Callable[[Outgoing], bool] | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        for monitor in self._monitors:
            monitor.start(self._finding)

    def stop(self, grace_s: float) -> None:
        """Stop the monitors and every task (the agent is going away for good)."""
        for monitor in reversed(self._monitors):
            monitor.stop()
        self._runner.stop_all(grace_s)

    # -- the stream --------------------------------------------------------------------------

    def bind(
        self, emit: Callable[[Outgoing], bool] | None, hello: AgentHello | None = None
    ) -> None:
        """Set (or with None clear) how to send now; `emit` returns False if it could not.
        Binding flushes the findings kept while no stream was up, and sends the exits that
        `hello` (the stream's own, taken before it was welcomed) did not carry: a task that
        ended in between was listed there as running, and no later hello may come."""
        with self._lock:
            self._emit = emit
            kept = list(self._findings) if emit is not None else []
            self._findings.clear()
            carried = {e.seq for e in hello.exited} if hello is not None else set()
            late = [ExitNotice(s, r) for s, r in sorted(self._unacked.items()) if s not in carried]
        if emit is not None:
            for notice in late:
                emit(notice)
        for event in kept:
            self._finding(event)

    def renew_lease(self, until_monotonic: float) -> None:
        """The leader acknowledged a heartbeat: the lease now ends at `until_monotonic`
        (tasks are stopped by the node's fence once it has passed; no-op without one)."""
        if self._lease is not None:
            self._lease.renew(until_monotonic)

    def hello(self) -> AgentHello:
        with self._lock:
            running = tuple(
                AttemptRef(job, epoch, rank, spec.attempt)
                for (job, epoch, rank), spec in sorted(self._running.items())
            )
            exited = tuple(ExitNotice(s, r) for s, r in sorted(self._unacked.items()))
        return AgentHello(self.node, running, exited)

    def launch(self, spec: LaunchSpec) -> str:
        """Start one task; '' when it runs, else why it could not start."""
        key = (spec.job_id, spec.epoch, spec.rank)
        with self._lock:
            if key in self._running:
                return ""  # a launch re-sent after a reconnect: it already runs
            self._running[key] = spec
        try:
            self._runner.start(spec, self._exited)
        except LaunchError as exc:
            with self._lock:
                self._running.pop(key, None)
            log.warning("launch refused", job_id=spec.job_id, epoch=spec.epoch, error=str(exc))
            return str(exc) or "launch failed"
        trace_id = spec.traceparent.split("-")[1] if spec.traceparent.count("-") == 3 else ""
        log.info(
            "task started", job_id=spec.job_id, epoch=spec.epoch, rank=spec.rank, trace_id=trace_id
        )
        return ""

    def stop_attempt(self, job_id: str, epoch: int, grace_s: float) -> None:
        """Stop an attempt; one this agent does not run may have left processes behind (an
        earlier agent on this node was killed): reap those."""
        if not self._runner.stop(job_id, epoch, grace_s):
            self._runner.reap(job_id, epoch)

    def read_log(self, job_id: str, attempt: int, rank: int, offset: int, max_bytes: int) -> bytes:
        if offset < 0:
            return self._runner.read_log(job_id, attempt, max_bytes, rank).encode()
        return self._runner.read_log_from(job_id, attempt, offset, max_bytes, rank)

    def reset_gpu(self, index: int, uuid: str = "") -> str:
        """Reset GPU `index` of this node (blocking, seconds); '' when done, else why not.
        `uuid`, when given, must be that GPU's (the leader's view of the hardware); a GPU a
        task of this agent still runs on is refused."""
        name = self.node.name
        gpu = next((g for g in self.node.gpus if g.index == index), None)
        if gpu is None:
            return f"node {name} has no GPU {index}"
        if uuid and gpu.uuid != uuid:
            return f"GPU {index} of node {name} is {gpu.uuid}, not {uuid}"
        holder = self.holders().get(index)
        if holder is not None:
            return f"GPU {index} of node {name} is in use by job {holder[0]}"
        if self._gpu_reset is None:
            return f"no GPU reset controller on node {name}"
        try:
            self._gpu_reset.reset(name, index)
        except GpuResetError as exc:
            log.warning("gpu reset failed", gpu=index, error=str(exc))
            return str(exc) or "reset failed"
        except Exception as exc:  # an adapter bug: the leader must hear an outcome
            log.exception("gpu reset crashed", gpu=index)
            return f"reset crashed: {exc}"
        log.info("gpu reset", gpu=index)
        return ""

    def inject(self, script: str) -> list[str]:
        """Run a fault script on this node's injector (docs/faults.md); the normalised lines.
        Raises ValueError naming the bad line, or when this agent takes no injections."""
        if self._injector is None:
            raise ValueError(
                f"fault injection is disabled on node {self.node.name} "
                "(gpu-platform agent --fault-injection)"
            )
        return self._injector.inject(script)

    def ack(self, seq: int) -> None:
        with self._lock:
            self._unacked.pop(seq, None)

    def running(self) -> int:
        with self._lock:
            return len(self._running)

    def unacked(self) -> int:
        with self._lock:
            return len(self._unacked)

    def holders(self) -> dict[int, tuple[str, str]]:
        """GPU index -> (job id, tenant) of the tasks running on this node."""
        with self._lock:
            return {
                index: (spec.job_id, spec.tenant)
                for spec in self._running.values()
                for index in spec.gpu_indices
            }

    def sharers(self) -> dict[int, tuple[tuple[str, str], ...]]:
        """GPU index -> (job id, tenant) of every task running on it (several on a GPU
        shared by shares of one GPU), in start order."""
        with self._lock:
            out: dict[int, tuple[tuple[str, str], ...]] = {}
            for spec in self._running.values():
                for index in spec.gpu_indices:
                    out[index] = (*out.get(index, ()), (spec.job_id, spec.tenant))
            return out

    # -- from the runner and the monitors ----------------------------------------------------

    def _exited(self, report: ExitReport) -> None:
        with self._lock:
            self._running.pop((report.job_id, report.epoch, report.rank), None)
            seq = next(self._seq)
            self._unacked[seq] = report
            emit = self._emit
        log.info("task ended", job_id=report.job_id, epoch=report.epoch, reason=report.reason)
        if emit is not None:
            emit(ExitNotice(seq, report))

    def _finding(self, event: HealthEvent) -> None:
        with self._lock:
            emit = self._emit
        if emit is not None and emit(event):
            return
        if not isinstance(event, Heartbeat):  # heartbeats only matter while connected
            with self._lock:
                self._findings.append(event)
