"""The replicated control plane at scale (issue 10): 3 servers (real processes, Raft over gRPC,
SQLite WAL with fsync) and simulated agents — each node its own real gRPC stream — from one
`agent_swarm` process; jobs are submitted over REST to the servers.

* `cluster.submit_to_bound`: per job, the leader's bind time minus its submit time (both
  from the job's history), p50/p99; ops_per_s = jobs bound per second over the whole run.
  `extra`: REST submit latency p50/p99 as the client saw it, jobs/s completed, the leader's
  CPU seconds and RSS, commits (Raft applied index), nodes/GPUs, and `elections_during_run`:
  term changes between the agents being connected and the end of the run, no server killed
  (issue 21: must be 0), with the load average. The servers run at `cpu_priority = high`
  (`GPU_PLATFORM_CPU_PRIORITY=normal` for the default; in each row's params). Raft runs over
  the server's default TCP transport; `GPU_PLATFORM_RAFT_TRANSPORT=grpc` runs all three servers
  over the gRPC one (`raft_transport` in each row's params).
* `cluster.array_to_bound`: then, on the same cluster, the same number of jobs as job arrays
  (one POST /v1/arrays per 1,000 tasks, so the 8 REST clients' submit rate is not what is
  measured): per task, bind time minus the array's submit time, p50/p99; ops_per_s = tasks
  bound per second from the first array's submit to the last bind (each GPU runs many tasks
  in turn: a bind waits for an earlier task's finish). `extra`: leader CPU per task,
  elections, completed per second.
* `control_plane.failover`: then, on the same cluster (the swarm still streaming), kill -9
  the leader; time until a survivor reports itself leader of a newer term (`extra`: until a
  submit is acknowledged again; term increase per kill). Raft timing is the server's
  defaults (50 ms tick, election timeout 10 ticks). The killed server is restarted and caught
  up before the next kill. 20 kills (--quick 5, smoke 1; `--kills N` when run as a script).
* `recovery.node_loss` (mode=replicated): a whole-node job runs on an agent; the agent is
  SIGSTOPped; time until the job runs again on another node (node_down_after = 4 s here).

Full: 128 nodes x 8 GPUs (1,024 GPUs), 10,000 jobs. --quick: 32 nodes, 1,000 jobs (the test
suite's smoke run, GPU_PLATFORM_BENCH_SMOKE=1: 4 nodes, 40 jobs).

`--arrays-only --nodes N --preload P --jobs J` (a reproduction of the collapse after a large
state, issue 21): no REST phase, no kills, no node loss; P tasks as arrays are bound and run
to the end (row `cluster.array_preload`), then J more are measured (`cluster.array_to_bound`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from _harness import percentile, result

from gpu_platform.application.raft_node import RaftNodeConfig
from gpu_platform.testing.cluster_procs import ReplicatedCluster, wait_until

DEFAULTS = RaftNodeConfig(id=0, voters=())  # the server's Raft timing (not overridden here)
# The servers' cpu_priority (docs/raft.md): high, as on a machine shared with other work (this
# one: the agents and clients run beside the servers); GPU_PLATFORM_CPU_PRIORITY=normal for the
# server's default. Recorded in each row's params.
CPU_PRIORITY = os.environ.get("GPU_PLATFORM_CPU_PRIORITY", "high")
# How Raft messages travel between the servers (config raft_transport, the same for all three):
# the server's default tcp, or GPU_PLATFORM_RAFT_TRANSPORT=grpc. Recorded in each row's params.
RAFT_TRANSPORT = os.environ.get("GPU_PLATFORM_RAFT_TRANSPORT", "tcp")


def _proc_cpu_rss(pid: int) -> tuple[float, int]:
    """(user+system CPU seconds, RSS bytes) of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    rss = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    return cpu, rss


def _submit_all(c: ReplicatedCluster, url: str, jobs: int, threads: int) -> list[float]:
    latencies: list[float] = []
    lock = threading.Lock()
    per = [jobs // threads + (1 if i < jobs % threads else 0) for i in range(threads)]

    def worker(n: int) -> None:
        client = httpx.Client(timeout=60.0, follow_redirects=True)
        body = {"command": ["fake-exit", "0"], "gpus": 1}
        mine = []
        for _ in range(n):
            for _attempt in range(20):
                t0 = time.perf_counter()
                try:
                    r = client.post(url + "/v1/jobs", json=body)
                except httpx.HTTPError:
                    time.sleep(0.2)
                    continue
                if r.status_code == 201:
                    mine.append((time.perf_counter() - t0) * 1e6)
                    break
                time.sleep(0.1)
        client.close()
        with lock:
            latencies.extend(mine)

    pool = [threading.Thread(target=worker, args=(n,)) for n in per]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return latencies


def _elections(before: dict[int, Any], after: dict[int, Any]) -> int | None:
    """Elections between two readings of every server's term (None if a reading is missing)."""
    if None in before.values() or None in after.values():
        return None
    return int(max(after.values())) - int(max(before.values()))


@contextlib.contextmanager
def _swarmed(root: Path, nodes: int, log_level: str) -> Iterator[tuple[ReplicatedCluster, int]]:
    """3 servers and `nodes` simulated agents streaming to the leader: (cluster, leader);
    the swarm and the servers are stopped on the way out."""
    env = {"GPU_PLATFORM_NODE_SUSPECT_AFTER_SECONDS": "15", "GPU_PLATFORM_NODE_DOWN_AFTER_SECONDS": "30",
           "GPU_PLATFORM_LOG_LEVEL": log_level, "GPU_PLATFORM_SCHEDULE_INTERVAL_SECONDS": "0.5",
           "GPU_PLATFORM_CPU_PRIORITY": CPU_PRIORITY,
           "GPU_PLATFORM_RAFT_TRANSPORT": RAFT_TRANSPORT}  # fmt: skip
    c = ReplicatedCluster(root, servers=3, agents=0, env=env).start()
    swarm = None
    try:
        lead = c.wait_leader(timeout=120)
        servers = ",".join(f"127.0.0.1:{p}" for p in c.agent_ports.values())
        with (root / "swarm.log").open("ab") as log:
            swarm = subprocess.Popen(
                [sys.executable, "-m", "gpu_platform.testing.agent_swarm",
                 "--servers", servers, "--nodes", str(nodes)],
                env=c.env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        if not wait_until(lambda: len(c.agents_connected(lead)) >= nodes, 300, 0.5):
            raise RuntimeError(f"only {len(c.agents_connected(lead))} of {nodes} agents connected")
        yield c, lead
    finally:
        if swarm is not None:
            swarm.send_signal(signal.SIGTERM)
            try:
                swarm.wait(timeout=30)
            except subprocess.TimeoutExpired:
                swarm.kill()
        c.close()


def _scale(root: Path, nodes: int, jobs: int, kills: int) -> list[dict[str, Any]]:
    with _swarmed(root, nodes, "warning") as (c, first):
        lead = first
        pid = c.servers[lead].pid
        terms0 = {i: (c.cluster(i) or {}).get("term") for i in c.alive()}
        cpu0, _ = _proc_cpu_rss(pid)
        t0 = time.perf_counter()
        submit_us = _submit_all(c, c.url(lead), jobs, threads=8)
        submitted = time.perf_counter()

        def completed() -> bool:
            status = c.client.get(c.url(lead) + "/v1/status", timeout=60).json()
            return int(status["jobs_by_state"].get("COMPLETED", 0)) >= jobs

        wait_until(completed, 1800, 1.0)
        elapsed = time.perf_counter() - t0
        cpu1, rss = _proc_cpu_rss(pid)
        info = c.cluster(lead) or {}
        lead = c.wait_leader(timeout=120)
        listed = c.client.get(c.url(lead) + "/v1/jobs", timeout=120).json()
        if not isinstance(listed, list):
            raise RuntimeError(f"GET /v1/jobs: {listed}")
        terms = {i: (c.cluster(i) or {}).get("term") for i in c.alive()}
        elections = _elections(terms0, terms)
        bound_us = []
        for job in listed:
            at = {h["state"]: h["at"] for h in job["history"]}
            if "SCHEDULED" in at:
                bound_us.append((at["SCHEDULED"] - job["submitted_at"]) * 1e6)
        done = sum(1 for j in listed if j["state"] == "COMPLETED")
        row = result(
            "cluster.submit_to_bound",
            {
                "nodes": nodes,
                "gpus": nodes * 8,
                "jobs": jobs,
                "servers": 3,
                "api": "rest",
                "cpu_priority": CPU_PRIORITY,
                "raft_transport": RAFT_TRANSPORT,
            },
            bound_us,
            extra={
                "submit_rest_p50_us": round(percentile(submit_us, 50), 1),
                "submit_rest_p99_us": round(percentile(submit_us, 99), 1),
                "submit_phase_s": round(submitted - t0, 2),
                "completed": done,
                "completed_per_s": round(done / elapsed, 1),
                "leader_cpu_s": round(cpu1 - cpu0, 2),
                "leader_rss_mib": round(rss / (1 << 20), 1),
                "raft_applied_index": info.get("applied"),
                "raft_terms_at_end": terms,
                # term changes while the benchmark ran, no server killed: must be 0
                "elections_during_run": elections,
                "load_average": [round(x, 2) for x in os.getloadavg()],
                "wall_s": round(elapsed, 2),
            },
        )
        row["ops_per_s"] = round(len(bound_us) / elapsed, 1)
        arrays = _arrays_to_bound(c, nodes, jobs)
        return [row, arrays, _leader_kills(c, kills, nodes)]


def _arrays_to_bound(c: ReplicatedCluster, nodes: int, jobs: int) -> dict[str, Any]:
    lead = c.wait_leader(timeout=120)
    pid = c.servers[lead].pid
    terms0 = {i: (c.cluster(i) or {}).get("term") for i in c.alive()}
    before = int(
        c.client.get(c.url(lead) + "/v1/status", timeout=60)
        .json()["jobs_by_state"]
        .get("COMPLETED", 0)
    )
    cpu0, _ = _proc_cpu_rss(pid)
    t0 = time.perf_counter()
    ids = []
    for start in range(0, jobs, 1000):
        n = min(1000, jobs - start)
        body = {"command": ["fake-exit", "0"], "gpus": 1, "array": f"0-{n - 1}"}
        for _attempt in range(60):  # an election meanwhile: 503 until a leader is known
            r = c.client.post(
                c.url(c.wait_leader(timeout=120)) + "/v1/arrays", json=body, timeout=120
            )
            if r.status_code != 503:
                break
            time.sleep(0.5)
        r.raise_for_status()
        ids.append(r.json()["id"])

    def completed() -> bool:
        status = c.client.get(c.url(lead) + "/v1/status", timeout=60).json()
        return int(status["jobs_by_state"].get("COMPLETED", 0)) - before >= jobs

    wait_until(completed, 1800, 0.2)
    elapsed = time.perf_counter() - t0
    cpu1, _ = _proc_cpu_rss(pid)
    listed = c.client.get(c.url(c.wait_leader(timeout=120)) + "/v1/jobs", timeout=120).json()
    if not isinstance(listed, list):
        raise RuntimeError(f"GET /v1/jobs: {listed}")
    mine = [j for j in listed if (j.get("array") or {}).get("id") in ids]
    bound_us, binds, submits = [], [], []
    for job in mine:
        at = {h["state"]: h["at"] for h in job["history"]}
        submits.append(job["submitted_at"])
        if "SCHEDULED" in at:
            binds.append(at["SCHEDULED"])
            bound_us.append((at["SCHEDULED"] - job["submitted_at"]) * 1e6)
    terms = {i: (c.cluster(i) or {}).get("term") for i in c.alive()}
    span = max(binds) - min(submits) if binds else float("nan")
    row = result(
        "cluster.array_to_bound",
        {
            "nodes": nodes,
            "gpus": nodes * 8,
            "jobs": jobs,
            "servers": 3,
            "api": "rest arrays",
            "cpu_priority": CPU_PRIORITY,
            "raft_transport": RAFT_TRANSPORT,
        },
        bound_us,
        extra={
            "arrays": len(ids),
            "tasks_seen": len(mine),
            "bind_span_s": round(span, 3),
            "completed_per_s": round(jobs / elapsed, 1),
            "leader_cpu_ms_per_job": round((cpu1 - cpu0) / jobs * 1e3, 3),
            "elections_during_run": _elections(terms0, terms),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "wall_s": round(elapsed, 2),
        },
    )
    row["ops_per_s"] = round(len(binds) / span, 1) if binds else 0.0
    return row


def _term(c: ReplicatedCluster, i: int) -> int:
    """Server i's term (a loaded server may miss /v1/cluster's 2 s timeout: ask again)."""
    for _ in range(30):
        info = c.cluster(i)
        if info is not None:
            return int(info["term"])
    raise RuntimeError(f"server {i} does not answer /v1/cluster")


def _leader_kills(c: ReplicatedCluster, kills: int, nodes: int) -> dict[str, Any]:
    """kill -9 the leader `kills` times (the swarm's agents streaming); per kill: time until a
    survivor reports itself leader of a newer term, and until a submit is acknowledged again.
    The killed server is restarted and caught up before the next kill."""
    elect: list[float] = []
    write: list[float] = []
    bumps: list[int] = []
    body = {"command": ["fake-exit", "0"], "gpus": 1}
    for k in range(kills):
        old = c.wait_leader(timeout=120)
        term = _term(c, old)
        survivors = [i for i in c.alive() if i != old]
        t0 = time.perf_counter()
        c.kill_server(old)
        found: list[int] = []

        def newer(
            survivors: list[int] = survivors, term: int = term, found: list[int] = found
        ) -> bool:
            for i in survivors:
                info = c.cluster(i)
                if info and info["role"] == "leader" and info["term"] > term:
                    found[:] = [i, info["term"]]
                    return True
            return False

        if not wait_until(newer, 60, 0.002):
            raise RuntimeError(f"no new leader within 60 s after killing server {old}")
        elect.append((time.perf_counter() - t0) * 1e6)
        bumps.append(found[1] - term)
        url = c.url(found[0])

        def accepted(url: str = url) -> bool:
            return c.client.post(url + "/v1/jobs", json=body, timeout=10).status_code == 201

        if wait_until(accepted, 60, 0.005):
            write.append((time.perf_counter() - t0) * 1e6)
        if k < kills - 1:  # the last killed server stays down: close() ends the others
            c.start_server(old)

            def caught_up(old: int = old, new: int = found[0]) -> bool:
                a, b = c.cluster(old), c.cluster(new)
                return a is not None and b is not None and a["applied"] >= b["commit"]

            if not wait_until(caught_up, 300, 0.1):
                raise RuntimeError(f"restarted server {old} did not catch up")
    row = result(
        "control_plane.failover",
        {"servers": 3, "nodes": nodes, "kills": kills, "settings": "server defaults",
         "tick_s": DEFAULTS.tick_interval, "election_tick": DEFAULTS.election_tick,
         "cpu_priority": CPU_PRIORITY, "raft_transport": RAFT_TRANSPORT},
        elect,
        extra={
            "max_us": round(max(elect), 1),
            "first_submit_p50_us": round(percentile(write, 50), 1),
            "first_submit_p99_us": round(percentile(write, 99), 1),
            # {term increase: kills}; more than 1 = a split vote, another timeout
            "term_increase_per_kill": {str(t): bumps.count(t) for t in sorted(set(bumps))},
            "load_average": [round(x, 2) for x in os.getloadavg()],
        },
    )  # fmt: skip
    row["ops_per_s"] = None  # a time, not a rate
    return row


def _node_loss(root: Path, kills: int) -> dict[str, Any]:
    env = {"GPU_PLATFORM_RAFT_TRANSPORT": RAFT_TRANSPORT}
    c = ReplicatedCluster(root, servers=3, agents=kills + 1, env=env).start()
    samples: list[float] = []
    try:
        c.wait_ready(timeout=120)
        for _ in range(kills):
            job = c.submit(["sleep", "600"], gpus=8)
            wait_until(lambda job=job: c.job(job["id"])["state"] == "RUNNING", 120)
            node = c.job(job["id"])["allocation"]["node"]
            t0 = time.perf_counter()
            c.signal_agent(node, signal.SIGSTOP)

            def moved(job: dict[str, Any] = job, node: str = node) -> bool:
                j = c.job(job["id"])
                return j["state"] == "RUNNING" and j["allocation"]["node"] != node

            if wait_until(moved, 120, 0.05):
                samples.append((time.perf_counter() - t0) * 1e6)
            c.client.post(c.any_url() + f"/v1/jobs/{job['id']}/cancel")
    finally:
        c.close()
    return result(
        "recovery.node_loss",
        {"mode": "replicated", "servers": 3, "kills": kills, "node_down_after_s": 4,
         "heartbeat_s": 0.5, "raft_transport": RAFT_TRANSPORT},
        samples,
        extra={"recovered": len(samples)},
    )  # fmt: skip


def _arrays_only(root: Path, nodes: int, preload: int, jobs: int) -> list[dict[str, Any]]:
    """P array tasks run to the end, then J more measured, on a fresh cluster (module doc)."""
    with _swarmed(root, nodes, "info") as (c, _lead):
        rows = []
        if preload:
            rows.append(_arrays_to_bound(c, nodes, preload))
            rows[-1]["name"] = "cluster.array_preload"
        rows.append(_arrays_to_bound(c, nodes, jobs))
        return rows


def _arg(name: str, default: int) -> int:
    return int(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def run(quick: bool) -> list[dict[str, Any]]:
    # GPU_PLATFORM_BENCH_SMOKE=1: the test suite's smoke run only checks that this works
    smoke = os.environ.get("GPU_PLATFORM_BENCH_SMOKE") == "1"
    nodes, jobs = (4, 40) if smoke else (32, 1000) if quick else (128, 10_000)
    with tempfile.TemporaryDirectory(prefix="bench-cp-") as tmp:
        kills = _arg("--kills", 1 if smoke else 5 if quick else 20)
        rows = _scale(Path(tmp) / "scale", nodes, jobs, kills)
        rows.append(_node_loss(Path(tmp) / "loss", 1 if quick else 5))
    return rows


if __name__ == "__main__":
    import json

    if "--arrays-only" in sys.argv:
        with tempfile.TemporaryDirectory(prefix="bench-cp-") as tmp:
            nodes, preload = _arg("--nodes", 128), _arg("--preload", 10_000)
            rows = _arrays_only(Path(tmp), nodes, preload, _arg("--jobs", 3_000))
        print(json.dumps(rows, indent=2))
    else:
        print(json.dumps(run("--quick" in sys.argv), indent=2))
