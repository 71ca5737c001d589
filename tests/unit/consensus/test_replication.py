"""Log replication: the paper's Figures 7 and 8, the consistency check, commit rules."""

from __future__ import annotations

import pytest

from gpu_platform.domain.consensus.errors import LogInvariantError
from gpu_platform.domain.consensus.types import Entry, HardState, Message, MessageType, Role

from ._cluster import Cluster, new_raft, storage_with, take

MT = MessageType

FIG7_LEADER = (1, 1, 1, 4, 4, 5, 5, 6, 6, 6)
FIG7_FOLLOWERS = {
    "a": (1, 1, 1, 4, 4, 5, 5, 6, 6),
    "b": (1, 1, 1, 4),
    "c": (1, 1, 1, 4, 4, 5, 5, 6, 6, 6, 6),
    "d": (1, 1, 1, 4, 4, 5, 5, 6, 6, 6, 7, 7),
    "e": (1, 1, 1, 4, 4, 4, 4),
    "f": (1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 3),
}


def terms_of(r: object) -> list[int]:
    return [e.term for e in r.raft_log.all_entries()]  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", sorted(FIG7_FOLLOWERS))
def test_figure_7_a_new_leader_brings_every_follower_log_into_agreement(name: str) -> None:
    peers = (1, 2, 3)
    lead = new_raft(
        1, storage=storage_with(peers, FIG7_LEADER, hard_state=HardState(8, 0, len(FIG7_LEADER)))
    )
    follower = new_raft(
        2, storage=storage_with(peers, FIG7_FOLLOWERS[name], hard_state=HardState(7))
    )
    c = Cluster({1: lead, 2: follower, 3: None})
    c.hup(1)
    # Node 3 is a black hole; give the leader its vote so that follower d/e/f's refusal
    # (their logs may be more up-to-date) does not matter.
    c.send(Message(MT.VOTE_RESP, 1, 3, term=lead.term))
    assert lead.state is Role.LEADER
    c.propose(1)
    assert terms_of(follower) == terms_of(lead)
    assert terms_of(lead)[: len(FIG7_LEADER)] == list(FIG7_LEADER)  # the leader only appends
    assert follower.raft_log.committed == lead.raft_log.committed == lead.raft_log.last_index()


@pytest.mark.parametrize(("acked", "want_commit"), [(1, 0), (2, 0), (3, 3)])
def test_a_leader_commits_only_entries_of_its_own_term_by_counting_replicas(
    acked: int, want_commit: int
) -> None:
    r = new_raft(1, storage=storage_with((1, 2), (1, 2), hard_state=HardState(term=2)))
    r.become_candidate()
    r.become_leader()  # term 3, appends an empty entry at index 3
    take(r)
    r.step(Message(MT.APP_RESP, 1, 2, term=r.term, index=acked))
    assert r.raft_log.committed == want_commit


def _figure_8_cluster(s1_replicated_current_term: bool) -> Cluster:
    """Figure 8 (c): S1 leads term 4 and has pushed index 2 (term 2) to S2 and S3."""
    peers = (1, 2, 3, 4, 5)
    s1 = new_raft(1, storage=storage_with(peers, (1, 2), hard_state=HardState(term=3, vote=1)))
    s1.become_candidate()
    s1.become_leader()  # term 4; index 3 is S1's own empty entry of term 4
    take(s1)
    cluster = Cluster(
        {
            1: s1,
            2: new_raft(2, storage=storage_with(peers, (1, 2), hard_state=HardState(term=4))),
            3: new_raft(3, storage=storage_with(peers, (1, 2), hard_state=HardState(term=4))),
            4: new_raft(4, storage=storage_with(peers, (1,), hard_state=HardState(term=4))),
            5: new_raft(5, storage=storage_with(peers, (1, 3), hard_state=HardState(term=3))),
        }
    )
    cluster.partition([1], [4, 5])  # S1 reaches only S2 and S3 in this figure
    # Index 2 is now on a majority (S1, S2, S3): S1 learns it from their acknowledgements.
    for peer in (2, 3):
        s1.step(Message(MT.APP_RESP, 1, peer, term=4, index=2))
    take(s1)
    if s1_replicated_current_term:
        for peer in (2, 3):
            cluster.send(Message(MT.APP, peer, 1, 4, 2, 2, (Entry(4, 3),), 0))
    return cluster


def test_figure_8_an_old_term_entry_on_a_majority_is_not_committed_and_may_be_overwritten() -> None:
    c = _figure_8_cluster(s1_replicated_current_term=False)
    assert c[1].raft_log.committed < 2  # counted on a majority, but of term 2 < 4
    c.peers[1] = None  # (d): S1 crashes
    c[5].become_follower(4, 0)
    c.hup(5)  # S5 (last term 3) wins with votes from S2, S3, S4
    assert c[5].state is Role.LEADER
    c.propose(5)
    assert [c[i].raft_log.term(2) for i in (2, 3, 4, 5)] == [3, 3, 3, 3]


def test_figure_8_once_a_current_term_entry_commits_no_stale_candidate_can_win() -> None:
    c = _figure_8_cluster(s1_replicated_current_term=True)
    assert c[1].raft_log.committed == 3  # (e): index 3 (term 4) commits index 2 with it
    c.peers[1] = None
    c[5].become_follower(4, 0)
    c.hup(5)
    assert c[5].state is not Role.LEADER  # S2 and S3 hold term 4 entries: they refuse
    assert [c[i].raft_log.term(2) for i in (2, 3)] == [2, 2]


def test_a_follower_rejects_an_append_whose_previous_entry_does_not_match() -> None:
    f = new_raft(2, terms=(1, 1, 2))
    f.become_follower(3, 1)
    f.step(Message(MT.APP, 2, 1, term=3, log_term=3, index=3, entries=(Entry(3, 4),)))
    (resp,) = take(f)
    assert resp.reject and resp.index == 3
    assert [e.term for e in f.raft_log.all_entries()] == [1, 1, 2]


def test_a_stale_append_does_not_truncate_entries_that_match() -> None:
    f = new_raft(2, terms=(1, 1, 1, 1))
    f.become_follower(1, 1)
    f.step(Message(MT.APP, 2, 1, term=1, log_term=1, index=1, entries=(Entry(1, 2),)))
    assert f.raft_log.last_index() == 4  # a delayed duplicate must not drop 3 and 4


def test_a_conflicting_entry_and_everything_after_it_are_replaced() -> None:
    f = new_raft(2, terms=(1, 1, 1, 1))
    f.become_follower(2, 1)
    f.step(Message(MT.APP, 2, 1, term=2, log_term=1, index=2, entries=(Entry(2, 3),)))
    assert [e.term for e in f.raft_log.all_entries()] == [1, 1, 2]


def test_a_follower_refuses_to_overwrite_a_committed_entry() -> None:
    f = new_raft(2, storage=storage_with((1, 2, 3), (1, 1), hard_state=HardState(1, 0, 2)))
    with pytest.raises(LogInvariantError):
        f.raft_log.maybe_append(1, 1, 2, (Entry(2, 2),))


def test_fast_back_off_skips_a_divergent_term_in_one_round_trip() -> None:
    lead = new_raft(1, storage=storage_with((1, 2, 3), [1] + [5] * 30, hard_state=HardState(5)))
    # The follower has 60 uncommitted entries of term 3 after the common first entry.
    follower = new_raft(2, storage=storage_with((1, 2, 3), [1] + [3] * 60, hard_state=HardState(4)))
    c = Cluster({1: lead, 2: follower, 3: None})
    c.hup(1)
    c.send(Message(MT.VOTE_RESP, 1, 3, term=lead.term))
    assert lead.state is Role.LEADER
    rejections = [m for m in c.delivered if m.type is MT.APP_RESP and m.reject]
    assert len(rejections) <= 3  # one per divergent term, not one per entry
    assert terms_of(follower) == terms_of(lead)


def test_followers_learn_the_commit_index_from_the_next_append_or_heartbeat() -> None:
    c = Cluster.of(3)
    c.hup(1)
    c.propose(1, b"a")
    assert all(c[i].raft_log.committed == 2 for i in (1, 2, 3))


def test_a_leader_sends_one_probe_per_heartbeat_to_an_unresponsive_follower() -> None:
    c = Cluster({1: new_raft(1), 2: new_raft(2), 3: None})
    c.hup(1)
    lead = c[1]
    assert lead.prs.progress[3].probe_sent  # the first append to 3 is an unanswered probe
    apps_to_3 = 0
    for i in range(3):
        lead.step(Message(MT.PROP, 1, 1, entries=(Entry(0, 0, data=b"q%d" % i),)))
        apps_to_3 += sum(1 for m in take(lead) if m.type is MT.APP and m.to == 3)
    assert apps_to_3 == 0  # paused while the probe is outstanding
    lead.step(Message(MT.HEARTBEAT_RESP, 1, 3, term=lead.term))
    assert sum(1 for m in take(lead) if m.type is MT.APP and m.to == 3) == 1


def test_a_replicating_follower_gets_at_most_max_inflight_unacknowledged_appends() -> None:
    c = Cluster.of(3, max_inflight_msgs=3, max_size_per_msg=0)
    c.hup(1)
    lead = c[1]
    c.peers[2] = c.peers[3] = None  # acknowledgements stop arriving
    apps = 0
    for i in range(10):
        lead.step(Message(MT.PROP, 1, 1, entries=(Entry(0, 0, data=b"%d" % i),)))
        apps += sum(1 for m in take(lead) if m.type is MT.APP and m.to == 2)
    assert apps == 3
    assert lead.prs.progress[2].is_paused()


def test_without_batching_each_append_carries_one_entry_and_with_batching_one_carries_all() -> None:
    for limit, want in ((0, {1}), (1 << 20, {5})):
        c = Cluster.of(3, max_size_per_msg=limit)
        c.hup(1)
        c.peers[2] = c.peers[3] = None
        lead = c[1]
        lead.prs.progress[2].become_probe()
        lead.prs.progress[2].probe_sent = True  # hold sends while we propose
        lead.step(
            Message(MT.PROP, 1, 1, entries=tuple(Entry(0, 0, data=b"%d" % i) for i in range(5)))
        )
        take(lead)
        lead.prs.progress[2].probe_sent = False
        lead.prs.progress[2].next = lead.raft_log.last_index() - 4
        from gpu_platform.domain.consensus import leader

        leader.maybe_send_append(lead, 2, send_if_empty=False)
        (app,) = take(lead)
        assert {len(app.entries)} == want
