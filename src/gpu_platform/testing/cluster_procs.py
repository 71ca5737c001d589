"""A replicated cluster of real processes on loopback: `gpu-platform serve --id/--peers` servers
and `gpu-platform agent` processes with simulated nodes. Used by the integration tests, the
chaos runs and the benchmarks; every wait is generous and nothing here asserts on time.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from gpu_platform.domain.model.job import JobState
from gpu_platform.testing.linearizability import Operation
from gpu_platform.testing.linearizability_models import JobInput, JobOp, JobOutput
from gpu_platform.testing.ports import reserve_port

__all__ = ["JobStoreClients", "ReplicatedCluster", "wait_until"]

_BIN = Path(sys.executable).with_name("gpu-platform")
ENTRY = [str(_BIN)] if _BIN.exists() else [sys.executable, "-m", "gpu_platform.main"]

#: Fast failure detection for tests: a silent node is SUSPECT after 2 s and DOWN after 6 s;
#: a cut-off agent's tasks are stopped 1.5 s (+0.5 s grace) after its last acknowledged beat.
FAST_ENV = {
    "GPU_PLATFORM_NODE_SUSPECT_AFTER_SECONDS": "2",
    "GPU_PLATFORM_NODE_DOWN_AFTER_SECONDS": "6",
    "GPU_PLATFORM_AGENT_HEARTBEAT_SECONDS": "0.5",
    "GPU_PLATFORM_AGENT_LEASE_SECONDS": "1.5",
    "GPU_PLATFORM_AGENT_FENCE_GRACE_SECONDS": "0.5",
    "GPU_PLATFORM_SCHEDULE_INTERVAL_SECONDS": "0.2",
    "GPU_PLATFORM_STOP_GRACE_SECONDS": "2",
    "GPU_PLATFORM_ISOLATION": "none",
    "GPU_PLATFORM_LOG_FORMAT": "json",
    "GPU_PLATFORM_AUTH": "off",
    "GPU_PLATFORM_RATE_LIMIT_PER_SECOND": "0",
    # Test jobs may run this interpreter (possibly under /root, 0700) and write into the test's
    # temporary directories: they run as root in the host's PID namespace here (the product
    # default, `nobody` in a namespace, is tested by tests/integration/test_job_attacks.py).
    "GPU_PLATFORM_JOB_USER": "root",
    "GPU_PLATFORM_JOB_PID_NAMESPACE": "false",
}


def wait_until(cond: Callable[[], bool], timeout: float = 60.0, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if cond():
                return True
        time.sleep(step)
    return False


class ReplicatedCluster:
    """`servers` control-plane servers and `agents` agents (node-1..node-N of `profile`)."""

    def __init__(
        self,
        root: Path,
        *,
        servers: int = 3,
        agents: int = 3,
        profile: str = "dgx-a100",
        env: dict[str, str] | None = None,
    ) -> None:
        self.root = root
        self.ids = list(range(1, servers + 1))
        # Members need each other's addresses before any starts: ports reserved for this
        # xdist worker (testing/ports.py), kept across restarts of a member.
        self.raft = {i: reserve_port() for i in self.ids}
        self.http = {i: reserve_port() for i in self.ids}
        self.grpc = {i: reserve_port() for i in self.ids}
        self.agent_ports = {i: reserve_port() for i in self.ids}
        self.peers = ",".join(f"{i}=127.0.0.1:{p}" for i, p in self.raft.items())
        self.nodes = [f"node-{n}" for n in range(1, agents + 1)]
        self.profile = profile
        self.env = {**os.environ, **FAST_ENV, **(env or {})}
        self.env.setdefault("GPU_PLATFORM_CLUSTER_TOKEN", "gpc_test_" + uuid.uuid4().hex)
        self.servers: dict[int, subprocess.Popen[bytes]] = {}
        self.agents: dict[str, subprocess.Popen[bytes]] = {}
        self.agent_metrics = {node: reserve_port() for node in self.nodes}
        self.client = httpx.Client(timeout=15.0, follow_redirects=True)

    # -- processes ---------------------------------------------------------------------------

    def _spawn(self, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            return subprocess.Popen(
                argv, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def add_server_ports(self, i: int) -> None:
        """Ports for a new server `i` (it joins with `start_server(i, join=True)`)."""
        for ports in (self.raft, self.http, self.grpc, self.agent_ports):
            ports[i] = reserve_port()
        self.ids.append(i)
        self.peers += f",{i}=127.0.0.1:{self.raft[i]}"

    def start_server(self, i: int, *, join: bool = False) -> None:
        data = self.root / f"server-{i}"
        data.mkdir(parents=True, exist_ok=True)
        argv = [
            *ENTRY, "serve", "--id", str(i), "--peers", self.peers,
            "--port", str(self.http[i]), "--grpc-port", str(self.grpc[i]),
            "--agent-port", str(self.agent_ports[i]), "--data-dir", str(data),
        ]  # fmt: skip
        if join:
            argv.append("--join")
        self.servers[i] = self._spawn(argv, self.root / f"server-{i}.log")

    def start_agent(self, node: str) -> None:
        data = self.root / node
        data.mkdir(parents=True, exist_ok=True)
        servers = ",".join(f"127.0.0.1:{p}" for p in self.agent_ports.values())
        argv = [
            *ENTRY, "agent", "--servers", servers, "--node", node,
            "--sim-profile", self.profile, "--data-dir", str(data),
            "--metrics-port", str(self.agent_metrics[node]),
        ]  # fmt: skip
        self.agents[node] = self._spawn(argv, self.root / f"{node}.log")

    def start(self) -> ReplicatedCluster:
        for i in self.ids:
            self.start_server(i)
        for node in self.nodes:
            self.start_agent(node)
        return self

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run `gpu-platform ARGS...` (the CLI) and return what it did."""
        return subprocess.run(
            [*ENTRY, *args], check=False, env=self.env, capture_output=True, text=True, timeout=120
        )

    def kill_server(self, i: int, sig: int = signal.SIGKILL) -> None:
        proc = self.servers[i]
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        if sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):
            proc.wait(timeout=60)

    def signal_agent(self, node: str, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.agents[node].send_signal(sig)

    def close(self) -> None:
        for proc in [*self.agents.values(), *self.servers.values()]:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGCONT)
                proc.send_signal(signal.SIGTERM)
        for proc in [*self.agents.values(), *self.servers.values()]:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        self.client.close()

    # -- observation -------------------------------------------------------------------------

    def url(self, i: int) -> str:
        return f"http://127.0.0.1:{self.http[i]}"

    def alive(self) -> list[int]:
        return [i for i, p in self.servers.items() if p.poll() is None]

    def cluster(self, i: int) -> dict[str, Any] | None:
        try:
            r = self.client.get(self.url(i) + "/v1/cluster", timeout=2.0)
        except httpx.HTTPError:
            return None
        return r.json() if r.status_code == 200 else None

    def leader(self, among: list[int] | None = None) -> int | None:
        """The server that reports itself leader (with the highest term), if any."""
        best: tuple[int, int] | None = None
        for i in among or self.alive():
            info = self.cluster(i)
            if info and info["role"] == "leader" and (best is None or info["term"] > best[0]):
                best = (info["term"], i)
        return best[1] if best else None

    def wait_leader(self, among: list[int] | None = None, timeout: float = 60.0) -> int:
        found: list[int] = []

        def has() -> bool:
            lead = self.leader(among)
            if lead is not None:
                found.append(lead)
            return lead is not None

        if not wait_until(has, timeout):
            raise TimeoutError(f"no leader among {among or self.alive()}")
        return found[-1]

    def agents_connected(self, i: int) -> set[str]:
        info = self.cluster(i)
        return set(info["agents"]) if info else set()

    def wait_ready(self, timeout: float = 90.0) -> int:
        """Until a leader exists, every agent streams to it and every live server answers
        HTTP (a follower may open its port after the leader is elected); returns the leader."""
        lead = self.wait_leader(timeout=timeout)
        want = set(self.nodes)

        def ready() -> bool:
            nonlocal lead
            lead = self.leader() or lead
            answering = all(self.cluster(i) is not None for i in self.alive())
            return answering and want <= self.agents_connected(lead)

        if not wait_until(ready, timeout):
            raise TimeoutError(f"agents not all connected to {lead}: {self.agents_connected(lead)}")
        return lead

    def any_url(self) -> str:
        alive = self.alive()
        lead = self.leader(alive)
        return self.url(lead if lead is not None else alive[0])

    def submit(self, argv: list[str], gpus: int = 1, **extra: Any) -> dict[str, Any]:
        r = self.client.post(
            self.any_url() + "/v1/jobs", json={"command": argv, "gpus": gpus, **extra}
        )
        r.raise_for_status()
        body: dict[str, Any] = r.json()
        return body

    def job(self, job_id: str) -> dict[str, Any]:
        r = self.client.get(self.any_url() + f"/v1/jobs/{job_id}")
        r.raise_for_status()
        body: dict[str, Any] = r.json()
        return body

    def jobs(self) -> list[dict[str, Any]]:
        r = self.client.get(self.any_url() + "/v1/jobs")
        r.raise_for_status()
        body = r.json()
        return list(body["jobs"] if isinstance(body, dict) else body)


class JobStoreClients:
    """Client threads that submit (kept QUEUED: each job depends on `blocker`, a job that runs
    on), cancel and read jobs through any live server, recording a history for the
    linearizability checker. A mutation whose answer says nothing of its outcome (timeout,
    5xx) is pending; a failed read records nothing. A submit carries an `Idempotency-Key` and a
    unique name, and is retried through any live server until it is acknowledged (one
    operation spanning its retries): `duplicates` then counts intended submissions that became
    more than one job. Each job is cancelled at most once, so no key collects many pending
    operations (each one doubles the checker's search)."""

    def __init__(self, cluster: ReplicatedCluster, blocker: str, clients: int = 3) -> None:
        self._c = cluster
        self._blocker = blocker
        self._n = clients
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.history: list[Operation[JobInput, JobOutput]] = []
        self.acked: list[str] = []
        self._cancelled: set[str] = set()  # each job is cancelled at most once

    def start(self) -> JobStoreClients:
        self._threads = [threading.Thread(target=self._loop, args=(i,)) for i in range(self._n)]
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> list[Operation[JobInput, JobOutput]]:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=30)
        with self._lock:
            return list(self.history)

    def _record(self, op: Operation[JobInput, JobOutput]) -> None:
        with self._lock:
            self.history.append(op)

    @staticmethod
    def duplicates(jobs: list[dict[str, Any]]) -> int:
        """Jobs beyond the first of each intended submission (by the clients' unique names)."""
        names = Counter(j["name"] for j in jobs if str(j.get("name", "")).startswith("chaos-"))
        return sum(n - 1 for n in names.values())

    def _submit(self, http: httpx.Client, me: int, n: int) -> str | None:
        """One intended submission, retried under one key until acknowledged; its job id."""
        body = {
            "command": ["true"],
            "gpus": 1,
            "depends_on": [self._blocker],
            "name": f"chaos-{me}-{n}",
        }
        headers = {"Idempotency-Key": f"chaos-{me}-{n}-{uuid.uuid4().hex[:8]}"}
        give_up = None
        tries = 0
        while True:
            alive = self._c.alive()
            url = self._c.url(alive[(n + tries) % len(alive)]) if alive else None
            tries += 1
            try:
                if url is not None:
                    r = http.post(url + "/v1/jobs", json=body, headers=headers)
                    if r.status_code == 201:
                        return str(r.json()["id"])
                    if 400 <= r.status_code < 500:
                        return None  # refused: no job was created
            except httpx.HTTPError:
                pass
            if self._stop.is_set():  # finish what is in flight, bounded
                give_up = give_up or time.monotonic() + 20.0
                if time.monotonic() >= give_up:
                    return None
            time.sleep(0.05)

    def _loop(self, me: int) -> None:
        http = httpx.Client(timeout=5.0, follow_redirects=True)
        rng = random.Random(me)
        n = 0
        while not self._stop.is_set():
            n += 1
            urls = [self._c.url(i) for i in self._c.alive()]
            url = urls[n % len(urls)]
            with self._lock:
                target = rng.choice(self.acked) if self.acked else None
                kind = "submit"
                if target is not None and rng.random() >= 0.3:
                    kind = "get" if rng.random() < 0.7 else "cancel"
                if kind == "cancel" and target is not None:
                    if target in self._cancelled:
                        kind = "get"  # at most one cancel per job keeps the check small
                    else:
                        self._cancelled.add(target)
            call = time.monotonic()
            try:
                if kind == "submit":
                    acked = self._submit(http, me, n)
                    if acked is not None:
                        job_id = acked
                        op = JobInput(JobOp.SUBMIT, job_id)
                        self._record(Operation(op, JobOutput(True), call, time.monotonic(), me))
                        with self._lock:
                            self.acked.append(job_id)
                    continue
                assert target is not None
                if kind == "get":
                    r = http.get(url + f"/v1/jobs/{target}")
                    if r.status_code == 200:
                        out = JobOutput(True, JobState(r.json()["state"]))
                        op = JobInput(JobOp.GET, target)
                        self._record(Operation(op, out, call, time.monotonic(), me))
                    continue
                r = http.post(url + f"/v1/jobs/{target}/cancel", json={})
                op = JobInput(JobOp.CANCEL, target)
                if r.status_code in (200, 409):
                    out = JobOutput(r.status_code == 200)
                    self._record(Operation(op, out, call, time.monotonic(), me))
                else:
                    self._record(Operation(op, None, call, None, me))
            except httpx.HTTPError:
                if kind == "cancel" and target is not None:
                    self._record(Operation(JobInput(JobOp.CANCEL, target), None, call, None, me))
        http.close()
