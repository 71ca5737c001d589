"""Metrics ports: what the scheduler, the Raft driver and the APIs report for observability.

The application calls these; adapters turn the calls into Prometheus series and trace spans
(`adapters/outbound/observability`), so no application module imports a metrics library.
Every method is called on a hot path, possibly under the control plane's lock: it must be
cheap, thread-safe, and must never raise or block. `NoSchedulerMetrics` and `NoRaftMetrics`
are the do-nothing defaults.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from gpu_platform.domain.placement import Unschedulable

__all__ = [
    "ApiMetrics",
    "NoRaftMetrics",
    "NoSchedulerMetrics",
    "RaftMetrics",
    "SchedulerMetrics",
]


@runtime_checkable
class SchedulerMetrics(Protocol):
    """Placement decisions of the scheduling loop."""

    def placement_decided(
        self, job_id: str, latency_us: float, failure: Unschedulable | None
    ) -> None:
        """One call of the placement engine for `job_id` took `latency_us` microseconds;
        `failure` is the engine's reason when nothing fits now, None when it placed the job."""
        ...

    def placement_refused(self, job_id: str, failure: Unschedulable) -> None:
        """The scheduler found no room for `job_id` without asking the engine (fewer free
        GPUs than it needs, or no node of the shape): a failure with no latency."""
        ...


@runtime_checkable
class RaftMetrics(Protocol):
    """What a Raft peer's driver sees (gauges such as term and log size are read from its
    status at scrape time instead)."""

    def leader_changed(self, leader_id: int | None, term: int) -> None:
        """This peer learnt of a new leader (`None`: it knows of none) in `term`."""
        ...

    def committed(self, latency_s: float) -> None:
        """An entry this peer proposed as leader was committed and applied, `latency_s`
        seconds after the proposal."""
        ...


@runtime_checkable
class ApiMetrics(Protocol):
    """Requests served by the inbound APIs."""

    def http_request(self, method: str, route: str, status: int, seconds: float) -> None:
        """A REST request took `seconds`; `route` is the route template
        (`/v1/jobs/{job_id}`), never the raw path, or "unmatched"."""
        ...

    def grpc_call(self, method: str, code: str, seconds: float) -> None:
        """A unary gRPC call to `method` (`/gpu_platform.v1.JobService/GetJob`) ended with
        status `code` (a `grpc.StatusCode` name such as "OK") after `seconds`."""
        ...


class NoSchedulerMetrics:
    """SchedulerMetrics that records nothing."""

    def placement_decided(
        self, job_id: str, latency_us: float, failure: Unschedulable | None
    ) -> None:
        return None

    def placement_refused(self, job_id: str, failure: Unschedulable) -> None:
        return None


class NoRaftMetrics:
    """RaftMetrics that records nothing."""

    def leader_changed(self, leader_id: int | None, term: int) -> None:
        return None

    def committed(self, latency_s: float) -> None:
        return None
