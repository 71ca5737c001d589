"""EventPublisher: where domain events go (logs, metrics, traces)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from gpu_platform.domain.events import DomainEvent

__all__ = ["EventPublisher"]


@runtime_checkable
class EventPublisher(Protocol):
    """Receives every domain event after it is durably applied. Must not raise or block."""

    def publish(self, event: DomainEvent) -> None: ...
