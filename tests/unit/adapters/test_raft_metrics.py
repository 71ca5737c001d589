"""Raft series of a three-peer RaftNode cluster (real threads, in-memory hub and storage):
term, leadership, log size, leader changes and commit latency, scraped and parsed as
Prometheus would."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpu_platform.adapters.outbound.observability import PrometheusRaftMetrics
from gpu_platform.application.raft_node import NotLeader, RaftNode, RaftNodeConfig
from gpu_platform.domain.consensus import Role
from gpu_platform.testing.raft_fakes import InMemoryRaftHub, InMemoryRaftStorage
from gpu_platform.testing.raft_kv import KvStateMachine

IDS = (1, 2, 3)


def wait_for(cond: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


class Peers:
    def __init__(self) -> None:
        self.hub = InMemoryRaftHub()
        self.registries = {i: CollectorRegistry() for i in IDS}
        self.nodes: dict[int, RaftNode] = {}
        for i in IDS:
            metrics = PrometheusRaftMetrics(self.registries[i], i)
            cfg = RaftNodeConfig(id=i, voters=IDS, tick_interval=0.01, seed=i)
            node = RaftNode(
                cfg, InMemoryRaftStorage(), self.hub.transport(i), KvStateMachine(), metrics
            )
            metrics.watch(node.status)
            self.nodes[i] = node
            node.start()

    def leader(self, exclude: int | None = None) -> int:
        def one() -> bool:
            leads = [
                i
                for i, n in self.nodes.items()
                if n.status().running and n.status().role is Role.LEADER and i != exclude
            ]
            return len(leads) == 1

        wait_for(one)
        return next(
            i
            for i, n in self.nodes.items()
            if n.status().running and n.status().role is Role.LEADER and i != exclude
        )

    def scrape(self, i: int) -> dict[str, float]:
        text = generate_latest(self.registries[i]).decode()
        return {
            s.name + ("" if "le" not in s.labels else f"[{s.labels['le']}]"): s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.labels.get("raft_id") == str(i)
        }

    def stop(self) -> None:
        for n in self.nodes.values():
            n.stop()
        self.hub.close()


@pytest.fixture
def peers() -> Iterator[Peers]:
    p = Peers()
    yield p
    p.stop()


def propose(peers: Peers, n: int) -> int:
    """Commit `n` puts at the leader (retrying if leadership moves); return the leader."""
    done = 0
    while done < n:
        lead = peers.leader()
        data = json.dumps({"key": f"k{done}", "value": "v"}).encode()
        try:
            peers.nodes[lead].propose(data).result(timeout=30)
            done += 1
        except NotLeader:
            continue
    return lead


def test_the_leader_reports_its_term_leadership_log_and_commit_latency(peers: Peers) -> None:
    lead = propose(peers, 5)
    wait_for(lambda: peers.scrape(lead)["gpu_platform_raft_commit_latency_seconds_count"] >= 5)
    s = peers.scrape(lead)
    status = peers.nodes[lead].status()
    assert s["gpu_platform_raft_is_leader"] == 1
    assert s["gpu_platform_raft_term"] == status.term >= 2  # bootstrapped at 1, then elected
    assert s["gpu_platform_raft_log_entries"] >= 5
    assert s["gpu_platform_raft_commit_index"] >= s["gpu_platform_raft_applied_index"] >= 6
    assert s["gpu_platform_raft_commit_latency_seconds_bucket[+Inf]"] >= 5
    assert s["gpu_platform_raft_leader_changes_total"] >= 1
    for follower in set(IDS) - {lead}:
        # A commit needs one follower; the other may hear of the leader a moment later.
        wait_for(lambda f=follower: peers.scrape(f)["gpu_platform_raft_leader_changes_total"] >= 1)
        f = peers.scrape(follower)
        assert f["gpu_platform_raft_is_leader"] == 0
        assert "gpu_platform_raft_commit_latency_seconds_count" not in f  # proposes nothing


def test_a_new_leader_after_a_stop_counts_as_a_leader_change_in_a_higher_term(
    peers: Peers,
) -> None:
    old = propose(peers, 1)
    survivor = next(i for i in IDS if i != old)
    wait_for(lambda: peers.scrape(survivor).get("gpu_platform_raft_leader_changes_total", 0) >= 1)
    before = peers.scrape(survivor)
    peers.nodes[old].stop()
    new = peers.leader(exclude=old)
    wait_for(
        lambda: (
            peers.scrape(survivor)["gpu_platform_raft_leader_changes_total"]
            > before["gpu_platform_raft_leader_changes_total"]
        )
    )
    after = peers.scrape(survivor)
    assert after["gpu_platform_raft_term"] > before["gpu_platform_raft_term"]
    assert peers.scrape(new)["gpu_platform_raft_is_leader"] == 1
