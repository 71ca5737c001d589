"""PrometheusRaftMetrics: a Raft peer's term, leadership, log size and commit latency.

Counters and the commit-latency histogram are fed by `RaftNode` through the `RaftMetrics`
port; the gauges are read from `RaftNode.status()` at scrape time (`watch`), so they are never
stale. Every series carries `raft_id`, the peer's id, so one registry can watch several peers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gpu_platform.application.raft_node import RaftNodeStatus
from gpu_platform.domain.consensus import Role

__all__ = ["COMMIT_BUCKETS_S", "PrometheusRaftMetrics"]

COMMIT_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


class _RaftCollector(Collector):
    def __init__(self, status: Callable[[], RaftNodeStatus]) -> None:
        self._status = status

    def collect(self) -> Iterator[GaugeMetricFamily]:
        s = self._status()
        rid = [str(s.id)]

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            family = GaugeMetricFamily(name, doc, labels=["raft_id"])
            family.add_metric(rid, value)
            return family

        yield gauge("gpu_platform_raft_term", "Current Raft term", s.term)
        yield gauge(
            "gpu_platform_raft_is_leader", "1 while this peer is the leader", s.role is Role.LEADER
        )
        yield gauge("gpu_platform_raft_commit_index", "Highest committed log index", s.commit)
        yield gauge("gpu_platform_raft_applied_index", "Highest applied log index", s.applied)
        yield gauge(
            "gpu_platform_raft_log_entries",
            "Log entries kept after the latest snapshot",
            max(0, s.last_index - s.snapshot_index),
        )


class PrometheusRaftMetrics:
    """Implements RaftMetrics for the peer `raft_id` on `registry`."""

    def __init__(self, registry: CollectorRegistry, raft_id: int) -> None:
        self._registry = registry
        self._id = str(raft_id)
        self.leader_changes = Counter(
            "gpu_platform_raft_leader_changes",
            "Times this peer learnt of a new leader (itself included)",
            ["raft_id"],
            registry=registry,
        )
        self.leader_changes.labels(raft_id=self._id)  # the series exists at 0 from the start
        self.commit_latency = Histogram(
            "gpu_platform_raft_commit_latency_seconds",
            "Time from a proposal on the leader to its entry applied there",
            ["raft_id"],
            buckets=COMMIT_BUCKETS_S,
            registry=registry,
        )

    def watch(self, status: Callable[[], RaftNodeStatus]) -> None:
        """Export the peer's gauges, read from `status` (RaftNode.status) at scrape time."""
        self._registry.register(_RaftCollector(status))

    def leader_changed(self, leader_id: int | None, term: int) -> None:
        if leader_id is not None:  # losing a leader is not a change until the next one is known
            self.leader_changes.labels(raft_id=self._id).inc()

    def committed(self, latency_s: float) -> None:
        self.commit_latency.labels(raft_id=self._id).observe(latency_s)
