"""StructlogEventPublisher: one structured log line per domain event."""

from __future__ import annotations

from dataclasses import asdict

import structlog

from gpu_platform.domain.events import DomainEvent

__all__ = ["StructlogEventPublisher"]


class StructlogEventPublisher:
    """Implements EventPublisher by logging `event=<EventName>` with the event's fields."""

    def __init__(self) -> None:
        self._log = structlog.get_logger("gpu_platform.events")

    def publish(self, event: DomainEvent) -> None:
        fields = asdict(event)
        self._log.info(type(event).__name__, **fields)
