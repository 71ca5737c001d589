"""One test per safety sentence of the Raft paper (Figure 3), on random chaos schedules.

Each property is checked after every tick of many seeded runs mixing drops, duplicates,
delays, partitions, crashes and restarts. The last tests show each checker is not vacuous:
it does fire on a fabricated violation.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.domain.consensus.types import Entry, Role
from gpu_platform.testing.raft_network import (
    Faults,
    NodeOptions,
    RaftNetwork,
    SafetyViolation,
)

CHAOS = Faults(drop=0.1, duplicate=0.1, max_delay=3)


def chaos_run(seed: int, n: int, pre_vote: bool, check: Callable[[RaftNetwork], None]) -> None:
    """~400 ticks: proposals, a partition of a random minority/majority, crashes, restarts."""
    net = RaftNetwork(
        range(1, n + 1),
        seed,
        faults=CHAOS,
        options=NodeOptions(pre_vote=pre_vote, check_quorum=pre_vote, snapshot_every=7),
        check_every_step=False,
    )
    rng = net.rng
    for t in range(400):
        if t % 3 == 0:
            net.propose(b"t%d" % t, via=rng.randint(1, n))
        if t % 60 == 20:
            cut = rng.sample(range(1, n + 1), rng.randint(1, n - 1))
            net.partition(cut, [i for i in range(1, n + 1) if i not in cut])
        if t % 60 == 45:
            net.heal()
        if t % 90 == 30:
            victim = rng.randint(1, n)
            if net.nodes[victim].alive and sum(x.alive for x in net.nodes.values()) > n // 2 + 1:
                net.crash(victim)
        if t % 90 == 70:
            for i, node in net.nodes.items():
                if not node.alive:
                    net.restart(i)
        net.tick()
        check(net)


runs = settings(max_examples=6, deadline=None)
params = given(seed=st.integers(0, 2**32 - 1), n=st.sampled_from([3, 5]), pre_vote=st.booleans())


@runs
@params
def test_election_safety_at_most_one_leader_can_be_elected_in_a_given_term(
    seed: int, n: int, pre_vote: bool
) -> None:
    chaos_run(seed, n, pre_vote, RaftNetwork.check_election_safety)


@runs
@params
def test_leader_append_only_a_leader_never_overwrites_or_deletes_entries_in_its_log(
    seed: int, n: int, pre_vote: bool
) -> None:
    chaos_run(seed, n, pre_vote, RaftNetwork.check_leader_append_only)


@runs
@params
def test_log_matching_logs_with_an_entry_of_same_index_and_term_are_identical_up_to_it(
    seed: int, n: int, pre_vote: bool
) -> None:
    def every_tenth_tick(net: RaftNetwork) -> None:
        if net.now % 10 == 0:
            net.check_log_matching()

    chaos_run(seed, n, pre_vote, every_tenth_tick)


@runs
@params
def test_leader_completeness_a_committed_entry_is_in_the_logs_of_all_later_leaders(
    seed: int, n: int, pre_vote: bool
) -> None:
    chaos_run(seed, n, pre_vote, RaftNetwork.check_leader_completeness)


@runs
@params
def test_state_machine_safety_no_two_servers_apply_different_entries_at_one_index(
    seed: int, n: int, pre_vote: bool
) -> None:
    chaos_run(seed, n, pre_vote, RaftNetwork.check_state_machine_safety)


# ----------------------------------------------------------------- the checkers are not vacuous
def settled(seed: int = 1) -> RaftNetwork:
    net = RaftNetwork([1, 2, 3], seed, check_every_step=False)
    assert net.run_until(lambda: net.leader() is not None, 300) is not None
    for i in range(3):
        net.propose(b"%d" % i)
    net.run(3)
    return net


def test_the_election_safety_checker_fires_on_two_leaders_in_one_term() -> None:
    net = settled()
    lead = net.leader()
    other = next(i for i in (1, 2, 3) if i != lead)
    r = net.nodes[other].node.raft
    r.state, r.term = Role.LEADER, net.nodes[lead or 0].node.raft.term
    with pytest.raises(SafetyViolation, match="election safety"):
        net.check_election_safety()


def test_the_leader_append_only_checker_fires_when_a_leader_rewrites_its_log() -> None:
    net = settled()
    lead = net.leader() or 0
    net.check_leader_append_only()
    log = net.nodes[lead].node.raft.raft_log
    last = log.last_index()
    log.unstable.truncate_and_append([Entry(99, last)])
    with pytest.raises(SafetyViolation, match="append-only"):
        net.check_leader_append_only()


def test_the_log_matching_checker_fires_on_logs_that_agree_late_but_differ_early() -> None:
    net = settled()
    log = net.nodes[1].node.raft.raft_log
    first = log.first_index()
    entries = log.all_entries()
    forged = [
        Entry(e.term, e.index, e.type, b"forged" if e.index == first else e.data) for e in entries
    ]
    log.unstable.offset, log.unstable.entries = first, forged
    with pytest.raises(SafetyViolation, match="log matching"):
        net.check_log_matching()


def test_the_leader_completeness_checker_fires_on_a_leader_missing_a_committed_entry() -> None:
    net = settled()
    lead = net.leader() or 0
    missing = net.nodes[lead].node.raft.raft_log.last_index() + 5
    net.committed_terms[missing] = 1
    net.history.committed_in[missing] = 1
    with pytest.raises(SafetyViolation, match="leader completeness"):
        net.check_leader_completeness()


def test_the_state_machine_safety_checker_fires_on_a_diverging_state() -> None:
    net = settled()
    net.nodes[2].digest = b"\x01" * 32
    with pytest.raises(SafetyViolation, match="state machine safety"):
        net.check_state_machine_safety()


def test_the_linearizability_checker_fires_on_a_stale_read() -> None:
    net = settled()
    lead = net.leader() or 0
    net.nodes[lead].pending_reads[b"stale"] = 10**6
    net.read(lead, b"stale-probe")  # an ordinary read, answered normally
    net.nodes[lead].pending_reads[b"late"] = 10**6
    with pytest.raises(SafetyViolation, match="linearizability"):
        net.call(lead, lambda rn: rn.read_index(b"late"))
        net.run(2)
