"""JobStore: durable job records."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from gpu_platform.domain.model.job import Job

__all__ = ["JobStore"]


@runtime_checkable
class JobStore(Protocol):
    """Durable job records keyed by job id.

    `save` writes all given snapshots atomically (all or none) and is durable when it returns
    (survives a process crash). `load` returns every saved job in submission order (`seq`).
    Thread-safe.
    """

    def save(self, jobs: Sequence[Job]) -> None: ...

    def get(self, job_id: str) -> Job | None: ...

    def load(self) -> list[Job]: ...

    def close(self) -> None: ...
