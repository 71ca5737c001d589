"""Clock and IdGenerator: the only sources of time and identity the application uses."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["Clock", "IdGenerator"]


@runtime_checkable
class Clock(Protocol):
    """Wall-clock seconds since the Unix epoch (float). Thread-safe."""

    def now(self) -> float: ...


@runtime_checkable
class IdGenerator(Protocol):
    """Fresh job ids: short, URL-safe, never repeated within a cluster. Thread-safe."""

    def new_job_id(self) -> str: ...
