"""`FailedAuthLimiter`: slows down token guessing, per source address (issue 20).

Each source (a client's IP address) may present at most `max_failures` unknown or revoked
tokens within any `window_s` seconds; past that, every request from it that carries a token is
answered TooManyRequests (429 with Retry-After / RESOURCE_EXHAUSTED) without the token being
looked at, until its oldest counted failure leaves the window. Requests without a token are
not counted (they learn nothing), nor are calls with no source ('': an in-process caller that
cannot name one). At most `max_sources` sources are tracked; when more appear,
the ones idle longest are forgotten. Time comes from the caller (`now`, seconds). Thread-safe.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque

from gpu_platform.domain.model.tenancy import TooManyRequests

__all__ = ["FailedAuthLimiter"]


class FailedAuthLimiter:
    """See the module docstring; `max_failures` 0 turns the limit off."""

    def __init__(
        self, max_failures: int, window_s: float = 60.0, *, max_sources: int = 10_000
    ) -> None:
        if max_failures < 0 or window_s <= 0 or max_sources < 1:
            raise ValueError("max_failures >= 0, window_s > 0 and max_sources >= 1 required")
        self._max = max_failures
        self._window = window_s
        self._max_sources = max_sources
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def check(self, source: str, now: float) -> None:
        """Raise TooManyRequests if `source` is over its limit at `now`."""
        if self._max == 0 or not source:
            return
        with self._lock:
            times = self._failures.get(source)
            if times is None:
                return
            self._expire(times, now)
            if len(times) < self._max:
                return
            wait = times[0] + self._window - now
        raise TooManyRequests(
            f"too many failed authentications from {source or 'this client'} "
            f"({self._max} per {self._window:g} s); try again later",
            max(wait, 0.0),
        )

    def failed(self, source: str, now: float) -> None:
        """Count one failed authentication of `source` at `now`."""
        if self._max == 0 or not source:
            return
        with self._lock:
            times = self._failures.pop(source, None)
            if times is None:
                times = deque()
            self._expire(times, now)
            times.append(now)
            while len(times) > self._max:
                times.popleft()
            self._failures[source] = times  # most recently failed last
            while len(self._failures) > self._max_sources:
                self._failures.popitem(last=False)

    def _expire(self, times: deque[float], now: float) -> None:
        while times and times[0] <= now - self._window:
            times.popleft()
