"""Bad tokens are rate-limited per source address (issue 20.7): after N failures in a minute
the source gets TooManyRequests (429 / RESOURCE_EXHAUSTED) with a retry time."""

from __future__ import annotations

import pytest

from gpu_platform.application.auth import AccessControl
from gpu_platform.application.auth_failures import FailedAuthLimiter
from gpu_platform.domain.model.tenancy import Role, TooManyRequests, Unauthenticated
from gpu_platform.testing.access_fakes import InMemoryAccessStore
from gpu_platform.testing.fakes import ManualClock


def _access(limit: int) -> tuple[AccessControl, ManualClock, str]:
    clock = ManualClock()
    access = AccessControl(InMemoryAccessStore(), clock, failures_per_minute=limit)
    boot = access.bootstrap()
    assert boot is not None
    return access, clock, boot.secret


def test_a_source_past_its_bad_token_limit_is_told_to_wait_even_with_a_good_token() -> None:
    access, clock, good = _access(3)
    for _ in range(3):
        with pytest.raises(Unauthenticated):
            access.authenticate("guess", "10.0.0.9")
    with pytest.raises(TooManyRequests) as slowed:
        access.authenticate(good, "10.0.0.9")
    assert 0 < slowed.value.retry_after_s <= 60
    assert access.authenticate(good, "10.0.0.1").role is Role.ADMIN  # other sources unaffected
    clock.advance(61)
    assert access.authenticate(good, "10.0.0.9").role is Role.ADMIN


def test_missing_tokens_and_unnamed_sources_are_not_counted_and_zero_turns_the_limit_off() -> None:
    access, _, good = _access(1)
    for _ in range(5):
        with pytest.raises(Unauthenticated):
            access.authenticate(None, "10.0.0.9")
    assert access.authenticate(good, "10.0.0.9").role is Role.ADMIN
    for _ in range(5):  # an in-process caller without a source is never limited
        with pytest.raises(Unauthenticated):
            access.authenticate("guess")
    assert access.authenticate(good).role is Role.ADMIN
    off, _, good = _access(0)
    for _ in range(50):
        with pytest.raises(Unauthenticated):
            off.authenticate("guess", "10.0.0.9")
    assert off.authenticate(good, "10.0.0.9").role is Role.ADMIN


def test_the_limiter_forgets_the_longest_idle_sources_first() -> None:
    limiter = FailedAuthLimiter(1, 60.0, max_sources=2)
    for source in ("a", "b", "c"):
        limiter.failed(source, 0.0)
    limiter.check("a", 1.0)  # forgotten: allowed again
    with pytest.raises(TooManyRequests):
        limiter.check("c", 1.0)
