"""A Raft node over SQLite with the cluster replica: its snapshot is streamed to disk in
pieces (issue 21) and a restarted node restores exactly the state it had."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

from gpu_platform.adapters.outbound.raft_storage import SqliteRaftStorage
from gpu_platform.adapters.outbound.raft_storage.snapshot_chunks import CHUNK
from gpu_platform.adapters.outbound.sim.profiles import profile_node
from gpu_platform.application.cluster_replica import ClusterReplica
from gpu_platform.application.raft_membership import unwrap_snapshot
from gpu_platform.application.raft_node import RaftNode, RaftNodeConfig
from gpu_platform.domain.faults.policy import FaultPolicy
from gpu_platform.domain.job_arrays import SubmitArray
from gpu_platform.domain.membership import RegisterNode
from gpu_platform.domain.model.job import JobSpec
from gpu_platform.domain.model.job_array import parse_array
from gpu_platform.testing.raft_fakes import InMemoryRaftHub, InMemoryRaftTransport

WAIT = 60.0  # generous: the machine is shared; never a timing assert


def _wait(cond: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def _node(path: Path, hub: InMemoryRaftHub) -> tuple[RaftNode, ClusterReplica]:
    replica = ClusterReplica(FaultPolicy(), threading.RLock())
    cfg = RaftNodeConfig(id=1, voters=(1,), tick_interval=0.01, seed=1, snapshot_entries=4)
    node = RaftNode(cfg, SqliteRaftStorage(path), InMemoryRaftTransport(hub, 1), replica)
    node.start()
    _wait(lambda: node.status().leader_id == 1)
    return node, replica


def test_a_restarted_node_restores_the_snapshot_it_streamed_to_disk(tmp_path: Path) -> None:
    path, hub = tmp_path / "raft.db", InMemoryRaftHub()
    try:
        node, replica = _node(path, hub)
        nodes = [RegisterNode(profile_node("dgx-a100", f"n{i}"), 1.0) for i in range(16)]
        spec = JobSpec(("fake-exit", "0"), gpus=1)
        arrays = [SubmitArray(f"a{i}", spec, parse_array("0-799"), 2.0) for i in range(2)]
        for n, command in enumerate([*nodes[:12], *arrays]):
            assert node.propose(replica.encode(command, f"c{n}")).result(timeout=WAIT).error is None
        arrays_at = node.status().applied
        for n, command in enumerate(nodes[12:]):  # enough entries for one more snapshot
            node.propose(replica.encode(command, f"d{n}")).result(timeout=WAIT)
        _wait(lambda: node.status().snapshot_index >= arrays_at)
        before = replica.snapshot()
        node.stop()
        storage = SqliteRaftStorage(path)
        stored = storage.snapshot()
        storage.close()
        assert len(stored.data) > CHUNK  # more than one chunk, read back whole
        _, data = unwrap_snapshot(stored.data)
        assert json.loads(data)["applied_index"] == stored.metadata.index
        again, restored = _node(path, hub)
        _wait(lambda: restored.applied_index == replica.applied_index)
        assert restored.snapshot() == before
        again.stop()
    finally:
        hub.close()
