"""Raft runtime: a client's commit latency through HTTP, and leader failover, on a 3-node
cluster of real `raft_kv` processes on loopback (once per Raft transport: gRPC streams and TCP
sockets, `params.transport`; `RAFT_BENCH_TRANSPORTS=tcp,grpc` picks which and in what order;
SQLite WAL with synchronous=FULL for the log) at the server's DEFAULT timing settings (`raft_tick_seconds` =
50 ms heartbeat, `raft_election_ticks` = 10: election timeout random in [500, 1000) ms, pre-vote
and check-quorum on). The in-process figures beside etcd and PySyncObj are `bench_raft_peers`.

* `raft.grpc.commit_latency` (client=http): one client, one write at a time, through
  `raft_kv`'s HTTP interface (what a client process sees), all three nodes in their own
  processes.
* `raft.failover`: kill -9 the leader; time until a survivor reports itself leader of a newer
  term (`extra`: time until the first write is acknowledged again, and the survivors' term
  increase per kill: 1 means no split vote). The killed node is restarted and caught up before
  the next kill.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from _harness import percentile, result
from bench_raft_peers import WIRE_NAME, transports

from gpu_platform.application.raft_node import RaftNodeConfig
from gpu_platform.testing.ports import reserve_port  # peers: known before they start

DEFAULTS = RaftNodeConfig(id=0, voters=())  # the server's timing defaults


def _wait(cond: Callable[[], bool], timeout: float = 60.0, step: float = 0.005) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return False


def _kv_proc(i: int, peers: str, data: Path, http: int, transport: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "gpu_platform.testing.raft_kv", "--id", str(i), "--peers", peers,
         "--data", str(data / f"n{i}"), "--http", str(http), "--transport", transport],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip


def _kill(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is None:
        os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=30)


def _put(i: int) -> bytes:
    return json.dumps({"key": f"k{i % 1000}", "value": "x" * 64}).encode()


# ---------------------------------------------------------------------- HTTP cluster, failover
class _Cluster:
    def __init__(self, data: Path, transport: str) -> None:
        self.data = data
        self.transport = transport
        raft = {i: reserve_port() for i in (1, 2, 3)}
        self.http = {i: reserve_port() for i in (1, 2, 3)}
        self.peers = ",".join(f"{i}=127.0.0.1:{p}" for i, p in raft.items())
        self.procs = {i: _kv_proc(i, self.peers, data, self.http[i], transport) for i in (1, 2, 3)}
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


def _failover(c: _Cluster, kills: int) -> tuple[list[float], list[float], list[int]]:
    elect: list[float] = []
    write: list[float] = []
    terms: list[int] = []
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
        terms.append(got[1] - term)
        while not c.put(got[0], n):
            n += 1
        write.append((time.perf_counter() - t0) * 1e6)
        n += 1
        c.procs[old] = _kv_proc(old, c.peers, c.data, c.http[old], c.transport)

        def caught_up(old: int = old, new: int = got[0]) -> bool:
            a, b = c.status(old), c.status(new)
            return a is not None and b is not None and a["applied"] >= b["commit"]

        assert _wait(caught_up, step=0.05)
    return elect, write, terms


def run(quick: bool) -> list[dict[str, Any]]:
    n_lat, kills = (20, 3) if quick else (500, 25)
    rows: list[dict[str, Any]] = []
    tmp = Path(tempfile.mkdtemp(prefix="bench-raft-runtime-"))
    timing = {"tick_s": DEFAULTS.tick_interval, "election_tick": DEFAULTS.election_tick}
    try:
        for kind in transports():
            rows += _measure(kind, tmp / kind, n_lat, kills, timing)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rows


def _measure(
    kind: str, root: Path, n_lat: int, kills: int, timing: dict[str, Any]
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    load = round(os.getloadavg()[0], 2)
    c = _Cluster(root, kind)
    try:
        lat = _http_latency(c, n_lat)
        elect, write, terms = _failover(c, kills)
    finally:
        c.close()
    params = {"nodes": 3, "fsync": True, "payload_bytes": 80, "transport": WIRE_NAME[kind]}
    rows.append(
        result(
            "raft.grpc.commit_latency",
            {**params, "client": "http", "commits": n_lat},
            lat,
            extra={"load_at_start": load},
        )
    )
    failover = result(
        "raft.failover",
        {
            "nodes": 3,
            "kills": kills,
            "settings": "server defaults",
            **timing,
            "transport": WIRE_NAME[kind],
        },
        elect,
        extra={
            "max_us": round(max(elect), 1),
            "first_write_p50_us": round(percentile(write, 50), 1),
            "first_write_p99_us": round(percentile(write, 99), 1),
            # {term increase: kills}; more than 1 = a split vote, another timeout
            "term_increase_per_kill": {str(t): terms.count(t) for t in sorted(set(terms))},
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "load_at_start": load,
        },
    )
    failover["ops_per_s"] = None  # a time, not a rate
    rows.append(failover)
    return rows


if __name__ == "__main__":
    for row in run(quick="--quick" in sys.argv):
        print(json.dumps(row))
