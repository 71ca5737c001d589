"""Per-key request-rate and token-rate limits of the gateway.

Requests: a token bucket per key (`requests_per_second`, `request_burst`), one token per
request. Tokens (prompt + completion, known only once a response has ended): a bucket of
`tokens_per_minute` that refills at that rate per minute and may go into debt: a request is
admitted while the balance is positive and its tokens are charged when it ends, so a key that
used more than its budget waits until the debt is paid back. 0 turns a limit off.

`admit` answers 0.0 (go) or the seconds to wait (the Retry-After). Thread-safe; time is passed
in (`now`, seconds, monotonic).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from gpu_platform.domain.model.ratelimit import TokenBucket

__all__ = ["GatewayLimits", "LimitSettings"]


@dataclass(frozen=True, slots=True)
class LimitSettings:
    requests_per_second: float = 0.0  # 0 = no limit
    request_burst: float = 1.0
    tokens_per_minute: float = 0.0  # 0 = no limit


class _Debt:
    __slots__ = ("balance", "updated")

    def __init__(self, balance: float, updated: float) -> None:
        self.balance = balance
        self.updated = updated


class GatewayLimits:
    def __init__(self, settings: LimitSettings) -> None:
        self.settings = settings
        self._requests: dict[str, TokenBucket] = {}
        self._tokens: dict[str, _Debt] = {}
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.settings.requests_per_second > 0 or self.settings.tokens_per_minute > 0

    def admit(self, key: str, now: float) -> float:
        """0.0 when `key` may send a request now (one request is taken), else seconds to wait."""
        s = self.settings
        with self._lock:
            if s.tokens_per_minute > 0:
                debt = self._refilled(key, now)
                if debt.balance <= 0:
                    return (1 - debt.balance) * 60.0 / s.tokens_per_minute
            if s.requests_per_second > 0:
                bucket = self._requests.get(key)
                if bucket is None:
                    bucket = TokenBucket.full(s.requests_per_second, s.request_burst, now)
                    self._requests[key] = bucket
                return bucket.take(now)
        return 0.0

    def charge(self, key: str, tokens: int, now: float) -> None:
        """A request of `key` used `tokens` tokens (prompt + completion)."""
        if self.settings.tokens_per_minute <= 0 or tokens <= 0:
            return
        with self._lock:
            self._refilled(key, now).balance -= tokens

    def _refilled(self, key: str, now: float) -> _Debt:
        budget = self.settings.tokens_per_minute
        debt = self._tokens.get(key)
        if debt is None:
            debt = self._tokens[key] = _Debt(budget, now)
        elif now > debt.updated:
            debt.balance = min(budget, debt.balance + (now - debt.updated) * budget / 60.0)
            debt.updated = now
        return debt
