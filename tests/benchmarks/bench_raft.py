"""Entries committed per second through the pure Raft core on the simulated network.

Each round, the client proposes at the leader (one entry, or a batch of `batch` entries in one
proposal) and the zero-delay network delivers messages until quiet: appends out, acks back,
commit, the commit index out, every node applies. A round's time divided by its entries is one
sample (amortized microseconds per committed entry), so `ops_per_s` is committed entries per
second. "unbatched" also caps appends at one entry per message (`max_size_per_msg=0`).
Everything runs in one process: the figures are the cost of the core plus the simulated driver
(persist to MemoryStorage, apply into a SHA-256 chain), without I/O — the ceiling issue 10's
gRPC/disk wiring can reach, not a prediction of it. Baseline: the unbatched figure of the same
cluster size, measured in the same run.
"""

from __future__ import annotations

import time
from typing import Any

from _harness import baseline, result

from gpu_platform.domain.consensus.storage import NO_LIMIT
from gpu_platform.testing.raft_network import NodeOptions, RaftNetwork

PAYLOAD = b"x" * 64


def measure(nodes: int, batch: int, total: int) -> tuple[list[float], float]:
    """Per-entry samples (µs) and overall committed entries per second."""
    options = NodeOptions(max_size_per_msg=NO_LIMIT if batch > 1 else 0, max_inflight_msgs=256)
    net = RaftNetwork(range(1, nodes + 1), seed=1, options=options, check_every_step=False)
    assert net.run_until(lambda: net.leader() is not None, 500) is not None
    lead = net.leader()
    assert lead is not None
    raft = net.nodes[lead].node.raft
    samples: list[float] = []
    clock = time.perf_counter_ns
    start = clock()
    for _ in range(total // batch):
        t0 = clock()
        if batch == 1:
            ok = net.propose(PAYLOAD, via=lead)
        else:
            ok = net.propose_many([PAYLOAD] * batch, via=lead)
        net.deliver_due()
        samples.append((clock() - t0) / 1000.0 / batch)
        assert ok and raft.raft_log.committed == raft.raft_log.last_index()
    elapsed = (clock() - start) / 1e9
    applied = {n.applied for n in net.nodes.values()}
    assert applied == {raft.raft_log.committed}, "every node must have applied everything"
    net.check_invariants()
    return samples, (total // batch) * batch / elapsed


def run(quick: bool) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    unbatched_total = 1_000 if quick else 5_000
    batched_total = 8_000 if quick else 50_000
    for nodes in (3, 5):
        samples, eps = measure(nodes, 1, unbatched_total)
        base = result(
            "raft.core.commits",
            {"nodes": nodes, "batch": 1, "entries": unbatched_total},
            samples,
            extra={"entries_per_s_overall": round(eps, 1)},
        )
        rows.append(base)
        for batch in (16, 256):
            samples, eps = measure(nodes, batch, batched_total)
            rows.append(
                result(
                    "raft.core.commits",
                    {"nodes": nodes, "batch": batch, "entries": batched_total},
                    samples,
                    baseline=baseline("unbatched (batch=1)", base),
                    extra={"entries_per_s_overall": round(eps, 1)},
                )
            )
    return rows
