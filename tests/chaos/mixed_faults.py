"""`control_plane.mixed_faults`: 3 `serve` servers and 2 agents under the job workload
(`workload.JobWorkload`: held jobs, real running jobs, every operation recorded), while each
of `rounds` rounds injects one fault drawn from:

* `leader-kill` — kill -9 the leader, wait for another, restart it;
* `leader-sigstop` — SIGSTOP the leader (it neither answers nor times out: clients' requests
  to it hang), wait for another leader, hold it a second more, SIGCONT, wait until it answers;
* `agent-sigstop` — SIGSTOP an agent whose node runs jobs; wait until the server has taken
  every job off the node (node DOWN, jobs re-queued); SIGCONT (the agent resumes); wait until
  it streams again and bring the node online. The attempts that ran on the node before the
  freeze must be gone by then (its fence killed them): `attempts_survived_fence`.

Figures: per-kind counts, the workload's figures (lost, duplicated, overlapping attempts,
GPUs held twice, the history's verdict), `attempts_survived_fence` (must be 0).
"""

from __future__ import annotations

import random
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

from workload import WAIT, JobWorkload  # tests/chaos/workload.py, beside this script

from gpu_platform.testing.cluster_procs import ReplicatedCluster, wait_until
from gpu_platform.testing.overlap import live_attempts

KINDS = ("leader-kill", "leader-sigstop", "agent-sigstop")


def _leader_kill(c: ReplicatedCluster) -> None:
    old = c.wait_leader(timeout=WAIT)
    c.kill_server(old)
    c.wait_leader([i for i in c.alive() if i != old], timeout=WAIT)
    c.start_server(old)
    if not wait_until(lambda: c.cluster(old) is not None, WAIT):
        raise RuntimeError(f"server {old} did not come back")


def _leader_sigstop(c: ReplicatedCluster) -> None:
    old = c.wait_leader(timeout=WAIT)
    c.kill_server(old, signal.SIGSTOP)
    try:
        c.wait_leader([i for i in c.ids if i != old], timeout=WAIT)
        time.sleep(1.0)
    finally:
        c.kill_server(old, signal.SIGCONT)
    if not wait_until(lambda: c.cluster(old) is not None, WAIT):
        raise RuntimeError(f"server {old} did not answer after SIGCONT")


def _jobs(c: ReplicatedCluster) -> list[dict[str, Any]]:
    """The job listing, retried while no leader answers (just after a fault)."""
    found: list[list[dict[str, Any]]] = []
    if not wait_until(lambda: bool(found.append(c.jobs()) or True), WAIT, step=0.2):
        raise RuntimeError(f"no job listing within {WAIT:.0f} s")
    return found[-1]


def _on_node(c: ReplicatedCluster, node: str) -> list[str]:
    return [
        j["id"]
        for j in _jobs(c)
        if j["state"] in ("SCHEDULED", "RUNNING")
        and j.get("allocation")
        and j["allocation"]["node"] == node
    ]


def _agent_sigstop(c: ReplicatedCluster, w: JobWorkload, rng: random.Random) -> int:
    """Returns how many attempts from before the freeze were still alive after the resume."""
    busy = {n: len(_on_node(c, n)) for n in c.nodes}
    node = max(c.nodes, key=lambda n: (busy[n], rng.random()))
    jobs = set(_on_node(c, node))
    before = {
        (job, epoch)
        for job, epochs in live_attempts(w.clients.tag.encode()).items()
        if job in jobs
        for epoch in epochs
    }
    stopped = time.time()
    c.signal_agent(node, signal.SIGSTOP)
    try:
        wait_until(lambda: not _on_node(c, node), WAIT, step=0.2)
    finally:
        c.signal_agent(node, signal.SIGCONT)
        w.frozen.append((stopped, time.time()))
    lead = c.wait_leader(timeout=WAIT)
    wait_until(lambda: node in c.agents_connected(c.leader() or lead), WAIT)
    c.client.post(f"{c.any_url()}/v1/nodes/{node}/online", json={"reason": "chaos"})
    after = live_attempts(w.clients.tag.encode())
    return sum(1 for job, epoch in before if epoch in after.get(job, set()))


def mixed_faults(
    root: Path, *, rounds: int, seed: int, history_dir: Path, check_timeout_s: float
) -> dict[str, Any]:
    rng = random.Random(seed)
    c = ReplicatedCluster(root, servers=3, agents=2)
    try:
        c.start().wait_ready(timeout=WAIT)
        w = JobWorkload(c, root, seed=seed, history_dir=history_dir, seconds=8.0)
        kinds: Counter[str] = Counter()
        survived = 0
        t0 = time.monotonic()
        try:
            for _ in range(rounds):
                w.wait_acked(3)
                kind = rng.choice(KINDS)
                kinds[kind] += 1
                if kind == "leader-kill":
                    _leader_kill(c)
                elif kind == "leader-sigstop":
                    _leader_sigstop(c)
                else:
                    survived += _agent_sigstop(c, w, rng)
                w.sample()
        finally:
            duration = round(time.monotonic() - t0, 1)
            figures = w.finish("control_plane.mixed_faults", check_timeout_s)
    finally:
        c.close()
    return {
        "rounds": rounds,
        "faults_injected": sum(kinds.values()),
        "kinds": dict(kinds),
        "duration_s": duration,
        "attempts_survived_fence": survived,
        **figures,
        "linearizable": figures["linearizable"] and not survived,
    }
