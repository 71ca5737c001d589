"""OtelJobTracer: one OpenTelemetry trace per job, built from domain events.

The tree of one job (every step a child of `job.submit`, which is a child of whatever span
was current when the job was submitted — the REST request or gRPC call, which continue a
caller's `traceparent`):

    POST /v1/jobs | /gpu_platform.v1.JobService/SubmitJob
    └── job.submit          the submission reached the control plane
        ├── job.commit      the job record is durable (the store saved it before the event)
        ├── job.place       the placement engine's decision (its measured duration)
        ├── job.bind        decision -> GPUs bound to a new attempt (durably)
        ├── job.start       bound -> the attempt's process running
        ├── job.requeue     an attempt stopped by a fault or restart (then place ... again)
        └── job.finish      running -> the attempt ended (COMPLETED / FAILED / CANCELLED)

The job's trace context is kept as a W3C `traceparent` string from submit on and every later
span is started from it, on whichever thread reports the step. It lives in this process's
memory: a job restored after a restart continues in a new trace rooted at `job.resume`.
While the provider has no span processor (no exporter configured: the default server) only
the root span is made — its `traceparent` goes to the task and its trace id to log lines —
and the step spans, which nothing would receive, are not.
Implements EventPublisher (events) and SchedulerMetrics (placement timing).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from opentelemetry.context import Context
from opentelemetry.trace import Span, TracerProvider, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from gpu_platform.adapters.otel_spans import exporting, unexported_context
from gpu_platform.domain.events import (
    DomainEvent,
    JobAborted,
    JobBound,
    JobCancelled,
    JobFinished,
    JobRequeued,
    JobStarted,
    JobSubmitted,
)
from gpu_platform.domain.placement import Unschedulable

__all__ = ["OtelJobTracer"]

_PROPAGATOR = TraceContextTextMapPropagator()


@dataclass(slots=True)
class _JobTrace:
    traceparent: str
    trace_id: str
    mark_ns: int  # when the last step ended: the next step's span starts here
    failed_placements: int = 0


class OtelJobTracer:
    """Implements EventPublisher and SchedulerMetrics. `keep_ended` bounds how many ended
    jobs still answer `traceparent`/`trace_id` (log lines written just after the end)."""

    def __init__(self, tracer_provider: TracerProvider, keep_ended: int = 1024) -> None:
        self._tracer = tracer_provider.get_tracer("gpu_platform.jobs")
        self._lock = threading.Lock()
        self._jobs: dict[str, _JobTrace] = {}
        self._ended: deque[str] = deque()
        self._keep_ended = keep_ended

    def traceparent(self, job_id: str) -> str | None:
        """The job's W3C trace context (its `job.submit` span), if this process knows it."""
        with self._lock:
            entry = self._jobs.get(job_id)
        return None if entry is None else entry.traceparent

    def trace_id(self, job_id: str) -> str | None:
        """The job's trace id (32 hex digits), if this process knows it."""
        with self._lock:
            entry = self._jobs.get(job_id)
        return None if entry is None else entry.trace_id

    # -- SchedulerMetrics ------------------------------------------------------------------

    def placement_decided(
        self, job_id: str, latency_us: float, failure: Unschedulable | None
    ) -> None:
        entry = self._entry(job_id)
        if failure is not None:
            entry.failed_placements += 1  # a waiting job is retried every cycle: no span each
            return
        end = time.time_ns()
        if not exporting(self._tracer):
            entry.failed_placements = 0
            entry.mark_ns = end
            return
        start = max(entry.mark_ns, end - int(latency_us * 1000))
        span = self._span("job.place", entry, start, job_id)
        span.set_attribute("gpu_platform.placement.failed_attempts", entry.failed_placements)
        span.end(end_time=end)
        entry.failed_placements = 0
        entry.mark_ns = end

    def placement_refused(self, job_id: str, failure: Unschedulable) -> None:
        self._entry(job_id).failed_placements += 1

    # -- EventPublisher --------------------------------------------------------------------

    def publish(self, event: DomainEvent) -> None:
        match event:
            case JobSubmitted(job_id, gpus):
                self._submitted(job_id, gpus)
            case JobBound(job_id, allocation, attempt):
                self._step(
                    "job.bind",
                    job_id,
                    {
                        "gpu_platform.node": allocation.node,
                        "gpu_platform.gpus": list(allocation.gpu_indices),
                        "gpu_platform.epoch": allocation.epoch,
                        "gpu_platform.attempt": attempt,
                        "gpu_platform.tasks": len(allocation.tasks),
                    },
                )
            case JobStarted(job_id, epoch):
                self._step("job.start", job_id, {"gpu_platform.epoch": epoch})
            case JobRequeued(job_id, _, reason):
                self._step("job.requeue", job_id, {"gpu_platform.reason": reason})
            case JobFinished(job_id, epoch, state, exit_code, reason):
                attrs: dict[str, AttributeValue] = {"gpu_platform.state": str(state)}
                attrs.update({"gpu_platform.epoch": epoch, "gpu_platform.reason": reason})
                if exit_code is not None:
                    attrs["gpu_platform.exit_code"] = exit_code
                self._step("job.finish", job_id, attrs)
                self._ended_job(job_id)
            case JobCancelled(job_id, _):
                self._step("job.finish", job_id, {"gpu_platform.state": "CANCELLED"})
                self._ended_job(job_id)
            case JobAborted(job_id, _, reason):
                self._step(
                    "job.finish",
                    job_id,
                    {"gpu_platform.state": "FAILED", "gpu_platform.reason": reason},
                )
                self._ended_job(job_id)
            case _:
                pass

    # -- plumbing --------------------------------------------------------------------------

    def _submitted(self, job_id: str, gpus: int) -> None:
        now = time.time_ns()
        own = unexported_context(self._tracer)
        if own is not None:  # nothing would receive the span: its ids are all it is
            trace_id = format(own.trace_id, "032x")
            parent = f"00-{trace_id}-{own.span_id:016x}-{int(own.trace_flags):02x}"
            with self._lock:
                self._jobs[job_id] = _JobTrace(parent, trace_id, now)
            return
        root = self._tracer.start_span("job.submit", start_time=now)  # child of the API span
        root.set_attribute("gpu_platform.job_id", job_id)
        root.set_attribute("gpu_platform.gpus", gpus)
        entry = self._remember(job_id, root, now)
        root.end(end_time=now)
        if exporting(self._tracer):
            commit = self._span("job.commit", entry, now, job_id)
            commit.end(end_time=now)

    def _remember(self, job_id: str, root: Span, now_ns: int) -> _JobTrace:
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=set_span_in_context(root))
        ctx = root.get_span_context()
        entry = _JobTrace(carrier.get("traceparent", ""), format(ctx.trace_id, "032x"), now_ns)
        with self._lock:
            self._jobs[job_id] = entry
        return entry

    def _entry(self, job_id: str) -> _JobTrace:
        with self._lock:
            entry = self._jobs.get(job_id)
        if entry is not None:
            return entry
        now = time.time_ns()  # a job this process did not see submitted (restored)
        root = self._tracer.start_span("job.resume", context=Context(), start_time=now)
        root.set_attribute("gpu_platform.job_id", job_id)
        entry = self._remember(job_id, root, now)
        root.end(end_time=now)
        return entry

    def _span(self, name: str, entry: _JobTrace, start_ns: int, job_id: str) -> Span:
        parent = _PROPAGATOR.extract({"traceparent": entry.traceparent})
        span = self._tracer.start_span(name, context=parent, start_time=start_ns)
        span.set_attribute("gpu_platform.job_id", job_id)
        return span

    def _step(self, name: str, job_id: str, attrs: Mapping[str, AttributeValue]) -> None:
        entry = self._entry(job_id)
        end = time.time_ns()
        if not exporting(self._tracer):
            entry.mark_ns = end
            return
        span = self._span(name, entry, min(entry.mark_ns, end), job_id)
        for key, value in attrs.items():
            span.set_attribute(key, value)
        span.end(end_time=end)
        entry.mark_ns = end

    def _ended_job(self, job_id: str) -> None:
        with self._lock:
            self._ended.append(job_id)
            while len(self._ended) > self._keep_ended:
                self._jobs.pop(self._ended.popleft(), None)
