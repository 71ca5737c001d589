"""UsageQueries: GPU-hour accounting per job and per tenant."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

__all__ = ["JobUsage", "ServingUsage", "UsageQueries", "UsageReport"]


@dataclass(frozen=True, slots=True)
class JobUsage:
    """GPU-seconds a job consumed in the window: its GPU count times seconds spent RUNNING."""

    job_id: str
    tenant: str
    gpus: int
    running_s: float
    gpu_seconds: float


@dataclass(frozen=True, slots=True)
class ServingUsage:
    """Requests a tenant sent through the OpenAI-compatible gateway, and their tokens (as the
    replicas' responses reported them), since this server started."""

    requests: int
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True, slots=True)
class UsageReport:
    """Usage in [since, until) (Unix seconds), per job and summed per tenant (GPU-hours)."""

    since: float
    until: float
    jobs: tuple[JobUsage, ...]
    gpu_hours_by_tenant: dict[str, float]
    serving_by_tenant: dict[str, ServingUsage] = field(default_factory=dict)

    @property
    def gpu_hours(self) -> float:
        return sum(self.gpu_hours_by_tenant.values())


@runtime_checkable
class UsageQueries(Protocol):
    """`usage(tenant, since, until)`: None bounds mean all time / now. Thread-safe."""

    def usage(
        self, tenant: str | None = None, since: float | None = None, until: float | None = None
    ) -> UsageReport: ...
