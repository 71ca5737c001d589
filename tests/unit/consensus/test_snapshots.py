"""Snapshots, log compaction, InstallSnapshot, crash and restart from storage."""

from __future__ import annotations

import pytest

from gpu_platform.domain.consensus.errors import (
    CompactedError,
    SnapshotOutOfDateError,
    UnavailableError,
)
from gpu_platform.domain.consensus.storage import MemoryStorage
from gpu_platform.domain.consensus.tracker import ProgressState
from gpu_platform.domain.consensus.types import (
    ConfState,
    Entry,
    HardState,
    Message,
    MessageType,
    Snapshot,
    SnapshotMetadata,
)
from gpu_platform.testing.raft_network import Faults, NodeOptions, RaftNetwork

from ._cluster import new_raft, storage_with, take

MT = MessageType
SEED_LOSING_A_SNAPSHOT = 0


def elected(net: RaftNetwork) -> int:
    assert net.run_until(lambda: net.leader() is not None, 200) is not None
    lead = net.leader()
    assert lead is not None
    return lead


def test_a_follower_behind_a_compacted_log_catches_up_through_a_snapshot() -> None:
    net = RaftNetwork([1, 2, 3], seed=3, options=NodeOptions(snapshot_every=5))
    lead = elected(net)
    lagging = next(i for i in (1, 2, 3) if i != lead)
    net.crash(lagging)
    for i in range(30):
        assert net.propose(b"v%d" % i)
    net.run(2)
    assert net.nodes[lead].storage.first_index() > 2  # the leader compacted its log
    net.restart(lagging)
    net.run(30)
    assert net.nodes[lagging].applied == net.nodes[lead].applied
    assert net.nodes[lagging].digest == net.nodes[lead].digest
    assert net.nodes[lagging].storage.snapshot().metadata.index > 1
    status = net.nodes[net.leader() or 0].node.status()
    assert status.progress[lagging].state is ProgressState.REPLICATE


def test_a_snapshot_older_than_the_commit_index_is_ignored() -> None:
    r = new_raft(2, storage=storage_with((1, 2), (1, 1, 1), hard_state=HardState(1, 0, 3)))
    snap = Snapshot(b"", SnapshotMetadata(ConfState(voters=(1, 2)), index=2, term=1))
    r.step(Message(MT.SNAP, 2, 1, term=1, snapshot=snap))
    (resp,) = take(r)
    assert resp.type is MT.APP_RESP and resp.index == 3
    assert r.raft_log.unstable.snapshot is None


def test_a_snapshot_whose_last_entry_we_hold_only_fast_forwards_the_commit_index() -> None:
    r = new_raft(2, storage=storage_with((1, 2), (1, 1, 1), hard_state=HardState(1, 0, 1)))
    snap = Snapshot(b"", SnapshotMetadata(ConfState(voters=(1, 2)), index=2, term=1))
    r.step(Message(MT.SNAP, 2, 1, term=1, snapshot=snap))
    assert r.raft_log.committed == 2 and r.raft_log.unstable.snapshot is None


def test_a_newer_snapshot_replaces_the_log_and_the_configuration() -> None:
    r = new_raft(2, storage=storage_with((1, 2), (1, 1), hard_state=HardState(1, 0, 1)))
    snap = Snapshot(b"s", SnapshotMetadata(ConfState(voters=(1, 2, 3)), index=10, term=2))
    r.step(Message(MT.SNAP, 2, 1, term=2, snapshot=snap))
    assert r.raft_log.committed == 10 and r.raft_log.last_index() == 10
    assert r.prs.voter_nodes() == [1, 2, 3]
    (resp,) = take(r)
    assert resp.index == 10 and not resp.reject


def test_memory_storage_refuses_compacted_unavailable_and_stale_snapshot_requests() -> None:
    s = MemoryStorage(ConfState(voters=(1,)))
    s.append([Entry(1, i) for i in range(1, 6)])
    s.create_snapshot(3, ConfState(voters=(1,)), b"x")
    s.compact(3)
    assert s.first_index() == 4 and s.last_index() == 5
    with pytest.raises(CompactedError):
        s.entries(2, 4, 1 << 20)
    with pytest.raises(CompactedError):
        s.term(2)
    with pytest.raises(UnavailableError):
        s.term(6)
    with pytest.raises(SnapshotOutOfDateError):
        s.create_snapshot(2, ConfState(voters=(1,)), b"")
    with pytest.raises(SnapshotOutOfDateError):
        s.apply_snapshot(Snapshot(b"", SnapshotMetadata(ConfState(), 3, 1)))


def test_a_crashed_node_restarts_with_its_term_vote_and_log_and_reapplies_committed_entries() -> (
    None
):
    net = RaftNetwork([1, 2, 3], seed=5)
    lead = elected(net)
    for i in range(5):
        net.propose(b"e%d" % i)
    net.run(3)
    follower = next(i for i in (1, 2, 3) if i != lead)
    before = net.nodes[follower].node.raft
    term, vote, last = before.term, before.vote, before.raft_log.last_index()
    net.crash(follower)
    net.restart(follower)
    after = net.nodes[follower].node.raft
    assert (after.term, after.vote, after.raft_log.last_index()) == (term, vote, last)
    net.run(3)
    assert net.committed_payloads(follower) == [b"e%d" % i for i in range(5)]


def test_a_whole_cluster_restart_loses_no_committed_entry() -> None:
    net = RaftNetwork([1, 2, 3], seed=8, options=NodeOptions(snapshot_every=4))
    elected(net)
    for i in range(10):
        net.propose(b"k%d" % i)
    net.run(3)
    digest = net.nodes[1].digest
    for i in (1, 2, 3):
        net.crash(i)
    for i in (1, 2, 3):
        net.restart(i)
    elected(net)
    net.propose(b"after")
    net.run(5)
    applied = net.nodes[1].applied
    assert all(net.nodes[i].applied == applied for i in (2, 3))
    assert all(net.nodes[i].digest == net.nodes[1].digest for i in (2, 3))
    assert applied >= 14  # bootstrap, 2 leader no-ops, 10 entries and "after"
    assert digest in net.digests.values()  # the pre-crash state is a prefix of today's


def test_a_lost_snapshot_is_reported_and_sent_again_until_the_follower_catches_up() -> None:
    net = RaftNetwork([1, 2, 3], seed=SEED_LOSING_A_SNAPSHOT, options=NodeOptions(snapshot_every=3))
    lead = elected(net)
    lagging = next(i for i in (1, 2, 3) if i != lead)
    net.crash(lagging)
    for i in range(12):
        net.propose(b"s%d" % i)
    net.run(2)
    net.faults = Faults(drop=0.5)
    net.restart(lagging)
    caught_up = net.run_until(
        lambda: net.nodes[lagging].applied == net.nodes[net.leader() or lead].applied, 500
    )
    assert caught_up is not None
    assert net.snapshots_lost >= 1 and net.snapshots_delivered >= 1


def test_a_leader_in_snapshot_state_probes_again_once_the_snapshot_is_reported() -> None:
    r = new_raft(1, storage=storage_with((1, 2), (1, 1, 1)))
    r.become_candidate()
    r.become_leader()
    pr = r.prs.progress[2]
    pr.become_snapshot(3)
    for ok in (False, True):
        pr.become_snapshot(3) if pr.state is not ProgressState.SNAPSHOT else None
        r.step(Message(MT.SNAP_STATUS, 1, 2, reject=not ok))
        assert pr.state is ProgressState.PROBE and pr.probe_sent
        assert pr.next == (4 if ok else 1)
        pr.match = 0
