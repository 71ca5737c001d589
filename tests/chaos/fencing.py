"""Node-loss scenarios of `make chaos`: an agent is frozen (SIGSTOP) or cut off from every
server (network namespaces) while its node runs a job; the job must run elsewhere, and at no
instant may two attempts of it run (the process table is polled all along, both nodes being
on this machine). Figures: rounds, recovery time (fault → job RUNNING on the other node),
overlapping polls (must be 0)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpu_platform.testing import netns
from gpu_platform.testing.cluster_procs import FAST_ENV, ReplicatedCluster, wait_until
from gpu_platform.testing.netns_cluster import NetnsControlPlane
from gpu_platform.testing.overlap import AttemptWatcher

WAIT = 90.0
#: the namespace harness with fast node-loss detection (the agent, not the leader, is cut off)
NETNS_FAST = {
    "GPU_PLATFORM_NODE_SUSPECT_AFTER_SECONDS": FAST_ENV["GPU_PLATFORM_NODE_SUSPECT_AFTER_SECONDS"],
    "GPU_PLATFORM_NODE_DOWN_AFTER_SECONDS": FAST_ENV["GPU_PLATFORM_NODE_DOWN_AFTER_SECONDS"],
    "GPU_PLATFORM_AGENT_LEASE_SECONDS": FAST_ENV["GPU_PLATFORM_AGENT_LEASE_SECONDS"],
    "GPU_PLATFORM_AGENT_FENCE_GRACE_SECONDS": FAST_ENV["GPU_PLATFORM_AGENT_FENCE_GRACE_SECONDS"],
}


def _pct(samples: list[float], q: float) -> float | None:
    if not samples:
        return None
    ordered = sorted(samples)
    return round(ordered[max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))], 2)


def _rounds(
    c: ReplicatedCluster,
    rounds: int,
    cut: Callable[[str], None],
    mend: Callable[[str], None],
) -> dict[str, Any]:
    """Each round: a whole-node job; `cut` its node; time until it runs on the other node;
    `mend` the node, bring it back online, cancel the job. A watcher polls for overlaps."""
    tag = f"36{os.getpid() % 10000:04d}"  # a unique sleep length marks this run's tasks
    watcher = AttemptWatcher(f"sleep\0{tag}")
    watcher.start()
    times: list[float] = []
    try:
        for _ in range(rounds):
            job = c.submit(["sleep", tag], gpus=8)
            wait_until(lambda job=job: c.job(job["id"])["state"] == "RUNNING", WAIT)  # type: ignore[misc]
            node = c.job(job["id"])["allocation"]["node"]
            t0 = time.monotonic()
            cut(node)

            def moved(job: dict[str, Any] = job, node: str = node) -> bool:
                j = c.job(job["id"])
                return bool(j["state"] == "RUNNING" and j["allocation"]["node"] != node)

            ok = wait_until(moved, WAIT, step=0.05)
            if ok:
                times.append(time.monotonic() - t0)
            mend(node)
            lead = c.wait_leader(timeout=WAIT)
            wait_until(lambda node=node, lead=lead: node in c.agents_connected(lead), WAIT)  # type: ignore[misc]
            c.client.post(f"{c.any_url()}/v1/nodes/{node}/online", json={"reason": "chaos"})
            c.client.post(f"{c.any_url()}/v1/jobs/{job['id']}/cancel", json={})
            wait_until(lambda job=job: c.job(job["id"])["state"] == "CANCELLED", WAIT)  # type: ignore[misc]
            if not ok:
                break
    finally:
        watcher.stop()
    overlaps = watcher.overlaps()
    return {
        "rounds": rounds,
        "recovered": len(times),
        "recovery_s": {"p50": _pct(times, 50), "p99": _pct(times, 99), "max": _pct(times, 100)},
        "process_polls": watcher.polls,
        "overlapping_polls": len(overlaps),
        "attempts_overlapping": len(overlaps),
        "faults_injected": len(times) + (len(times) < rounds),
        "overlaps": [{"job": o.job_id, "epochs": list(o.epochs)} for o in overlaps[:5]],
        "linearizable": len(times) == rounds and not overlaps,
    }


#: the server's own defaults for node loss (heartbeat 1 s, suspect 3 s, lease 3 s, down 8 s)
DEFAULTS = {
    "GPU_PLATFORM_NODE_SUSPECT_AFTER_SECONDS": "3",
    "GPU_PLATFORM_NODE_DOWN_AFTER_SECONDS": "8",
    "GPU_PLATFORM_AGENT_HEARTBEAT_SECONDS": "1",
    "GPU_PLATFORM_AGENT_LEASE_SECONDS": "3",
    "GPU_PLATFORM_AGENT_FENCE_GRACE_SECONDS": "1",
}


def frozen_agents(root: Path, rounds: int, env: dict[str, str] | None = None) -> dict[str, Any]:
    """The agent running the job is SIGSTOPped (and SIGCONTed after the job has moved)."""
    c = ReplicatedCluster(root, servers=3, agents=2, env=env)
    try:
        c.start().wait_ready(timeout=WAIT)
        figures = _rounds(
            c,
            rounds,
            cut=lambda node: c.signal_agent(node, signal.SIGSTOP),
            mend=lambda node: c.signal_agent(node, signal.SIGCONT),
        )
    finally:
        c.close()
    return figures | {
        "fault": "SIGSTOP of the agent",
        "settings": _timing({**FAST_ENV, **(env or {})}),
    }


def cut_off_agents(root: Path, rounds: int) -> dict[str, Any]:
    """The agent running the job is cut off from every server (its network namespace)."""
    with netns.NetnsNetwork(5) as net:
        c = NetnsControlPlane(net, root, env=NETNS_FAST)
        try:
            c.start().wait_ready(timeout=WAIT)
            figures = _rounds(
                c,
                rounds,
                cut=lambda node: net.isolate(c.agent_node[node]),
                mend=lambda node: net.heal(),
            )
        finally:
            c.close()
    return figures | {"fault": "agent's namespace cut off", "settings": _timing(NETNS_FAST)}


def _timing(env: dict[str, str]) -> dict[str, str]:
    return {k.removeprefix("GPU_PLATFORM_").lower(): v for k, v in env.items() if "SECONDS" in k}
