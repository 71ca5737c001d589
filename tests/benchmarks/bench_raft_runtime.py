"""Raft runtime (issue 10): commit latency and commits/s with fsync on, and leader failover,
on a 3-node cluster of real processes on loopback (gRPC between peers, SQLite WAL with
synchronous=FULL for the log).

* `raft.grpc.commit_latency` (client=in-process): one client, one proposal at a time, on the leader (node 1
  runs in this process; nodes 2 and 3 are `raft_kv` processes): propose -> fsync on the
  leader and a follower -> commit -> applied -> future resolved. Baseline: pysyncobj (if
  installed) on the same shape, 3 processes, with its journal file (mmap, no fsync).
* `raft.grpc.commit_latency` (client=http): the same through `raft_kv`'s HTTP interface (what a
  client process sees), all three nodes in their own processes.
* `raft.grpc.throughput`: proposals kept `window` in flight; ops_per_s = commits/s.
* `raft.failover`: kill -9 the leader; time until a survivor reports itself leader
  of a newer term (`extra`: time until the first write is acknowledged again). The killed
  node is restarted and caught up before the next kill.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
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

from gpu_platform.adapters.outbound.raft_grpc import GrpcRaftTransport
from gpu_platform.adapters.outbound.raft_storage import SqliteRaftStorage
from gpu_platform.application.raft_node import RaftNode, RaftNodeConfig
from gpu_platform.domain.consensus import Role
from gpu_platform.testing.raft_kv import KvStateMachine

TICK = 0.05
ELECTION_TICK = 10


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(cond: Callable[[], bool], timeout: float = 60.0, step: float = 0.005) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return False


def _kv_proc(i: int, peers: str, data: Path, http: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "gpu_platform.testing.raft_kv", "--id", str(i), "--peers", peers,
         "--data", str(data / f"n{i}"), "--http", str(http), "--tick", str(TICK),
         "--election-tick", str(ELECTION_TICK)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip


def _kill(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is None:
        os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=30)


def _put(i: int) -> bytes:
    return json.dumps({"key": f"k{i % 1000}", "value": "x" * 64}).encode()


# ---------------------------------------------------------------------- ours, in-process leader
def _ours(n_latency: int, n_throughput: int, window: int, data: Path) -> list[dict[str, Any]]:
    data.mkdir(parents=True, exist_ok=True)
    raft = {i: _free_port() for i in (1, 2, 3)}
    peers = ",".join(f"{i}=127.0.0.1:{p}" for i, p in raft.items())
    procs = [_kv_proc(i, peers, data, _free_port()) for i in (2, 3)]
    storage = SqliteRaftStorage(data / "n1" / "raft.db")
    node = RaftNode(
        RaftNodeConfig(id=1, voters=(1, 2, 3), tick_interval=TICK, election_tick=ELECTION_TICK),
        storage,
        GrpcRaftTransport(1, {i: f"127.0.0.1:{p}" for i, p in raft.items()}),
        KvStateMachine(),
    )
    try:
        node.start()
        for _ in range(20):
            if _wait(lambda: node.status().role is Role.LEADER, timeout=3):
                break
            node.transfer_leadership(1)  # whoever won the first election hands over to us
        else:
            raise RuntimeError("node 1 never became the leader")
        for i in range(20):  # warm up: connections, caches
            node.propose(_put(i)).result(timeout=30)
        lat: list[float] = []
        for i in range(n_latency):
            t0 = time.perf_counter_ns()
            node.propose(_put(i)).result(timeout=30)
            lat.append((time.perf_counter_ns() - t0) / 1000)
        sem = threading.Semaphore(window)
        done: list[Future[object]] = []
        t0 = time.perf_counter()
        for i in range(n_throughput):
            sem.acquire()
            f = node.propose(_put(i))
            f.add_done_callback(lambda _: sem.release())
            done.append(f)
        for f in done:
            f.result(timeout=60)
        elapsed = time.perf_counter() - t0
    finally:
        node.stop()
        storage.close()
        for p in procs:
            _kill(p)
    return [
        {"lat": lat, "commits_per_s": n_throughput / elapsed},
    ]


# ---------------------------------------------------------------------- pysyncobj baseline
# Every pysyncobj node runs in its own process (node 0 also measures and prints JSON): keeping
# pysyncobj's threads and poller out of this process, where our own cluster runs next.
_PSO = r"""
import json, sys, threading, time
from pysyncobj import SyncObj, SyncObjConf, SyncObjException, replicated

class KV(SyncObj):
    def __init__(self, me, others, journal):
        super().__init__(me, others, SyncObjConf(journalFile=journal))
        self.kv = {}

    @replicated
    def put(self, k, v):
        self.kv[k] = v
        return len(self.kv)

me, others, journal, measure = sys.argv[1], sys.argv[2].split(","), sys.argv[3], sys.argv[4]
obj = KV(me, others, journal)
if measure == "-":
    while True:
        time.sleep(3600)
n_lat, n_tp, window = map(int, measure.split(":"))
while obj._getLeader() is None:
    time.sleep(0.01)
warm = 0
while warm < 20:  # early commands may be discarded while the cluster settles
    try:
        obj.put(f"k{warm}", "x" * 64, sync=True, timeout=30)
        warm += 1
    except SyncObjException:
        time.sleep(0.1)
leader_local = str(obj._getLeader()) == me
lat = []
for i in range(n_lat):
    t0 = time.perf_counter_ns()
    obj.put(f"k{i % 1000}", "x" * 64, sync=True, timeout=30)
    lat.append((time.perf_counter_ns() - t0) / 1000)
sem, remaining = threading.Semaphore(window), threading.Semaphore(0)
def cb(_res, _err):
    sem.release()
    remaining.release()
t0 = time.perf_counter()
for i in range(n_tp):
    sem.acquire()
    obj.put(f"k{i % 1000}", "x" * 64, callback=cb)
for _ in range(n_tp):
    remaining.acquire(timeout=60)
elapsed = time.perf_counter() - t0
print(json.dumps({"lat": lat, "commits_per_s": n_tp / elapsed, "leader_local": leader_local}))
obj.destroy()
"""


def _pysyncobj(n_latency: int, n_throughput: int, window: int, data: Path) -> dict[str, Any]:
    try:
        import pysyncobj  # noqa: F401
    except ImportError:
        return {"skipped": "pysyncobj not installed (pip install pysyncobj)"}
    data.mkdir(parents=True, exist_ok=True)
    addrs = [f"127.0.0.1:{_free_port()}" for _ in range(3)]

    def node(i: int, measure: str) -> list[str]:
        others = ",".join(a for a in addrs if a != addrs[i])
        return [sys.executable, "-c", _PSO, addrs[i], others, str(data / f"pso{i}.j"), measure]

    quiet = subprocess.DEVNULL
    procs = [subprocess.Popen(node(i, "-"), stdout=quiet, stderr=quiet) for i in (1, 2)]
    try:
        out = subprocess.run(
            node(0, f"{n_latency}:{n_throughput}:{window}"),
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        ).stdout
    finally:
        for p in procs:
            _kill(p)
    doc = json.loads(out.strip().splitlines()[-1])
    lat = doc["lat"]
    return {
        "p50_us": round(percentile(lat, 50), 3),
        "p99_us": round(percentile(lat, 99), 3),
        "commits_per_s": round(doc["commits_per_s"], 1),
        "leader_local": doc["leader_local"],
        "fsync": False,
        "note": "pysyncobj 0.3.x journal is an mmap'd file, not fsynced per write",
    }


# ---------------------------------------------------------------------- HTTP cluster, failover
class _Cluster:
    def __init__(self, data: Path) -> None:
        self.data = data
        raft = {i: _free_port() for i in (1, 2, 3)}
        self.http = {i: _free_port() for i in (1, 2, 3)}
        self.peers = ",".join(f"{i}=127.0.0.1:{p}" for i, p in raft.items())
        self.procs = {i: _kv_proc(i, self.peers, data, self.http[i]) for i in (1, 2, 3)}
        self.client = httpx.Client(timeout=10.0)

    def status(self, i: int) -> dict[str, Any] | None:
        try:
            r = self.client.get(f"http://127.0.0.1:{self.http[i]}/status", timeout=0.5)
            return dict(r.json())
        except (httpx.HTTPError, ValueError):
            return None

    def leader(self, among: list[int] | None = None) -> tuple[int, int] | None:
        for i in among or list(self.procs):
            st = self.status(i)
            if st is not None and st["role"] == "leader":
                return i, int(st["term"])
        return None

    def put(self, i: int, n: int) -> bool:
        try:
            r = self.client.post(f"http://127.0.0.1:{self.http[i]}/put", content=_put(n))
        except httpx.HTTPError:
            return False
        return r.status_code == 200

    def close(self) -> None:
        for p in self.procs.values():
            _kill(p)
        self.client.close()


def _http_latency(c: _Cluster, n: int) -> list[float]:
    assert _wait(lambda: c.leader() is not None)
    lead = c.leader()
    assert lead is not None
    for i in range(20):
        c.put(lead[0], i)
    lat = []
    for i in range(n):
        t0 = time.perf_counter_ns()
        c.put(lead[0], i)
        lat.append((time.perf_counter_ns() - t0) / 1000)
    return lat


def _failover(c: _Cluster, kills: int) -> tuple[list[float], list[float]]:
    elect: list[float] = []
    write: list[float] = []
    n = 0
    for _ in range(kills):
        assert _wait(lambda: c.leader() is not None)
        lead = c.leader()
        assert lead is not None
        old, term = lead
        survivors = [i for i in c.procs if i != old]
        t0 = time.perf_counter()
        _kill(c.procs[old])

        def new_leader(survivors: list[int] = survivors, term: int = term) -> bool:
            got = c.leader(survivors)
            return got is not None and got[1] > term

        assert _wait(new_leader, step=0.002)
        elect.append((time.perf_counter() - t0) * 1e6)
        got = c.leader(survivors)
        assert got is not None
        while not c.put(got[0], n):
            n += 1
        write.append((time.perf_counter() - t0) * 1e6)
        n += 1
        c.procs[old] = _kv_proc(old, c.peers, c.data, c.http[old])

        def caught_up(old: int = old, new: int = got[0]) -> bool:
            a, b = c.status(old), c.status(new)
            return a is not None and b is not None and a["applied"] >= b["commit"]

        assert _wait(caught_up, step=0.05)
    return elect, write


def run(quick: bool) -> list[dict[str, Any]]:
    n_lat, n_tp, window, kills = (20, 100, 64, 1) if quick else (500, 3000, 64, 20)
    rows: list[dict[str, Any]] = []
    tmp = Path(tempfile.mkdtemp(prefix="bench-raft-runtime-"))
    try:
        if quick:  # the smoke run checks our rows; the baseline costs a cluster more
            base: dict[str, Any] = {"skipped": "not measured in --quick"}
        else:
            base = _pysyncobj(n_lat, n_tp, window, tmp / "pso")
        ours = _ours(n_lat, n_tp, window, tmp / "ours")[0]
        params = {"nodes": 3, "fsync": True, "payload_bytes": 80, "transport": "grpc-loopback"}
        rows.append(
            result(
                "raft.grpc.commit_latency",
                {**params, "client": "in-process", "commits": n_lat},
                ours["lat"],
                baseline={"name": "PySyncObj 3-node loopback", **base},
            )
        )
        tp = result(
            "raft.grpc.throughput",
            {**params, "window": window, "commits": n_tp},
            [1e6 / ours["commits_per_s"]],
            baseline={"name": "PySyncObj 3-node loopback", "ops_per_s": base.get("commits_per_s")},
        )
        tp["ops_per_s"] = round(ours["commits_per_s"], 1)
        rows.append(tp)
        c = _Cluster(tmp / "http")
        try:
            lat = _http_latency(c, n_lat)
            rows.append(
                result(
                    "raft.grpc.commit_latency",
                    {**params, "client": "http", "commits": n_lat},
                    lat,
                )
            )
            elect, write = _failover(c, kills)
        finally:
            c.close()
        rows.append(
            result(
                "raft.failover",
                {"nodes": 3, "kills": kills, "tick_s": TICK, "election_tick": ELECTION_TICK},
                elect,
                extra={
                    "first_write_p50_us": round(percentile(write, 50), 1),
                    "first_write_p99_us": round(percentile(write, 99), 1),
                },
            )
        )
        for r in rows:
            if r["name"] == "raft.failover":
                r["ops_per_s"] = None  # a time, not a rate
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rows


if __name__ == "__main__":
    for row in run(quick="--quick" in sys.argv):
        print(json.dumps(row))
