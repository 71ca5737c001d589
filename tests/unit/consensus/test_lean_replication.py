"""`Config.lean_replication` (issue 21): a commit is not broadcast as empty appends (its index
goes with the next append or heartbeat), and a periodic heartbeat round skips a follower that
got an append since the last round, already knows the commit index and streams appends
(REPLICATE, room in flight); probes, full inflights, read-index rounds and idle followers are
heartbeated as before."""

from __future__ import annotations

from gpu_platform.domain.consensus.types import Entry, Message, MessageType, Role

from ._cluster import Cluster, new_raft, take

MT = MessageType


def _beat_targets(c: Cluster) -> list[int]:
    """Followers heartbeated by one periodic round of leader 1 (the beats are delivered)."""
    lead = c[1]
    lead.step(Message(MT.BEAT, 1, 1))
    beats = [m for m in take(lead) if m.type is MT.HEARTBEAT]
    c.send(*beats)
    return sorted(m.to for m in beats)


def _propose_undelivered(c: Cluster, data: bytes) -> None:
    """Leader 1 appends `data` and sends it; the appends arrive, their answers do not."""
    lead = c[1]
    lead.step(Message(MT.PROP, 1, 1, entries=(Entry(0, 0, data=data),)))
    for m in take(lead):
        c[m.to].step(m)
        take(c[m.to])


def test_a_commit_is_not_broadcast_as_empty_appends() -> None:
    lean, plain = Cluster.of(3, lean_replication=True), Cluster.of(3)
    for c in (lean, plain):
        c.hup(1)
        c.delivered.clear()
        c.propose(1, b"a")
    assert [m.type for m in lean.delivered].count(MT.APP) == 2  # the entry, once to each
    assert [m.type for m in plain.delivered].count(MT.APP) == 4  # ... then the commit index
    assert all(lean[i].raft_log.committed == 1 for i in (2, 3))  # not yet the new entry
    assert _beat_targets(lean) == [2, 3]  # the next round carries it
    assert all(lean[i].raft_log.committed == 2 for i in (2, 3))


def test_a_round_skips_followers_that_got_an_append_carrying_the_commit_index() -> None:
    c = Cluster.of(3, lean_replication=True)
    c.hup(1)
    c.propose(1, b"a")
    assert _beat_targets(c) == [2, 3]  # they lack the commit of "a"
    _propose_undelivered(c, b"b")  # its appends carry the commit of "a"
    assert _beat_targets(c) == []
    assert _beat_targets(c) == [2, 3]  # nothing appended since the last round


def test_without_the_option_every_round_heartbeats_every_follower() -> None:
    c = Cluster.of(3)
    c.hup(1)
    c.propose(1, b"a")
    _propose_undelivered(c, b"b")
    assert _beat_targets(c) == [2, 3]
    assert _beat_targets(c) == [2, 3]


def test_a_read_index_round_heartbeats_every_follower_however_recent_their_appends() -> None:
    c = Cluster.of(3, lean_replication=True)
    c.hup(1)
    c.propose(1, b"a")
    _beat_targets(c)
    _propose_undelivered(c, b"b")
    lead = c[1]
    lead.step(Message(MT.READ_INDEX, from_=1, context=b"ctx"))
    beats = [m for m in take(lead) if m.type is MT.HEARTBEAT]
    assert sorted(m.to for m in beats) == [2, 3]
    assert all(m.context == b"ctx" for m in beats)


def test_an_unresponsive_follower_being_probed_still_gets_every_heartbeat() -> None:
    c = Cluster({1: new_raft(1, lean_replication=True), 2: new_raft(2), 3: None})
    c.hup(1)
    lead = c[1]
    assert lead.prs.progress[3].probe_sent  # its first append is an unanswered probe
    assert 3 in _beat_targets(c)  # the answer to this heartbeat resumes the probing
    assert 3 in _beat_targets(c)


def test_a_follower_whose_inflight_window_is_full_still_gets_every_heartbeat() -> None:
    c = Cluster.of(3, lean_replication=True, max_inflight_msgs=2, max_size_per_msg=0)
    c.hup(1)
    lead = c[1]
    c.peers[3] = None  # 3's answers stop
    for i in range(4):
        lead.step(Message(MT.PROP, 1, 1, entries=(Entry(0, 0, data=b"%d" % i),)))
        c.send(*[m for m in take(lead) if m.to == 2])
    assert lead.prs.progress[3].inflights.full()
    _propose_undelivered(c, b"x")  # 2 gets an append carrying the commit index
    assert _beat_targets(c) == [3]


def test_under_steady_proposals_followers_track_every_commit_and_never_campaign() -> None:
    c = Cluster.of(3, lean_replication=True, check_quorum=True, pre_vote=True, election_tick=5)
    c.hup(1)
    term = c[1].term
    for i in range(60):
        c.propose(1, b"w%d" % i)
        for node in (1, 2, 3):
            c.tick(node)
        # within one round every follower knows every commit
        assert all(c[f].raft_log.committed == c[1].raft_log.committed for f in (2, 3))
    assert c[1].state is Role.LEADER
    assert all(c[i].term == term for i in (1, 2, 3))
