"""Token bucket: `rate` tokens per second refill a bucket of at most `burst` tokens.

Pure: the caller passes `now` (seconds, any monotonic origin). Each call takes one token or
answers how long until one is available.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TokenBucket"]


@dataclass(slots=True)
class TokenBucket:
    """Invariant: 0 <= tokens <= burst. `rate` > 0 (tokens/s), `burst` >= 1."""

    rate: float
    burst: float
    tokens: float
    updated: float

    @classmethod
    def full(cls, rate: float, burst: float, now: float) -> TokenBucket:
        if rate <= 0 or burst < 1:
            raise ValueError(f"token bucket needs rate > 0 and burst >= 1 (got {rate}, {burst})")
        return cls(rate, burst, burst, now)

    def take(self, now: float) -> float:
        """Take one token: 0.0 when granted, else the seconds until one will be there."""
        if now > self.updated:
            self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
            self.updated = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.rate

    def check_invariants(self) -> None:
        assert 0 <= self.tokens <= self.burst, (self.tokens, self.burst)
