"""EventHub: fans domain events out to live subscribers (gRPC WatchJobs, REST streams)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from gpu_platform.domain.events import DomainEvent

__all__ = ["EventHub"]


class EventHub:
    """Implements EventPublisher. Each subscriber gets its own bounded queue; a subscriber too
    slow to keep up loses its oldest events rather than slowing the control plane down (and
    is told so by a None in its queue)."""

    def __init__(self, capacity: int = 10_000) -> None:
        self._capacity = capacity
        self._lock = threading.Lock()
        self._subscribers: set[queue.Queue[DomainEvent | None]] = set()

    def publish(self, event: DomainEvent) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for q in subscribers:
            try:
                q.put_nowait(event)
            except queue.Full:
                try:
                    q.get_nowait()
                    q.put_nowait(None)  # overflow marker
                except (queue.Empty, queue.Full):
                    pass

    @contextmanager
    def subscribe(self) -> Iterator[queue.Queue[DomainEvent | None]]:
        q: queue.Queue[DomainEvent | None] = queue.Queue(self._capacity)
        with self._lock:
            self._subscribers.add(q)
        try:
            yield q
        finally:
            with self._lock:
                self._subscribers.discard(q)

    @property
    def subscribers(self) -> int:
        with self._lock:
            return len(self._subscribers)
