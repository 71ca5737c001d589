"""Three real `raft_kv` processes on loopback (real gRPC, real SQLite, real kill -9).

Every wait is generous (the machine is shared) and nothing asserts on time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpu_platform.testing.ports import reserve_port
from tests.integration.conftest import wait_for

WAIT = 60.0


class KvCluster:
    """Three `python -m gpu_platform.testing.raft_kv` processes and an HTTP client."""

    def __init__(self, root: Path, n: int = 3, snapshot_entries: int = 10_000) -> None:
        self.root = root
        self.ids = list(range(1, n + 1))
        self.raft_ports = {i: reserve_port() for i in self.ids}
        self.http_ports = {i: reserve_port() for i in self.ids}
        self.peers = ",".join(f"{i}=127.0.0.1:{p}" for i, p in self.raft_ports.items())
        self.snapshot_entries = snapshot_entries
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.client = httpx.Client(timeout=15.0)
        for i in self.ids:
            self.start(i)

    def start(self, i: int) -> None:
        log = (self.root / f"node{i}.log").open("ab")
        self.procs[i] = subprocess.Popen(
            [sys.executable, "-m", "gpu_platform.testing.raft_kv", "--id", str(i),
             "--peers", self.peers, "--data", str(self.root / f"n{i}"),
             "--http", str(self.http_ports[i]), "--tick", "0.05",
             "--snapshot-entries", str(self.snapshot_entries), "--compact-keep", "10"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()

    def kill9(self, i: int) -> None:
        proc = self.procs.pop(i)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    def close(self) -> None:
        for i in list(self.procs):
            self.kill9(i)
        self.client.close()

    def get(self, i: int, path: str) -> dict[str, Any] | None:
        try:
            r = self.client.get(f"http://127.0.0.1:{self.http_ports[i]}{path}")
        except httpx.HTTPError:
            return None
        return dict(r.json()) if r.status_code == 200 else None

    def leader(self) -> int | None:
        """The one node that says it leads, if all running nodes that answer agree."""
        leaders = set()
        for i in self.procs:
            st = self.get(i, "/status")
            if st is not None and st["role"] == "leader":
                leaders.add(i)
        return leaders.pop() if len(leaders) == 1 else None

    def wait_leader(self, exclude: int | None = None) -> int:
        assert wait_for(lambda: self.leader() not in (None, exclude), timeout=WAIT)
        lead = self.leader()
        assert lead is not None
        return lead

    def put(self, i: int, key: str, value: str) -> tuple[int, dict[str, Any]]:
        body = json.dumps({"key": key, "value": value})
        r = self.client.post(f"http://127.0.0.1:{self.http_ports[i]}/put", content=body)
        return r.status_code, dict(r.json())

    def dump(self, i: int) -> dict[str, str]:
        d = self.get(i, "/dump")
        return {} if d is None else dict(d["kv"])


class Writer(threading.Thread):
    """Streams puts to whoever leads; records the writes the cluster acknowledged."""

    def __init__(self, cluster: KvCluster) -> None:
        super().__init__(daemon=True)
        self.c = cluster
        self.acked: dict[str, str] = {}
        self.stop_flag = threading.Event()
        self.target = cluster.ids[0]
        self.attempts = 0

    def run(self) -> None:
        n = 0
        while not self.stop_flag.is_set():
            key, value = f"w{n}", f"v{n}"
            n += 1
            self.attempts += 1
            try:
                code, body = self.c.put(self.target, key, value)
            except (httpx.HTTPError, ValueError):
                code, body = 0, {}
            if code == 200:
                self.acked[key] = value
                continue
            lead = body.get("leader_id")
            live = list(self.c.procs) or self.c.ids
            if isinstance(lead, int) and lead in live:
                self.target = lead
            else:
                self.target = (
                    live[(live.index(self.target) + 1) % len(live)]
                    if self.target in live
                    else live[0]
                )
                time.sleep(0.05)  # fmt: skip

    def wait_acked(self, count: int) -> None:
        assert wait_for(lambda: len(self.acked) >= count, timeout=WAIT), len(self.acked)


@pytest.fixture
def kv(tmp_path: Path) -> Iterator[KvCluster]:
    c = KvCluster(tmp_path, snapshot_entries=40)
    yield c
    c.close()


def test_three_processes_elect_one_leader_and_replicate_a_write(kv: KvCluster) -> None:
    lead = kv.wait_leader()
    code, body = kv.put(lead, "a", "1")
    assert code == 200 and body["index"] > 1
    follower = next(i for i in kv.ids if i != lead)
    # a loaded machine may start a follower's HTTP server after the others have elected, and
    # the leader's first messages to it may have found it not yet listening: wait until it
    # has heard from the leader
    assert wait_for(
        lambda: (kv.get(follower, "/status") or {}).get("leader_id") == lead, timeout=WAIT
    )
    code, body = kv.put(follower, "b", "2")
    assert code == 421 and body["leader_id"] == lead
    assert wait_for(lambda: all(kv.dump(i) == {"a": "1"} for i in kv.ids), timeout=WAIT)
    assert kv.get(lead, "/get?key=a") == {"value": "1"}


def test_a_kill_9_of_the_leader_mid_stream_loses_no_acknowledged_write(kv: KvCluster) -> None:
    old = kv.wait_leader()
    writer = Writer(kv)
    writer.target = old
    writer.start()
    try:
        writer.wait_acked(60)
        kv.kill9(old)
        acked_before_kill = len(writer.acked)
        new = kv.wait_leader(exclude=old)
        assert new != old
        writer.wait_acked(acked_before_kill + 60)  # the stream goes on under the new leader
    finally:
        writer.stop_flag.set()
        writer.join(timeout=WAIT)
    acked = dict(writer.acked)
    survivors = [i for i in kv.ids if i != old]

    def has_all(i: int) -> bool:
        state = kv.dump(i)
        return all(state.get(k) == v for k, v in acked.items())

    assert wait_for(lambda: all(has_all(i) for i in survivors), timeout=WAIT)
    kv.start(old)  # the killed node comes back and catches up (log or snapshot)
    assert wait_for(lambda: has_all(old), timeout=WAIT)
    assert kv.leader() in (None, *survivors, old)


def test_after_every_node_is_killed_the_restarted_cluster_recovers_its_state_from_disk(
    kv: KvCluster,
) -> None:
    lead = kv.wait_leader()
    acked: dict[str, str] = {}
    for n in range(100):  # more than snapshot_entries: recovery goes through a snapshot
        code, _ = kv.put(lead, f"k{n}", f"v{n}")
        if code != 200:
            lead = kv.wait_leader()
            continue
        acked[f"k{n}"] = f"v{n}"
    assert len(acked) >= 50
    for i in kv.ids:
        kv.kill9(i)
    for i in kv.ids:
        kv.start(i)
    lead = kv.wait_leader()
    assert wait_for(
        lambda: all(all(kv.dump(i).get(k) == v for k, v in acked.items()) for i in kv.ids),
        timeout=WAIT,
    )
    some = sorted(acked)[-1]
    assert kv.get(lead, f"/get?key={some}") == {"value": acked[some]}
