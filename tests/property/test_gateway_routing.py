"""The gateway's replica choice and per-key limits, checked on many generated cases."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from gpu_platform.application.gateway.limits import GatewayLimits, LimitSettings
from gpu_platform.application.gateway.routing import ReplicaBalancer
from gpu_platform.ports.inbound.model_routes import ModelRoute, ReplicaAddress

replica_sets = st.lists(
    st.builds(
        ReplicaAddress,
        replica_id=st.sampled_from([f"r{i}" for i in range(6)]),
        url=st.just("http://127.0.0.1:1"),
        ready=st.booleans(),
        draining=st.booleans(),
    ),
    max_size=6,
    unique_by=lambda r: r.replica_id,
)


def route_of(replicas: list[ReplicaAddress]) -> ModelRoute:
    return ModelRoute("m", "svc", "t", tuple(replicas))


@settings(max_examples=150)
@given(
    replicas=replica_sets,
    loads=st.dictionaries(st.sampled_from([f"r{i}" for i in range(6)]), st.integers(1, 5)),
    exclude=st.sets(st.sampled_from([f"r{i}" for i in range(6)])),
    session=st.none() | st.binary(min_size=1, max_size=8),
)
def test_the_choice_is_a_ready_undrained_untried_replica_with_the_fewest_requests(
    replicas: list[ReplicaAddress],
    loads: dict[str, int],
    exclude: set[str],
    session: bytes | None,
) -> None:
    balancer = ReplicaBalancer()
    for rid, n in loads.items():
        for _ in range(n):
            balancer.started(rid)
    allowed = [r for r in replicas if r.ready and not r.draining and r.replica_id not in exclude]
    chosen = balancer.choose(route_of(replicas), 0.0, session, exclude)
    if not allowed:
        assert chosen is None
        return
    assert chosen in allowed
    if session is None:
        assert balancer.outstanding(chosen.replica_id) == min(
            balancer.outstanding(r.replica_id) for r in allowed
        )
    balancer.check_invariants()


@settings(max_examples=100)
@given(
    ids=st.lists(st.sampled_from([f"r{i}" for i in range(8)]), min_size=2, unique=True),
    session=st.binary(min_size=1, max_size=8),
)
def test_a_session_moves_only_when_its_replica_goes(ids: list[str], session: bytes) -> None:
    replicas = [ReplicaAddress(rid, "http://127.0.0.1:1") for rid in ids]
    balancer = ReplicaBalancer()
    home = balancer.choose(route_of(replicas), 0.0, session)
    assert home is not None
    others = [r for r in replicas if r != home]
    for gone in others:  # another replica leaving keeps the session home
        left = [r for r in replicas if r != gone]
        assert balancer.choose(route_of(left), 0.0, session) == home
    moved = balancer.choose(route_of(others), 0.0, session)
    assert moved is not None and moved != home


def test_a_replica_that_refused_is_avoided_until_its_ejection_ends() -> None:
    replicas = [ReplicaAddress("a", "http://a"), ReplicaAddress("b", "http://b")]
    balancer = ReplicaBalancer(eject_s=2.0)
    balancer.refused("a", now=10.0)
    picks = {balancer.choose(route_of(replicas), 11.0).replica_id for _ in range(6)}  # type: ignore[union-attr]
    assert picks == {"b"}
    only_a = route_of(replicas[:1])
    assert balancer.choose(only_a, 11.0) == replicas[0]  # ejected beats nothing at all
    later = {balancer.choose(route_of(replicas), 12.5).replica_id for _ in range(6)}  # type: ignore[union-attr]
    assert later == {"a", "b"}


def test_equal_loads_take_turns() -> None:
    replicas = [ReplicaAddress(r, "http://x") for r in ("a", "b", "c")]
    balancer = ReplicaBalancer()
    picks = [balancer.choose(route_of(replicas), 0.0) for _ in range(6)]
    assert {p.replica_id for p in picks if p is not None} == {"a", "b", "c"}


@settings(max_examples=100)
@given(
    rate=st.floats(0.5, 50),
    burst=st.integers(1, 20),
    gaps=st.lists(st.floats(0, 2), min_size=1, max_size=60),
)
def test_admitted_requests_never_exceed_burst_plus_rate_times_elapsed(
    rate: float, burst: int, gaps: list[float]
) -> None:
    limits = GatewayLimits(LimitSettings(requests_per_second=rate, request_burst=burst))
    now, admitted = 0.0, 0
    for gap in gaps:
        now += gap
        wait = limits.admit("k", now)
        assert wait >= 0
        admitted += wait == 0
    assert admitted <= burst + rate * now + 1e-6


def test_a_key_in_token_debt_waits_until_it_is_paid_back_and_others_do_not() -> None:
    limits = GatewayLimits(LimitSettings(tokens_per_minute=600))  # 10 tokens a second
    assert limits.admit("k", 0.0) == 0
    limits.charge("k", 700, 0.0)  # balance -100
    assert limits.admit("k", 1.0) == pytest.approx(9.1)  # balance -90: (1 + 90) / 10 per second
    assert limits.admit("other", 1.0) == 0
    assert limits.admit("k", 11.0) == 0
