"""`Config.quiet_heartbeats` (issue 21): a periodic heartbeat round skips a follower that got an
append since the last round while it streams appends (REPLICATE, room in flight); everything
else — probes, full inflights, read-index rounds, idle followers — is heartbeated as before."""

from __future__ import annotations

from gpu_platform.domain.consensus.types import Entry, Message, MessageType, Role

from ._cluster import Cluster, new_raft, take

MT = MessageType


def _beat_targets(c: Cluster) -> list[int]:
    lead = c[1]
    lead.step(Message(MT.BEAT, 1, 1))
    return sorted(m.to for m in take(lead) if m.type is MT.HEARTBEAT)


def test_a_round_skips_followers_that_got_an_append_since_the_last_one() -> None:
    c = Cluster.of(3, quiet_heartbeats=True)
    c.hup(1)
    c.propose(1, b"a")  # appends to 2 and 3, then the commit index, all answered
    assert _beat_targets(c) == []
    assert _beat_targets(c) == [2, 3]  # nothing appended since the last round
    c.propose(1, b"b")
    assert _beat_targets(c) == []


def test_without_the_option_every_round_heartbeats_every_follower() -> None:
    c = Cluster.of(3)
    c.hup(1)
    c.propose(1, b"a")
    assert _beat_targets(c) == [2, 3]
    assert _beat_targets(c) == [2, 3]


def test_a_read_index_round_heartbeats_every_follower_however_recent_their_appends() -> None:
    c = Cluster.of(3, quiet_heartbeats=True)
    c.hup(1)
    c.propose(1, b"a")
    lead = c[1]
    lead.step(Message(MT.READ_INDEX, from_=1, context=b"ctx"))
    beats = [m for m in take(lead) if m.type is MT.HEARTBEAT]
    assert sorted(m.to for m in beats) == [2, 3]
    assert all(m.context == b"ctx" for m in beats)


def test_an_unresponsive_follower_being_probed_still_gets_every_heartbeat() -> None:
    c = Cluster({1: new_raft(1, quiet_heartbeats=True), 2: new_raft(2), 3: None})
    c.hup(1)
    lead = c[1]
    assert lead.prs.progress[3].probe_sent  # its first append is an unanswered probe
    assert 3 in _beat_targets(c)  # the answer to this heartbeat resumes the probing
    assert 3 in _beat_targets(c)


def test_a_follower_whose_inflight_window_is_full_still_gets_every_heartbeat() -> None:
    c = Cluster.of(3, quiet_heartbeats=True, max_inflight_msgs=2, max_size_per_msg=0)
    c.hup(1)
    lead = c[1]
    c.peers[3] = None  # 3's answers stop
    for i in range(4):
        lead.step(Message(MT.PROP, 1, 1, entries=(Entry(0, 0, data=b"%d" % i),)))
        c.send(*[m for m in take(lead) if m.to == 2])
    assert lead.prs.progress[3].inflights.full()
    assert _beat_targets(c) == [3]  # 2 got appends and answers them; 3 is heartbeated


def test_followers_fed_only_appends_never_campaign_and_the_leader_keeps_its_quorum() -> None:
    c = Cluster.of(3, quiet_heartbeats=True, check_quorum=True, pre_vote=True, election_tick=5)
    c.hup(1)
    term = c[1].term
    for i in range(60):  # a proposal every tick: no heartbeat needs to go at all
        c.propose(1, b"w%d" % i)
        for node in (1, 2, 3):
            c.tick(node)
    assert c[1].state is Role.LEADER
    assert all(c[i].term == term for i in (1, 2, 3))
    assert all(c[i].raft_log.committed == c[1].raft_log.last_index() for i in (2, 3))
    assert not any(m.type is MT.HEARTBEAT for m in c.delivered[-60:])
