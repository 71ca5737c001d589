"""Membership changes through RaftNode over the in-memory hub (real threads, fake I/O)."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_platform.application.raft_membership import (
    PENDING,
    decode_addresses,
    encode_addresses,
    refusal,
    unwrap_snapshot,
    wrap_snapshot,
)
from gpu_platform.application.raft_node import (
    InvalidMembershipChange,
    MembershipChangeInProgress,
    NotLeader,
)
from gpu_platform.domain.consensus import (
    ConfChange,
    ConfChangeError,
    ConfChangeSingle,
    ConfChangeTransition,
    ConfChangeType,
    Config,
    ConfState,
    MemoryStorage,
    Raft,
    Role,
)
from tests.unit.application.test_raft_node import WAIT, Cluster, put, wait_for


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    yield c
    c.stop()
    assert c.violations == []


def add(c: Cluster, node_id: int) -> ConfState:
    """Add `node_id` as a voter through whoever leads (retried while leadership moves)."""
    deadline = time.monotonic() + WAIT
    while True:
        lead = c.wait_leader()
        try:
            return c.nodes[lead].add_voter(node_id, f"memory:{node_id}").result(timeout=WAIT)
        except (NotLeader, MembershipChangeInProgress):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def remove(c: Cluster, node_id: int) -> ConfState:
    deadline = time.monotonic() + WAIT
    while True:
        lead = c.wait_leader()
        try:
            return c.nodes[lead].remove_voter(node_id).result(timeout=WAIT)
        except (NotLeader, MembershipChangeInProgress):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def voters_everywhere(c: Cluster, ids: list[int], voters: tuple[int, ...]) -> bool:
    return all(c.nodes[i].status().voters == voters for i in ids)


def test_a_joining_node_starts_empty_and_bootstraps_nothing() -> None:
    c = Cluster(3)
    try:
        node = c.start(4, join=True)
        assert node.status().voters == ()
        assert c.storages[4].last_index() == 0 and c.storages[4].snapshot().is_empty()
        c.wait_leader()
        assert c.nodes[4].status().role is Role.FOLLOWER
    finally:
        c.stop()
    assert c.violations == []


def test_an_added_server_catches_up_by_snapshot_and_counts_toward_the_quorum() -> None:
    c = Cluster(3)
    try:
        for i in range(10):
            c.propose(put(f"k{i}", str(i)))
        c.start(4, join=True)
        cs = add(c, 4)
        assert cs.voters == (1, 2, 3, 4)
        expected = {f"k{i}": str(i) for i in range(10)}
        wait_for(lambda: c.machines[4].dump()["kv"] == expected)
        wait_for(lambda: voters_everywhere(c, [1, 2, 3, 4], (1, 2, 3, 4)))
        # With four voters a quorum is three: cut two originals and nothing commits without 4.
        lead = c.wait_leader()
        others = [i for i in (1, 2, 3) if i != lead]
        c.hub.isolate(others[0])
        c.propose(put("with-4", "yes"))
        wait_for(lambda: c.machines[4].get("with-4") == "yes")
        assert c.storages[4].snapshot().metadata.conf_state.voters == (1, 2, 3, 4)
    finally:
        c.stop()
    assert c.violations == []


def test_a_restarted_joined_node_recovers_its_membership_from_storage() -> None:
    c = Cluster(3)
    try:
        c.start(4, join=True)
        add(c, 4)
        c.propose(put("a", "1"))
        wait_for(lambda: c.machines[4].get("a") == "1")
        c.nodes[4].stop()
        node = c.start(4, join=True)  # the flag no longer matters: storage is not empty
        assert node.status().voters == (1, 2, 3, 4)
        c.propose(put("b", "2"))
        wait_for(lambda: c.machines[4].get("b") == "2")
    finally:
        c.stop()
    assert c.violations == []


def test_a_removed_follower_no_longer_counts_toward_the_quorum() -> None:
    c = Cluster(4)
    try:
        lead = c.wait_leader()
        gone, other = [i for i in c.ids if i != lead][:2]
        cs = remove(c, gone)
        rest = [i for i in c.ids if i != gone]
        assert cs.voters == tuple(rest)
        wait_for(lambda: voters_everywhere(c, rest, tuple(rest)))
        assert all(gone not in c.nodes[i].transport.addresses for i in rest)
        # Two of four would not commit; two of the three remaining voters do.
        c.hub.isolate(gone)
        c.hub.isolate(other)
        c.propose(put("after", "1"))
        assert c.machines[gone].get("after") is None
    finally:
        c.stop()
    assert c.violations == []


def test_a_removed_leader_steps_down_and_the_others_elect_a_new_one() -> None:
    c = Cluster(3)
    try:
        old = c.wait_leader()
        st_ = c.nodes[old].status
        wait_for(lambda: st_().applied >= st_().commit > 1)  # its first entry is applied
        cs = c.nodes[old].remove_voter(old).result(timeout=WAIT)
        rest = [i for i in c.ids if i != old]
        assert cs.voters == tuple(rest)
        new = c.wait_leader(exclude=old)
        assert new in rest
        assert c.nodes[old].status().role is not Role.LEADER
        c.propose(put("x", "1"))
        wait_for(lambda: all(c.machines[i].get("x") == "1" for i in rest))
        with pytest.raises(NotLeader):
            c.nodes[old].propose(put("y", "1")).result(timeout=WAIT)
    finally:
        c.stop()
    assert c.violations == []


def test_a_second_change_while_one_is_pending_is_refused() -> None:
    c = Cluster(3, election_tick=200)  # the lone leader keeps leading while we ask twice
    try:
        lead = c.wait_leader()
        st_ = c.nodes[lead].status
        wait_for(lambda: st_().applied >= st_().commit > 1)
        followers = [i for i in c.ids if i != lead]
        for i in followers:
            c.hub.isolate(i)  # the first change cannot commit
        first = c.nodes[lead].add_voter(4, "memory:4")
        second = c.nodes[lead].remove_voter(followers[0])
        with pytest.raises(MembershipChangeInProgress, match="in progress"):
            second.result(timeout=WAIT)
        assert not first.done() or first.exception() is not None
        c.hub.heal()
    finally:
        c.stop()


def test_invalid_changes_are_refused_with_a_reason_and_followers_refuse_all(
    cluster: Cluster,
) -> None:
    lead = cluster.wait_leader()
    node = cluster.nodes[lead]
    wait_for(lambda: node.status().applied >= node.status().commit > 1)
    with pytest.raises(InvalidMembershipChange, match="already a voter"):
        node.add_voter(lead, f"memory:{lead}").result(timeout=WAIT)
    with pytest.raises(InvalidMembershipChange, match="not a member"):
        node.remove_voter(9).result(timeout=WAIT)
    with pytest.raises(InvalidMembershipChange, match="address"):
        node.add_voter(5, "no-port").result(timeout=WAIT)
    with pytest.raises(InvalidMembershipChange, match="node_id"):
        node.remove_voter(0).result(timeout=WAIT)
    with pytest.raises(InvalidMembershipChange, match="joint"):
        node.propose_conf_change(ConfChange()).result(timeout=WAIT)
    follower = next(i for i in cluster.ids if i != lead)
    with pytest.raises(NotLeader):
        cluster.nodes[follower].add_voter(5, "memory:5").result(timeout=WAIT)


def test_the_transport_learns_a_new_members_address_from_the_change(cluster: Cluster) -> None:
    cluster.start(7, join=True)
    lead = cluster.wait_leader()
    cluster.nodes[lead].add_voter(7, "10.0.0.7:7007").result(timeout=WAIT)
    wait_for(lambda: all(cluster.nodes[i].status().voters == (1, 2, 3, 7) for i in (1, 2, 3)))
    assert all(cluster.nodes[i].transport.addresses[7] == "10.0.0.7:7007" for i in (1, 2, 3))


@given(
    st.dictionaries(
        st.integers(1, 2**32), st.from_regex(r"[a-z0-9.]{1,20}:[0-9]{1,5}", fullmatch=True)
    )
)
def test_addresses_survive_the_conf_change_context_encoding(book: dict[int, str]) -> None:
    assert decode_addresses(encode_addresses(book)) == book


_changes = st.lists(
    st.builds(ConfChangeSingle, st.sampled_from(list(ConfChangeType)), st.integers(1, 6)),
    max_size=3,
)


@st.composite
def _configs(draw: st.DrawFn) -> ConfState:
    voters = draw(st.sets(st.integers(1, 5), min_size=1))
    learners = draw(st.sets(st.integers(1, 6).filter(lambda i: i not in voters)))
    return ConfState(voters=tuple(sorted(voters)), learners=tuple(sorted(learners)))


@given(_configs(), _changes, st.sampled_from(list(ConfChangeTransition)))
def test_a_change_the_driver_lets_through_always_applies_in_the_core(
    cs: ConfState, singles: list[ConfChangeSingle], transition: ConfChangeTransition
) -> None:
    change = ConfChange(tuple(singles), transition)
    raft = Raft(Config(id=1), MemoryStorage(cs), random.Random(0))
    why = refusal(raft, change)
    try:
        raft.apply_conf_change(change)
    except ConfChangeError:
        assert why is not None
    else:
        if why is not None:  # stricter than the core only by the driver's own rules
            assert why == PENDING or "already a voter" in why or "not a member" in why, why


def test_a_restarted_node_learns_members_addresses_from_its_snapshot(cluster: Cluster) -> None:
    lead = cluster.wait_leader()
    st_ = cluster.nodes[lead].status
    wait_for(lambda: st_().applied >= st_().commit > 1)
    # 7 never runs: 1, 2, 3 are still a quorum of four. The change is folded into a snapshot.
    cluster.nodes[lead].add_voter(7, "10.0.0.7:7007").result(timeout=WAIT)
    victim = next(i for i in cluster.ids if i != lead)
    wait_for(lambda: cluster.nodes[victim].status().voters == (1, 2, 3, 7))
    assert cluster.storages[victim].snapshot().metadata.conf_state.voters == (1, 2, 3, 7)
    cluster.nodes[victim].stop()
    node = cluster.start(victim)  # a fresh transport that knows only the hub's nodes
    assert node.transport.addresses[7] == "10.0.0.7:7007"
    assert node.status().voters == (1, 2, 3, 7)


@given(
    st.dictionaries(
        st.integers(1, 2**32), st.from_regex(r"[a-z0-9.]{1,20}:[0-9]{1,5}", fullmatch=True)
    ),
    st.binary(),
)
def test_a_snapshot_keeps_the_address_book_and_the_machines_bytes(
    book: dict[int, str], data: bytes
) -> None:
    assert unwrap_snapshot(wrap_snapshot(book, data)) == (book, data)
    assert unwrap_snapshot(b"") == ({}, b"")
