"""The replicated control plane inside a `NetnsNetwork`: 3 `serve` servers and 2 agents, each
process in its own network namespace, so a partition cuts Raft, the agents' streams and
redirects alike. A test HARNESS (root); nothing here asserts.

Layout (namespace K of the network; the test process talks to every node over the host veth,
which partitions never cut)::

    node 1..3   gpu-platform serve --id K --peers 1=IP1:7000,2=IP2:7000,3=IP3:7000
                --host IP_K (REST :8000, gRPC :9000, agents' stream :9100, advertised as IP_K)
    node 4..5   gpu-platform agent --servers IP1:9100,IP2:9100,IP3:9100 --node node-1|node-2

* `NetnsControlPlane` is a `ReplicatedCluster` (same API: `url`, `alive`, `cluster`,
  `wait_leader`, `submit`, `jobs`, and `JobStoreClients` work on it unchanged) whose processes
  run through `NetnsNetwork.run`; `isolate(server)` cuts one server off from the other servers
  and from both agents.
* `ClusterWatcher` polls `/v1/cluster` on every server until stopped; `two_leaders()` lists
  the terms in which two servers ever said LEADER (Raft's election safety says: none).
* `double_booked(jobs)` lists GPUs that two SCHEDULED/RUNNING jobs hold at once.

The servers run with explicit `--id/--peers` and no local agent, whatever the environment says.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from gpu_platform.testing.cluster_procs import ENTRY, ReplicatedCluster
from gpu_platform.testing.netns import NetnsNetwork

__all__ = [
    "PARTITION_ENV",
    "ClusterSample",
    "ClusterWatcher",
    "NetnsControlPlane",
    "double_booked",
]

RAFT_PORT = 7000
HTTP_PORT = 8000
GRPC_PORT = 9000
AGENT_PORT = 9100
SERVERS = 3
AGENTS = 2

#: A cut-off leader sends no RST: its agents notice only by gRPC keepalive (about 5-10 s), so
#: the new leader must not declare their nodes DOWN before then (FAST_ENV says 2 s / 4 s).
PARTITION_ENV = {
    "GPU_PLATFORM_NODE_SUSPECT_AFTER_SECONDS": "10",
    "GPU_PLATFORM_NODE_DOWN_AFTER_SECONDS": "20",
    # the agents of a cut-off leader find the new one in a few seconds: keep their tasks
    "GPU_PLATFORM_AGENT_LEASE_SECONDS": "8",
}


class NetnsControlPlane(ReplicatedCluster):
    """Servers on nodes 1..3 and agents on nodes 4..5 of `net` (which needs 5 nodes)."""

    def __init__(self, net: NetnsNetwork, root: Path, *, env: dict[str, str] | None = None) -> None:
        if len(net.ids) < SERVERS + AGENTS:
            raise ValueError(f"the network needs {SERVERS + AGENTS} nodes, has {len(net.ids)}")
        super().__init__(root, servers=SERVERS, agents=AGENTS, env={**PARTITION_ENV, **(env or {})})
        self.net = net
        self.ids = list(range(1, SERVERS + 1))
        self.raft = {i: RAFT_PORT for i in self.ids}
        self.http = {i: HTTP_PORT for i in self.ids}
        self.grpc = {i: GRPC_PORT for i in self.ids}
        self.agent_ports = {i: AGENT_PORT for i in self.ids}
        self.peers = ",".join(f"{i}={net.ips[i]}:{RAFT_PORT}" for i in self.ids)
        #: node name -> the network node its agent runs on
        self.agent_node = {name: SERVERS + 1 + k for k, name in enumerate(self.nodes)}
        for key in ("GPU_PLATFORM_LOCAL_AGENT", "GPU_PLATFORM_SERVER_ID", "GPU_PLATFORM_PEERS"):
            self.env.pop(key, None)

    def _spawn_in(self, node: int, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            return self.net.run(
                node, argv, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    def add_server_ports(self, i: int) -> None:
        raise NotImplementedError("the namespace harness has a fixed set of three servers")

    def start_server(self, i: int, *, join: bool = False) -> None:
        if join:
            raise NotImplementedError("the namespace harness does not join servers")
        data = self.root / f"server-{i}"
        data.mkdir(parents=True, exist_ok=True)
        ip = self.net.ips[i]
        argv = [
            *ENTRY, "serve", "--id", str(i), "--peers", self.peers,
            "--host", ip, "--port", str(HTTP_PORT), "--grpc-port", str(GRPC_PORT),
            "--agent-port", str(AGENT_PORT), "--data-dir", str(data),
        ]  # fmt: skip
        with (self.root / f"server-{i}.log").open("ab") as out:
            self.servers[i] = self.net.run(
                i, argv, env={**self.env, "GPU_PLATFORM_ADVERTISE_HOST": ip},
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

    def start_agent(self, node: str) -> None:
        data = self.root / node
        data.mkdir(parents=True, exist_ok=True)
        servers = ",".join(f"{self.net.ips[i]}:{AGENT_PORT}" for i in self.ids)
        argv = [
            *ENTRY, "agent", "--servers", servers, "--node", node,
            "--sim-profile", self.profile, "--data-dir", str(data),
        ]  # fmt: skip
        self.agents[node] = self._spawn_in(self.agent_node[node], argv, self.root / f"{node}.log")

    def url(self, i: int) -> str:
        return f"http://{self.net.ips[i]}:{HTTP_PORT}"

    def isolate(self, server: int) -> None:
        """Cut `server` off from the other servers and from every agent."""
        self.net.isolate(server)

    def heal(self) -> None:
        self.net.heal()

    def stale_jobs(self, i: int) -> list[dict[str, Any]] | None:
        """Server `i`'s own replica of the jobs (`X-Read-Consistency: stale`), or None."""
        try:
            r = self.client.get(
                self.url(i) + "/v1/jobs",
                headers={"X-Read-Consistency": "stale"},
                follow_redirects=False,
                timeout=10.0,
            )
        except httpx.HTTPError:
            return None
        if r.status_code != 200:
            return None
        body = r.json()
        return list(body["jobs"] if isinstance(body, dict) else body)


@dataclass(frozen=True, slots=True)
class ClusterSample:
    at: float
    server: int
    term: int
    role: str
    commit: int
    leader_id: int | None


class ClusterWatcher(threading.Thread):
    """Polls `/v1/cluster` on every server of `cluster` until `stop()`; keeps every answer."""

    def __init__(self, cluster: NetnsControlPlane, interval: float = 0.1) -> None:
        super().__init__(daemon=True, name="cluster-watcher")
        self.cluster, self.interval = cluster, interval
        self.samples: list[ClusterSample] = []
        self._lock = threading.Lock()
        self._halt = threading.Event()

    def run(self) -> None:
        http = httpx.Client(timeout=2.0)
        try:
            while not self._halt.is_set():
                for i in self.cluster.ids:
                    try:
                        r = http.get(self.cluster.url(i) + "/v1/cluster")
                    except httpx.HTTPError:
                        continue
                    if r.status_code != 200:
                        continue
                    info = r.json()
                    sample = ClusterSample(
                        time.monotonic(), i, info["term"], info["role"], info["commit"],
                        info["leader_id"],
                    )  # fmt: skip
                    with self._lock:
                        self.samples.append(sample)
                self._halt.wait(self.interval)
        finally:
            http.close()

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=30)

    def snapshot(self) -> list[ClusterSample]:
        with self._lock:
            return list(self.samples)

    def leaders_by_term(self) -> dict[int, set[int]]:
        out: dict[int, set[int]] = {}
        for s in self.snapshot():
            if s.role == "leader":
                out.setdefault(s.term, set()).add(s.server)
        return out

    def two_leaders(self) -> dict[int, set[int]]:
        """Terms in which more than one server reported LEADER (should be empty)."""
        return {t: n for t, n in self.leaders_by_term().items() if len(n) > 1}

    def first_leader_after(self, since: float, other_than: int) -> ClusterSample | None:
        """The first sample after `since` (monotonic s) of a leader other than `other_than`."""
        for s in self.snapshot():
            if s.at >= since and s.role == "leader" and s.server != other_than:
                return s
        return None


def double_booked(jobs: Iterable[dict[str, Any]]) -> list[str]:
    """GPU uuids held by more than one SCHEDULED/RUNNING job (should be empty)."""
    held: dict[str, str] = {}
    twice: list[str] = []
    for job in jobs:
        alloc = job.get("allocation")
        if job["state"] not in ("SCHEDULED", "RUNNING") or not alloc:
            continue
        for task in alloc["tasks"]:
            for uuid in task["gpu_uuids"]:
                if uuid in held:
                    twice.append(uuid)
                held[uuid] = job["id"]
    return twice
