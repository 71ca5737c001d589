"""JobTraceContext: where a job's trace continues (its W3C `traceparent`), for propagation to
the processes and agents that run it."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["JobTraceContext", "NoTraceContext"]


@runtime_checkable
class JobTraceContext(Protocol):
    """`traceparent(job_id)`: the job's trace context ("00-<trace>-<span>-<flags>"), or None
    when this process does not know it. Thread-safe, never blocks."""

    def traceparent(self, job_id: str) -> str | None: ...


class NoTraceContext:
    """Implements JobTraceContext for a control plane without tracing."""

    def traceparent(self, job_id: str) -> str | None:
        return None
