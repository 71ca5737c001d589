"""`raft_kv` processes inside a `NetnsNetwork`, and the observers partition tests need.

* `NetnsKvCluster`: node K runs `python -m gpu_platform.testing.raft_kv` in namespace K, Raft
  on `IP_K:7000`, HTTP on `IP_K:8000`; the test process talks to every node over the host
  veth, which partitions never cut.
* `RoleWatcher`: a thread polling every node's `/status`; `two_leaders()` lists the terms in
  which two nodes ever reported LEADER (Raft's election safety says: none).
* `KvClients`: threads issuing random puts and linearizable gets (or, with `dirty_reads`,
  reads of a random node's local state — a broken client that shows the checker has teeth);
  `history()` is a list of `linearizability.Operation`s for `KvModel`. A put answered with
  anything but 200 is recorded as pending (indeterminate: a 421 can come after the entry was
  appended, a timeout after it was replicated); a get that fails is left out (a read has no effect).

Times in histories and role samples are `time.monotonic()` seconds. Nothing here asserts.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from gpu_platform.testing.linearizability import Operation
from gpu_platform.testing.linearizability_models import KvInput, KvOp, KvOutput
from gpu_platform.testing.netns import NetnsNetwork

__all__ = ["KvClients", "NetnsKvCluster", "RoleSample", "RoleWatcher", "wait_until"]

RAFT_PORT = 7000
HTTP_PORT = 8000


def wait_until(pred: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    """Poll `pred` until it is true (True) or `timeout` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return pred()


class NetnsKvCluster:
    """N `raft_kv` nodes, one per namespace of `net`; logs and data under `root`."""

    def __init__(
        self, net: NetnsNetwork, root: Path, *, tick: float = 0.05, timeout: float = 3.0
    ) -> None:
        self.net, self.root, self.tick, self.timeout = net, root, tick, timeout
        self.ids = list(net.ids)
        self.peers = ",".join(f"{i}={net.ips[i]}:{RAFT_PORT}" for i in self.ids)
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.client = httpx.Client(timeout=timeout + 5.0)
        for i in self.ids:
            self.start(i)

    def url(self, i: int, path: str) -> str:
        return f"http://{self.net.ips[i]}:{HTTP_PORT}{path}"

    def start(self, i: int) -> None:
        with (self.root / f"node{i}.log").open("ab") as log:
            self.procs[i] = self.net.run(
                i,
                [sys.executable, "-m", "gpu_platform.testing.raft_kv", "--id", str(i),
                 "--peers", self.peers, "--data", str(self.root / f"n{i}"),
                 "--http", str(HTTP_PORT), "--http-host", self.net.ips[i],
                 "--tick", str(self.tick), "--timeout", str(self.timeout),
                 "--snapshot-entries", "500", "--compact-keep", "50"],
                stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip

    def kill9(self, i: int) -> None:
        proc = self.procs.pop(i)
        proc.send_signal(signal.SIGKILL)  # kills `ip netns exec`, which exec'd the node
        proc.wait(timeout=30)

    def close(self) -> None:
        for i in list(self.procs):
            self.kill9(i)
        self.client.close()

    def get(self, i: int, path: str, timeout: float | None = None) -> dict[str, Any] | None:
        """The JSON body of a 200 answer, else None (error, timeout, other status)."""
        try:
            r = self.client.get(self.url(i, path), timeout=timeout or self.client.timeout)
        except httpx.HTTPError:
            return None
        return dict(r.json()) if r.status_code == 200 else None

    def status(self, i: int) -> dict[str, Any] | None:
        return self.get(i, "/status", timeout=2.0)

    def put(self, i: int, key: str, value: str) -> tuple[int, dict[str, Any]]:
        """(HTTP status, body); (0, {}) when no answer came (error or client timeout)."""
        body = json.dumps({"key": key, "value": value})
        try:
            r = self.client.post(self.url(i, "/put"), content=body)
            return r.status_code, dict(r.json())
        except (httpx.HTTPError, ValueError):
            return 0, {}

    def read(self, i: int, key: str) -> tuple[int, dict[str, Any]]:
        """A linearizable get: (HTTP status, body); (0, {}) when no answer came."""
        try:
            r = self.client.get(self.url(i, "/get"), params={"key": key})
            return r.status_code, dict(r.json())
        except (httpx.HTTPError, ValueError):
            return 0, {}

    def dump(self, i: int) -> dict[str, Any] | None:
        return self.get(i, "/dump", timeout=2.0)

    def leaders(self, among: list[int] | None = None) -> set[int]:
        """The running nodes (of `among`) that say they lead now."""
        out = set()
        for i in among or list(self.procs):
            st = self.status(i) if i in self.procs else None
            if st is not None and st["role"] == "leader":
                out.add(i)
        return out

    def wait_leader(self, among: list[int] | None = None, timeout: float = 60.0) -> int | None:
        """The single leader of `among` (default: all running nodes), or None after `timeout`."""
        found: list[int] = []

        def one() -> bool:
            lead = self.leaders(among)
            found[:] = sorted(lead)
            return len(lead) == 1

        return found[0] if wait_until(one, timeout) else None


@dataclass(frozen=True, slots=True)
class RoleSample:
    at: float
    node: int
    term: int
    role: str
    commit: int


class RoleWatcher(threading.Thread):
    """Polls `/status` of every node until `stop()`; keeps every answer as a `RoleSample`."""

    def __init__(self, cluster: NetnsKvCluster, interval: float = 0.05) -> None:
        super().__init__(daemon=True, name="role-watcher")
        self.cluster, self.interval = cluster, interval
        self.samples: list[RoleSample] = []
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            for i in self.cluster.ids:
                st = self.cluster.status(i) if i in self.cluster.procs else None
                if st is not None:
                    self.samples.append(
                        RoleSample(time.monotonic(), i, st["term"], st["role"], st["commit"])
                    )
            self._halt.wait(self.interval)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=30)

    def leaders_by_term(self) -> dict[int, set[int]]:
        out: dict[int, set[int]] = {}
        for s in self.samples:
            if s.role == "leader":
                out.setdefault(s.term, set()).add(s.node)
        return out

    def two_leaders(self) -> dict[int, set[int]]:
        """Terms in which more than one node reported LEADER (should be empty)."""
        return {t: n for t, n in self.leaders_by_term().items() if len(n) > 1}


class KvClients:
    """`n` client threads doing puts (unique values) and gets over `keys` keys."""

    def __init__(
        self,
        cluster: NetnsKvCluster,
        n: int = 3,
        keys: int = 8,
        seed: int = 0,
        dirty_reads: bool = False,
    ) -> None:
        self.cluster = cluster
        self.dirty_reads = dirty_reads
        self.keys = [f"k{k}" for k in range(keys)]
        self._ops: list[Operation[KvInput, KvOutput]] = []
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self.acked_puts = 0
        self._threads = [
            threading.Thread(
                target=self._run, args=(c, random.Random(seed * 1000 + c)), daemon=True
            )
            for c in range(n)
        ]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._halt.set()
        for t in self._threads:
            t.join(timeout=60)

    def wait_acked(self, more: int, timeout: float) -> bool:
        """Wait until `more` puts beyond the current count are acknowledged."""
        target = self.acked_puts + more
        return wait_until(lambda: self.acked_puts >= target, timeout)

    def history(self) -> list[Operation[KvInput, KvOutput]]:
        with self._lock:
            return list(self._ops)

    def _record(self, op: Operation[KvInput, KvOutput]) -> None:
        with self._lock:
            self._ops.append(op)
            if op.input.op is KvOp.PUT and op.ret is not None:
                self.acked_puts += 1

    def _run(self, client: int, rng: random.Random) -> None:
        c = self.cluster
        target = rng.choice(c.ids)
        n = 0
        while not self._halt.is_set():
            key = rng.choice(self.keys)
            if rng.random() < 0.5:
                value = f"c{client}-{n}"
                n += 1
                call = time.monotonic()
                code, body = c.put(target, key, value)
                ret = time.monotonic()
                ok = code == 200
                self._record(
                    Operation(
                        KvInput(KvOp.PUT, key, value),
                        KvOutput() if ok else None,
                        call,
                        ret if ok else None,
                        client,
                    )
                )
            else:
                call = time.monotonic()
                if self.dirty_reads:  # a deliberately wrong client: any node's local state
                    dump = c.dump(rng.choice(list(c.procs)))
                    ret = time.monotonic()
                    code, body = (200, {"value": dump["kv"].get(key)}) if dump else (0, {})
                else:
                    code, body = c.read(target, key)
                    ret = time.monotonic()
                ok = code == 200
                if ok:
                    value = body["value"] if body["value"] is not None else ""
                    got = KvOutput(value)
                    self._record(Operation(KvInput(KvOp.GET, key), got, call, ret, client))
            if ok:
                continue
            lead = body.get("leader_id")
            if isinstance(lead, int) and lead in c.procs and lead != target:
                target = lead
            else:
                target = rng.choice(c.ids)
                self._halt.wait(0.05)
