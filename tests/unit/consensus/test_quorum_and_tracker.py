"""Quorum arithmetic against brute-force oracles; progress states as a complete table."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.domain.consensus.quorum import (
    UNBOUNDED,
    JointConfig,
    VoteResult,
    majority_committed_index,
    majority_vote_result,
)
from gpu_platform.domain.consensus.tracker import (
    PROGRESS_TRANSITIONS,
    Inflights,
    Progress,
    ProgressState,
)
from gpu_platform.domain.errors import IllegalTransition

ids = st.frozensets(st.integers(1, 9), max_size=7)


def oracle_committed(voters: frozenset[int], acked: dict[int, int]) -> int:
    """The largest index some majority of `voters` has acknowledged (exhaustive)."""
    if not voters:
        return UNBOUNDED
    best = 0
    for size in range(len(voters) // 2 + 1, len(voters) + 1):
        for group in itertools.combinations(sorted(voters), size):
            best = max(best, min(acked.get(v, 0) for v in group))
    return best


def oracle_vote(voters: frozenset[int], votes: dict[int, bool]) -> VoteResult:
    """WON/LOST if every completion of the missing votes wins/loses; PENDING otherwise."""
    if not voters:
        return VoteResult.WON
    missing = [v for v in voters if v not in votes]
    outcomes = set()
    for fill in itertools.product([True, False], repeat=len(missing)):
        full = {**votes, **dict(zip(missing, fill, strict=True))}
        outcomes.add(sum(full[v] for v in voters) > len(voters) // 2)
    if outcomes == {True}:
        return VoteResult.WON
    if outcomes == {False}:
        return VoteResult.LOST
    return VoteResult.PENDING


@settings(max_examples=200, deadline=None)
@given(voters=ids, acked=st.dictionaries(st.integers(1, 9), st.integers(0, 20)))
def test_the_majority_committed_index_equals_the_exhaustive_oracle(
    voters: frozenset[int], acked: dict[int, int]
) -> None:
    assert majority_committed_index(voters, acked) == oracle_committed(voters, acked)


@settings(max_examples=200, deadline=None)
@given(voters=ids, votes=st.dictionaries(st.integers(1, 9), st.booleans()))
def test_the_majority_vote_result_equals_the_exhaustive_oracle(
    voters: frozenset[int], votes: dict[int, bool]
) -> None:
    assert majority_vote_result(voters, votes) is oracle_vote(voters, votes)


@settings(max_examples=200, deadline=None)
@given(a=ids, b=ids, acked=st.dictionaries(st.integers(1, 9), st.integers(0, 20)))
def test_a_joint_index_is_committed_only_when_both_majorities_commit_it(
    a: frozenset[int], b: frozenset[int], acked: dict[int, int]
) -> None:
    joint = JointConfig(a, b).committed_index(acked)
    assert joint == min(oracle_committed(a, acked), oracle_committed(b, acked))
    assert joint == JointConfig(b, a).committed_index(acked)


@settings(max_examples=200, deadline=None)
@given(a=ids, b=ids, votes=st.dictionaries(st.integers(1, 9), st.booleans()))
def test_a_joint_vote_is_won_only_when_both_majorities_win_it(
    a: frozenset[int], b: frozenset[int], votes: dict[int, bool]
) -> None:
    r = JointConfig(a, b).vote_result(votes)
    ra, rb = oracle_vote(a, votes), oracle_vote(b, votes)
    assert (r is VoteResult.WON) == (ra is VoteResult.WON and rb is VoteResult.WON)
    assert (r is VoteResult.LOST) == (VoteResult.LOST in (ra, rb))


def test_every_progress_state_pair_is_either_in_the_table_or_refused() -> None:
    moves = {
        ProgressState.PROBE: Progress.become_probe,
        ProgressState.REPLICATE: Progress.become_replicate,
        ProgressState.SNAPSHOT: lambda pr: pr.become_snapshot(10),
    }
    for src, dst in itertools.product(ProgressState, ProgressState):
        pr = Progress(5, 4)
        pr.state = src
        if (src, dst) in PROGRESS_TRANSITIONS:
            moves[dst](pr)
            assert pr.state is dst
        else:
            with pytest.raises(IllegalTransition):
                moves[dst](pr)


def test_a_probe_after_a_snapshot_starts_past_the_snapshot() -> None:
    pr = Progress(5, 4, match=3)
    pr.become_snapshot(20)
    pr.become_probe()
    assert pr.next == 21


def test_a_rejection_moves_next_back_to_the_followers_hint_but_never_below_one() -> None:
    pr = Progress(10, 4)
    assert pr.maybe_decr_to(9, 4)
    assert pr.next == 5
    assert not pr.maybe_decr_to(9, 4)  # stale rejection of an old probe
    assert pr.maybe_decr_to(4, 0) and pr.next == 1


def test_a_replicating_peer_goes_back_to_match_plus_one_on_rejection() -> None:
    pr = Progress(10, 4, match=6)
    pr.become_replicate()
    pr.optimistic_update(12)
    assert not pr.maybe_decr_to(5, 0)  # below match: stale
    assert pr.maybe_decr_to(9, 0) and pr.next == 7


def test_inflights_free_acknowledged_appends_in_order_and_refuse_overflow() -> None:
    inf = Inflights(3)
    for i in (2, 4, 6):
        inf.add(i)
    assert inf.full()
    with pytest.raises(OverflowError):
        inf.add(8)
    inf.free_le(4)
    assert inf.count() == 1 and not inf.full()
    inf.free_first_one()
    assert inf.count() == 0
