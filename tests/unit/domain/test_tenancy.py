"""Roles and principals, the token bucket, and the audit chain (pure domain)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from gpu_platform.domain.errors import InvalidRequest
from gpu_platform.domain.model.audit_chain import GENESIS, ChainBreak, chain_entry, verify
from gpu_platform.domain.model.ratelimit import TokenBucket
from gpu_platform.domain.model.tenancy import (
    ALLOWED,
    Forbidden,
    Permission,
    Principal,
    Role,
    check_tenant_name,
)

EXPECTED = {  # the whole table, spelled out: (role, permission) -> allowed
    Role.VIEWER: {Permission.JOBS_READ, Permission.CLUSTER_READ},
    Role.USER: {Permission.JOBS_READ, Permission.JOBS_WRITE, Permission.CLUSTER_READ},
    Role.OPERATOR: {
        Permission.JOBS_READ,
        Permission.JOBS_WRITE,
        Permission.CLUSTER_READ,
        Permission.JOBS_ANY_TENANT,
        Permission.HARDWARE_ADMIN,
        Permission.AUDIT_READ,
    },
    Role.ADMIN: set(Permission),
}


@pytest.mark.parametrize("role", list(Role))
@pytest.mark.parametrize("permission", list(Permission))
def test_every_role_and_permission_pair_is_decided_by_the_table(
    role: Role, permission: Permission
) -> None:
    who = Principal("p", "t", role, "tok_1")
    assert who.may(permission) == (permission in EXPECTED[role])
    assert set(ALLOWED[role]) == EXPECTED[role]
    if permission in EXPECTED[role]:
        who.require(permission)
    else:
        with pytest.raises(Forbidden, match=str(permission)):
            who.require(permission)


def test_users_see_only_their_tenant_and_operators_every_tenant() -> None:
    assert Principal("u", "a", Role.USER).sees_tenant("a")
    assert not Principal("u", "a", Role.USER).sees_tenant("b")
    assert Principal("o", "a", Role.OPERATOR).sees_tenant("b")


@pytest.mark.parametrize("name", ["", "a b", "x" * 65, "ü", "a/b"])
def test_bad_tenant_names_are_refused_naming_the_field(name: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        check_tenant_name(name)
    assert err.value.field == "tenant"


class BucketMachine(RuleBasedStateMachine):
    """The bucket against a brute-force model: granted calls over any window never exceed
    burst + rate x window, and a refused call is told a positive wait that suffices."""

    def __init__(self) -> None:
        super().__init__()
        self.bucket = TokenBucket.full(rate=2.0, burst=3.0, now=0.0)
        self.now = 0.0
        self.granted: list[float] = []

    @rule(dt=st.floats(min_value=0, max_value=2, allow_nan=False))
    def advance(self, dt: float) -> None:
        self.now += dt

    @rule()
    def take(self) -> None:
        wait = self.bucket.take(self.now)
        if wait == 0:
            self.granted.append(self.now)
        else:
            assert wait > 0
            probe = TokenBucket(self.bucket.rate, self.bucket.burst, self.bucket.tokens, self.now)
            assert probe.take(self.now + wait + 1e-9) == 0

    @invariant()
    def never_more_than_burst_plus_refill(self) -> None:
        self.bucket.check_invariants()
        for i, start in enumerate(self.granted):
            in_window = len(self.granted) - i
            assert in_window <= 3.0 + 2.0 * (self.now - start) + 1e-6


TestBucket = BucketMachine.TestCase
TestBucket.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


def test_a_bucket_needs_a_positive_rate_and_a_burst_of_one() -> None:
    with pytest.raises(ValueError):
        TokenBucket.full(0, 1, 0.0)
    with pytest.raises(ValueError):
        TokenBucket.full(1, 0.5, 0.0)


def _chain(n: int) -> tuple[list[str], tuple[int, str]]:
    lines, prev = [], GENESIS
    for i in range(1, n + 1):
        line, prev = chain_entry(i, prev, {"action": f"a{i}", "actor": "alice"})
        lines.append(line)
    return lines, (n, prev)


@given(st.integers(min_value=1, max_value=12))
def test_an_untouched_chain_verifies(n: int) -> None:
    lines, head = _chain(n)
    assert verify(lines, head) == n
    assert verify(lines) == n


@given(st.data())
def test_any_edit_removal_insertion_or_reordering_names_the_first_bad_line(
    data: st.DataObject,
) -> None:
    n = data.draw(st.integers(min_value=2, max_value=10))
    lines, head = _chain(n)
    kind = data.draw(st.sampled_from(["edit", "remove", "insert", "swap"]))
    k = data.draw(st.integers(min_value=0, max_value=n - 1))
    tampered = list(lines)
    if kind == "edit":
        tampered[k] = tampered[k].replace('"actor":"alice"', '"actor":"mallory"')
        expected = k + 1
    elif kind == "remove":
        del tampered[k]
        expected = k + 1
    elif kind == "insert":
        tampered.insert(k + 1, lines[k])  # a replayed copy of a real line
        expected = k + 2
    else:
        j = data.draw(st.integers(min_value=0, max_value=n - 1).filter(lambda j: j != k))
        tampered[k], tampered[j] = tampered[j], tampered[k]
        expected = min(j, k) + 1
    result = verify(tampered, head)
    assert isinstance(result, ChainBreak), (kind, k)
    assert result.line == expected, (kind, k, result)


def test_a_removed_last_line_is_caught_by_the_head() -> None:
    lines, head = _chain(4)
    assert verify(lines[:-1]) == 3  # the chain alone cannot tell...
    result = verify(lines[:-1], head)  # ...the head can
    assert isinstance(result, ChainBreak) and result.line == 4
