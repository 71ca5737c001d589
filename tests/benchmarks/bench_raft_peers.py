"""Raft beside etcd and PySyncObj in one run: commit latency and commits/s at 1 / 64 / 256
concurrent clients, the same payload (a key `k<i % 1000>` and a 64-byte value), 3 nodes on
loopback, each system in its best honest configuration (see `_raft_peers` for the peers).

Ours: node 1 runs in this process at the server's default settings (`RaftNodeConfig()`
defaults = `raft_tick_seconds` / `raft_election_ticks`; the heap frozen out of the garbage
collector's walks before measuring, as the server does), nodes 2 and 3 are `raft_kv`
processes; once with each Raft transport (`transport`: grpc-stream = `GrpcRaftTransport`, tcp =
`TcpRaftTransport`; `RAFT_BENCH_TRANSPORTS=tcp,grpc` picks which and in what order), SQLite WAL
with synchronous=FULL (an fsync per batch) on every node. The client runs in the leader's process: one client proposes and waits on the
future; N clients keep N proposals in flight (each starts its next when the last is applied).
`leader_changes` counts new terms on any node during each measurement (must be 0: no spurious
elections under load).

Rows: `raft.grpc.commit_latency` (1 client) and `raft.grpc.throughput` (64, 256) — issue 13's
names, kept for every transport; `params.transport` says which — each twice per transport:
with etcd as the baseline (fsync for fsync) and with PySyncObj (in-memory journal: not
durable). `ops_per_s` is commits/s; `extra.ratio` = ours / the peer's commits/s.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import httpx
from _harness import percentile, result
from _raft_peers import etcd, pysyncobj

from gpu_platform.adapters.outbound.gc_pauses import freeze_startup_heap
from gpu_platform.adapters.outbound.raft_grpc import GrpcRaftTransport
from gpu_platform.adapters.outbound.raft_storage import SqliteRaftStorage
from gpu_platform.adapters.outbound.raft_tcp import TcpRaftTransport
from gpu_platform.application.raft_node import RaftNode, RaftNodeConfig
from gpu_platform.domain.consensus import Role
from gpu_platform.testing.ports import reserve_port
from gpu_platform.testing.raft_kv import KvStateMachine

PAYLOAD = "key k<i % 1000>, 64-byte value"
TRANSPORTS = {"grpc": GrpcRaftTransport, "tcp": TcpRaftTransport}
WIRE_NAME = {"grpc": "grpc-stream", "tcp": "tcp"}  # params.transport


def transports() -> list[str]:
    """The transports measured, in order (`RAFT_BENCH_TRANSPORTS`, default grpc then tcp)."""
    names = [n.strip() for n in os.environ.get("RAFT_BENCH_TRANSPORTS", "grpc,tcp").split(",")]
    unknown = [n for n in names if n not in TRANSPORTS]
    if unknown or not names:
        raise SystemExit(f"RAFT_BENCH_TRANSPORTS: unknown {unknown}; use grpc and/or tcp")
    return names


def _put(i: int) -> bytes:
    return json.dumps({"key": f"k{i % 1000}", "value": "x" * 64}).encode()


def _wait(cond: Callable[[], bool], timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.005)
    return False


def _closed_loop(node: RaftNode, clients: int, total: int) -> tuple[list[float], float, int]:
    """`clients` proposals kept in flight until `total` are settled: (µs per applied one,
    seconds, how many failed — e.g. NotLeader after a leader change; not counted as commits)."""
    lat: list[float] = []
    lock = threading.Lock()
    done = threading.Event()
    state = {"left": total - clients, "open": clients, "failed": 0}

    def start(c: int) -> None:
        t0 = time.perf_counter_ns()

        def finished(fut: Future[object]) -> None:
            if fut.exception() is None:
                lat.append((time.perf_counter_ns() - t0) / 1000)
            with lock:
                state["failed"] += int(fut.exception() is not None)
                go = state["left"] > 0
                if go:
                    state["left"] -= 1
                else:
                    state["open"] -= 1
                    if state["open"] == 0:
                        done.set()
            if go:
                start(c)

        node.propose(_put(c)).add_done_callback(finished)

    t0 = time.perf_counter()
    for c in range(clients):
        start(c)
    if not done.wait(600):
        raise RuntimeError("proposals did not complete")
    return lat, time.perf_counter() - t0, state["failed"]


def ours(counts: dict[int, int], root: Path, transport: str) -> dict[int, dict[str, Any]]:
    raft = {i: reserve_port() for i in (1, 2, 3)}
    http = {i: reserve_port() for i in (2, 3)}
    peers = ",".join(f"{i}=127.0.0.1:{p}" for i, p in raft.items())
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gpu_platform.testing.raft_kv",
                "--id",
                str(i),
                "--peers",
                peers,
                "--data",
                str(root / f"n{i}"),
                "--http",
                str(http[i]),
                "--transport",
                transport,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i in (2, 3)
    ]
    storage = SqliteRaftStorage(root / "n1" / "raft.db")
    node = RaftNode(
        RaftNodeConfig(id=1, voters=(1, 2, 3)),  # the server's defaults
        storage,
        TRANSPORTS[transport](1, {i: f"127.0.0.1:{p}" for i, p in raft.items()}),
        KvStateMachine(),
    )
    client = httpx.Client(timeout=2.0)

    def max_term() -> int:
        terms = [node.status().term]
        for port in http.values():
            with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
                terms.append(int(client.get(f"http://127.0.0.1:{port}/status").json()["term"]))
        return max(terms)

    out: dict[int, dict[str, Any]] = {}
    try:
        node.start()
        for _ in range(40):
            if _wait(lambda: node.status().role is Role.LEADER, timeout=3):
                break
            node.transfer_leadership(1)  # whoever won the first election hands over to us
        else:
            raise RuntimeError("node 1 never became the leader")
        _wait(lambda: all(_status_ok(client, p) for p in http.values()))
        for i in range(20):  # warm up: streams, caches
            node.propose(_put(i)).result(timeout=30)
        # As the server does once built: without it the process's first full collection
        # (23-40 ms here) fell into whichever transport was measured first, at 64 clients
        freeze_startup_heap()
        for clients, total in counts.items():
            before = max_term()
            load_now = round(os.getloadavg()[0], 2)
            failed = 0
            if clients == 1:
                lat = []
                t0 = time.perf_counter()
                for i in range(total):
                    s = time.perf_counter_ns()
                    node.propose(_put(i)).result(timeout=30)
                    lat.append((time.perf_counter_ns() - s) / 1000)
                seconds = time.perf_counter() - t0
            else:
                lat, seconds, failed = _closed_loop(node, clients, total)
            out[clients] = {
                "lat": lat,
                "commits_per_s": len(lat) / seconds,
                "leader_changes": max_term() - before,
                "failed": failed,
                "still_leader": node.status().role is Role.LEADER,
                "load": load_now,
            }
    finally:
        client.close()
        node.stop()
        storage.close()
        for p in procs:
            p.kill()
            p.wait(timeout=30)
    return out


def _status_ok(client: httpx.Client, port: int) -> bool:
    try:
        return client.get(f"http://127.0.0.1:{port}/status").status_code == 200
    except httpx.HTTPError:
        return False


def _peer_baseline(name: str, m: dict[str, Any], **extra: Any) -> dict[str, Any]:
    if "skipped" in m:
        return {"name": name, "skipped": m["skipped"]}
    return {
        "name": name,
        "p50_us": round(percentile(m["lat"], 50), 1),
        "p99_us": round(percentile(m["lat"], 99), 1),
        "ops_per_s": round(m["commits_per_s"], 1),
        "commits": len(m["lat"]),
        **extra,
    }


def run(quick: bool) -> list[dict[str, Any]]:
    counts = {1: 50, 64: 1_000, 256: 2_000} if quick else {1: 1_000, 64: 10_000, 256: 20_000}
    # PySyncObj commits a few hundred per second with batching off: fewer samples, same shape
    pso_counts = {1: 50, 64: 500, 256: 1_000} if quick else {1: 500, 64: 3_000, 256: 6_000}
    tmp = Path(tempfile.mkdtemp(prefix="bench-raft-peers-"))
    load = [round(x, 2) for x in os.getloadavg()]
    mine: dict[str, dict[int, dict[str, Any]]] = {}
    try:
        for kind in transports():
            mine[kind] = ours(counts, tmp / f"ours-{kind}", kind)
        et = etcd(counts, tmp / "etcd")
        pso_single = pysyncobj(pso_counts, batch=False)
        pso_batch = pysyncobj({c: n for c, n in pso_counts.items() if c > 1}, batch=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rows: list[dict[str, Any]] = []
    for kind, measured in mine.items():
        rows += _rows(kind, measured, counts, et, pso_single, pso_batch, load)
    return rows


def _rows(
    kind: str,
    mine: dict[int, dict[str, Any]],
    counts: dict[int, int],
    et: dict[int, dict[str, Any]],
    pso_single: dict[int, dict[str, Any]],
    pso_batch: dict[int, dict[str, Any]],
    load: list[float],
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    params = {"nodes": 3, "payload": PAYLOAD, "transport": WIRE_NAME[kind], "fsync": True}
    for clients, total in counts.items():
        m = mine[clients]
        name = "raft.grpc.commit_latency" if clients == 1 else "raft.grpc.throughput"
        # PySyncObj's best at this client count: batching off (1 client) or the faster one
        off, on = pso_single.get(clients, {}), pso_batch.get(clients, {})
        pso, batching = off, False
        if on.get("commits_per_s", 0) > off.get("commits_per_s", 0):
            pso, batching = on, True
        peers = {
            "etcd": _peer_baseline(
                "etcd 3.4, 3 members, fsync per commit, gRPC client process", et[clients]
            ),
            "pysyncobj": _peer_baseline(
                "PySyncObj 0.3.17, in-memory journal (not durable), client in the leader",
                pso,
                append_entries_use_batch=batching,
            ),
        }
        for peer, base in peers.items():
            ratio = None
            if base.get("ops_per_s"):
                ratio = round(m["commits_per_s"] / base["ops_per_s"], 2)
            row = result(
                name,
                {**params, "clients": clients, "commits": total, "peer": peer},
                m["lat"],
                baseline=base,
                extra={
                    "ratio": ratio,
                    "leader_changes": m["leader_changes"],
                    "failed_proposals": m["failed"],
                    "still_leader": m["still_leader"],
                    "load_average": load,
                    "load_at_start": m["load"],  # 1-minute load as this measurement began
                },
            )
            row["ops_per_s"] = round(m["commits_per_s"], 1)
            rows.append(row)
    return rows


if __name__ == "__main__":
    for row in run(quick="--quick" in sys.argv):
        print(json.dumps(row))
