"""The peers of `bench_raft_peers`: etcd (3 members, fsync on) and PySyncObj, run in one go.

Each peer is started on loopback in a temporary directory, measured with `clients` closed-loop
clients (each keeps one write in flight: the next starts when the last is acknowledged), and
stopped. A measurement returns {"lat": [µs per commit], "commits_per_s": float, ...}.

* etcd (Debian `etcd-server`, 3.4): 3 members, default settings (fsync of its WAL on every
  commit), writes are `KV.Put` over gRPC to the leader, from a client process (grpc.aio, one
  channel, `clients` concurrent tasks; two such processes from 64 clients on so the Python
  client is not what saturates). Hand-encoded protobuf: no generated etcd code needed.
* PySyncObj: 3 processes; the measuring client runs inside the leader's process (its best
  case: no forwarding). Journal in memory (its file journal is not fsynced on the commit path
  either, so no configuration of it is durable the way etcd and ours are).
"""

from __future__ import annotations

import json
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from gpu_platform.testing.ports import reserve_port  # peers: known before they start

__all__ = ["etcd", "pysyncobj"]


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
    for p in procs:
        p.wait(timeout=30)


# ---------------------------------------------------------------------------------- etcd
_ETCD_CLIENT = r"""
import asyncio, json, sys, time
import grpc

target, clients, total = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)

def put(i):  # etcdserverpb.PutRequest{key=1, value=2}
    key, value = f"k{i % 1000}".encode(), b"x" * 64
    return b"\x0a" + varint(len(key)) + key + b"\x12" + varint(len(value)) + value

async def main():
    async with grpc.aio.insecure_channel(target) as ch:
        call = ch.unary_unary("/etcdserverpb.KV/Put", request_serializer=lambda b: b,
                              response_deserializer=lambda b: b)
        for i in range(20):
            await call(put(i), timeout=30)
        lat, left = [], [total]
        async def client(c):
            while left[0] > 0:
                left[0] -= 1
                t0 = time.perf_counter_ns()
                await call(put(c), timeout=30)
                lat.append((time.perf_counter_ns() - t0) / 1000)
        t0 = time.perf_counter()
        await asyncio.gather(*(client(c) for c in range(clients)))
        print(json.dumps({"lat": lat, "seconds": time.perf_counter() - t0}))

asyncio.run(main())
"""


def _etcd_leader(client_urls: list[str]) -> str:
    """The client URL of the member that leads (asked through etcd's JSON gateway)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for url in client_urls:
            try:
                st = httpx.post(f"{url}/v3/maintenance/status", json={}, timeout=1).json()
            except (httpx.HTTPError, ValueError):
                continue
            if "leader" in st and st["leader"] == st["header"]["member_id"]:
                return url
        time.sleep(0.1)
    raise RuntimeError("etcd elected no leader")


def etcd(counts: dict[int, int], root: Path) -> dict[int, dict[str, Any]]:
    """{clients: measurement} for a fresh 3-member etcd; {} entries say why when skipped."""
    binary = shutil.which("etcd")
    if binary is None:
        return {n: {"skipped": "etcd not installed (apt-get install etcd-server)"} for n in counts}
    peer = [reserve_port() for _ in range(3)]
    client = [reserve_port() for _ in range(3)]
    cluster = ",".join(f"e{i}=http://127.0.0.1:{peer[i]}" for i in range(3))
    procs = []
    for i in range(3):
        cmd = [binary, "--name", f"e{i}", "--data-dir", str(root / f"e{i}"),
               "--listen-peer-urls", f"http://127.0.0.1:{peer[i]}",
               "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer[i]}",
               "--listen-client-urls", f"http://127.0.0.1:{client[i]}",
               "--advertise-client-urls", f"http://127.0.0.1:{client[i]}",
               "--initial-cluster", cluster, "--initial-cluster-state", "new",
               "--initial-cluster-token", "bench", "--log-level", "error"]  # fmt: skip
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    out: dict[int, dict[str, Any]] = {}
    try:
        leader = _etcd_leader([f"http://127.0.0.1:{c}" for c in client])
        target = leader.removeprefix("http://")
        for clients, total in counts.items():
            workers = 1 if clients < 64 else 2
            runs = [
                subprocess.Popen(
                    [
                        sys.executable,
                        "-c",
                        _ETCD_CLIENT,
                        target,
                        str(clients // workers),
                        str(total // workers),
                    ],
                    stdout=subprocess.PIPE,
                )
                for _ in range(workers)
            ]
            docs = []
            for r in runs:
                stdout, _ = r.communicate(timeout=600)
                docs.append(json.loads(stdout.decode().strip().splitlines()[-1]))
            lat = [x for d in docs for x in d["lat"]]
            seconds = max(d["seconds"] for d in docs)
            out[clients] = {"lat": lat, "commits_per_s": len(lat) / seconds, "workers": workers}
    finally:
        _stop(procs)
    return out


# ---------------------------------------------------------------------------------- pysyncobj
# All three nodes run this; the one that is the leader measures and prints JSON.
_PSO = r"""
import json, sys, threading, time
from pysyncobj import SyncObj, SyncObjConf, replicated

class KV(SyncObj):
    def __init__(self, me, others, batch):
        super().__init__(me, others, SyncObjConf(appendEntriesUseBatch=batch, journalFile=None))
        self.kv = {}

    @replicated
    def put(self, k, v):
        self.kv[k] = v
        return len(self.kv)

me, others, batch, plan = sys.argv[1], sys.argv[2].split(","), sys.argv[3] == "1", sys.argv[4]
obj = KV(me, others, batch)
while True:  # the node that leads (after the cluster settled) measures; the others serve
    time.sleep(1.0)
    if str(obj._getLeader()) == me:
        break
for i in range(20):
    obj.put(f"w{i}", "x" * 64, sync=True, timeout=30)
result = {}
for step in plan.split(","):
    clients, total = map(int, step.split(":"))
    lat, done, lock = [], threading.Event(), threading.Lock()
    state = {"left": total, "open": clients}
    def start(c):
        t0 = time.perf_counter_ns()
        def cb(_res, err):
            lat.append((time.perf_counter_ns() - t0) / 1000)
            with lock:
                go = state["left"] > 0
                if go:
                    state["left"] -= 1
                else:
                    state["open"] -= 1
                    if state["open"] == 0:
                        done.set()
            if go:
                start(c)
        obj.put(f"k{c % 1000}", "x" * 64, callback=cb)
    t0 = time.perf_counter()
    with lock:
        state["left"] -= clients
    for c in range(clients):
        start(c)
    done.wait(600)
    result[clients] = {"lat": lat, "commits_per_s": len(lat) / (time.perf_counter() - t0)}
print(json.dumps(result), flush=True)
time.sleep(3600)
"""


def pysyncobj(counts: dict[int, int], batch: bool) -> dict[int, dict[str, Any]]:
    """{clients: measurement} for a fresh 3-node PySyncObj cluster (in-memory journal)."""
    try:
        import pysyncobj as _
    except ImportError:
        return {n: {"skipped": "pysyncobj not installed"} for n in counts}
    addrs = [f"127.0.0.1:{reserve_port()}" for _ in range(3)]
    plan = ",".join(f"{c}:{t}" for c, t in counts.items())
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _PSO,
                addrs[i],
                ",".join(a for a in addrs if a != addrs[i]),
                "1" if batch else "0",
                plan,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        for i in range(3)
    ]
    try:
        deadline = time.monotonic() + 600
        line = b""
        while not line and time.monotonic() < deadline:
            for p in procs:
                assert p.stdout is not None
                ready, _, _ = select.select([p.stdout], [], [], 0.05)
                if ready:
                    line = p.stdout.readline()
                    break
        if not line:
            raise RuntimeError("pysyncobj produced no measurement")
    finally:
        _stop(procs)
    doc = json.loads(line)
    return {int(k): v for k, v in doc.items()}
