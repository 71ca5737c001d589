"""The leader's CPU and memory at scale, snapshots included (issue 21: RSS <= 500 MB at 8,192
GPUs / 100,000 jobs).

One real `gpu-platform serve` process (a one-voter Raft cluster: the leader, SQLite WAL with
fsync; no in-process agent) and 1,024 simulated nodes x 8 GPUs from one `agent_swarm`
process, each node its own real gRPC stream, dialled 64 at a time, heartbeat 5 s (at the
default 1 s, 1,024 agents never all connected on a loaded 2-core machine). 100,000 1-GPU jobs (`fake-exit 0`: each ends at
the swarm's next tick) go in as 10 job arrays over REST; the benchmark then lets them run and
finish for a fixed window (or until all completed). A sampler thread reads the leader's
/proc/PID/status (VmRSS every 0.1 s, VmHWM at the end) and /proc/PID/stat (CPU), and its
/metrics gauge `gpu_platform_raft_log_entries` (it drops when a snapshot is stored):
`raft_snapshot_entries` is set to 2,000 here (the default is 10,000; the same code path, only
more often) so that snapshots of the full 100,000-job state happen in the window.

`leader.resources` (params: GPUs, jobs): samples = the leader's VmRSS samples in bytes over
the run (p50 = steady, p99 near the peak; not microseconds: `extra` names the figures).
`extra`: peak RSS (VmHWM, MiB), steady RSS (median of the samples after all jobs were in),
RSS while a snapshot was taken (the highest sample in a sampling interval in which the log
gauge dropped), snapshots seen, leader CPU seconds per 1,000 jobs created (array submits) and
per 1,000 jobs completed (the run window), jobs completed, load average.

Full: 1,024 nodes / 100,000 jobs, 240 s window. --quick: 128 nodes (1,024 GPUs) / 10,000 jobs,
90 s. Smoke (GPU_PLATFORM_BENCH_SMOKE=1): 4 nodes / 64 jobs, snapshot every 20 entries.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _harness import percentile, result

from gpu_platform.testing.cluster_procs import ReplicatedCluster, wait_until

MIB = 1 << 20


def _status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Sampler(threading.Thread):
    """VmRSS every `step` s; the log-entries gauge every `metrics_every` samples."""

    def __init__(self, pid: int, metrics_url: str, http: Any, step: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.pid, self.url, self.http, self.step = pid, metrics_url, http, step
        self.rss: list[tuple[float, int]] = []  # (monotonic, bytes)
        self.snapshot_rss: list[int] = []  # the highest RSS of each interval with a snapshot
        self.stop = threading.Event()

    def _log_entries(self) -> int | None:
        try:
            body = self.http.get(self.url, timeout=5.0).text
        except Exception:  # a busy leader may not answer in time: skip this reading
            return None
        for line in body.splitlines():
            if line.startswith("gpu_platform_raft_log_entries{"):
                return int(float(line.rsplit(" ", 1)[1]))
        return None

    def run(self) -> None:
        last = self._log_entries()
        window: list[int] = []
        n = 0
        while not self.stop.wait(self.step):
            rss = _status_kib(self.pid, "VmRSS") * 1024
            self.rss.append((time.monotonic(), rss))
            window.append(rss)
            n += 1
            if n % 5:
                continue
            now = self._log_entries()
            if now is not None and last is not None and now < last:
                self.snapshot_rss.append(max(window))
            if now is not None:
                last = now
            window = window[-1:]  # an interval starts at its first sample


def _arrays(c: ReplicatedCluster, url: str, jobs: int, arrays: int) -> None:
    per = jobs // arrays
    body = {"command": ["fake-exit", "0"], "gpus": 1}
    for a in range(arrays):
        n = per if a < arrays - 1 else jobs - per * (arrays - 1)
        r = c.client.post(url + "/v1/arrays", json={**body, "array": f"0-{n - 1}"}, timeout=600)
        if r.status_code != 201:
            raise RuntimeError(f"POST /v1/arrays: {r.status_code} {r.text[:200]}")


def _measure(root: Path, nodes: int, jobs: int, window_s: float, snap_every: int) -> dict[str, Any]:
    env = {"GPU_PLATFORM_NODE_SUSPECT_AFTER_SECONDS": "60", "GPU_PLATFORM_NODE_DOWN_AFTER_SECONDS": "120",
           "GPU_PLATFORM_AGENT_HEARTBEAT_SECONDS": "5", "GPU_PLATFORM_AGENT_LEASE_SECONDS": "60",
           "GPU_PLATFORM_LOG_LEVEL": "warning", "GPU_PLATFORM_SCHEDULE_INTERVAL_SECONDS": "0.5",
           "GPU_PLATFORM_RAFT_SNAPSHOT_ENTRIES": str(snap_every)}  # fmt: skip
    c = ReplicatedCluster(root, servers=1, agents=0, env=env).start()
    swarm = None
    try:
        servers = ",".join(f"127.0.0.1:{p}" for p in c.agent_ports.values())
        with (root / "swarm.log").open("ab") as log:  # starts beside the server: it retries
            swarm = subprocess.Popen(
                [sys.executable, "-m", "gpu_platform.testing.agent_swarm",
                 "--servers", servers, "--nodes", str(nodes), "--ramp", "64"],
                env=c.env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        lead = c.wait_leader(timeout=120)
        if not wait_until(lambda: len(c.agents_connected(lead)) >= nodes, 600, 1.0):
            raise RuntimeError(f"only {len(c.agents_connected(lead))} of {nodes} agents connected")
        pid = c.servers[lead].pid
        url = c.url(lead)
        sampler = Sampler(pid, url + "/metrics", c.client)
        sampler.start()
        cpu0 = _cpu_s(pid)
        t0 = time.monotonic()
        _arrays(c, url, jobs, arrays=10 if jobs >= 1000 else 2)
        submitted = time.monotonic()
        cpu_in = _cpu_s(pid)

        def completed() -> int:
            status = c.client.get(url + "/v1/status", timeout=60).json()
            return int(status["jobs_by_state"].get("COMPLETED", 0))

        done = [0]

        def all_done() -> bool:
            done[0] = completed()
            return done[0] >= jobs

        wait_until(all_done, window_s, 0.5 if jobs < 1000 else 2.0)
        elapsed = time.monotonic() - submitted
        cpu_end = _cpu_s(pid)
        hwm = _status_kib(pid, "VmHWM") * 1024
        sampler.stop.set()
        sampler.join(timeout=30)
        terms = (c.cluster(lead) or {}).get("term")
    finally:
        if swarm is not None:
            swarm.send_signal(signal.SIGTERM)
            try:
                swarm.wait(timeout=30)
            except subprocess.TimeoutExpired:
                swarm.kill()
        c.close()
    steady = [rss for at, rss in sampler.rss if at >= submitted]
    row = result(
        "leader.resources",
        {"gpus": nodes * 8, "nodes": nodes, "jobs": jobs, "servers": 1, "api": "rest arrays",
         "snapshot_entries": snap_every},
        [float(rss) for _, rss in sampler.rss],
        extra={
            "unit": "samples are VmRSS bytes, not microseconds",
            "peak_rss_mib": round(hwm / MIB, 1),
            "steady_rss_mib": round(percentile(steady, 50) / MIB, 1) if steady else None,
            "snapshot_rss_mib": round(max(sampler.snapshot_rss) / MIB, 1)
            if sampler.snapshot_rss else None,
            "snapshots_seen": len(sampler.snapshot_rss),
            "submit_s": round(submitted - t0, 2),
            "cpu_s_per_1k_created": round((cpu_in - cpu0) / jobs * 1000, 2),
            "completed": done[0],
            "run_window_s": round(elapsed, 1),
            "cpu_s_per_1k_completed": round((cpu_end - cpu_in) / done[0] * 1000, 2)
            if done[0] >= 100 else None,  # too few finished (agents cut off) to mean anything
            "leader_cpu_s": round(cpu_end - cpu0, 1),
            "term_at_end": terms,
            "load_average": [round(x, 2) for x in os.getloadavg()],
        },
    )  # fmt: skip
    row["ops_per_s"] = None  # memory, not a rate
    return row


def run(quick: bool) -> list[dict[str, Any]]:
    smoke = os.environ.get("GPU_PLATFORM_BENCH_SMOKE") == "1"
    nodes, jobs, window, snap = (
        (4, 64, 30, 20)
        if smoke
        else (128, 10_000, 90, 2000)
        if quick
        else (1024, 100_000, 240, 2000)
    )
    with tempfile.TemporaryDirectory(prefix="bench-leader-") as tmp:
        return [_measure(Path(tmp), nodes, jobs, window, snap)]


if __name__ == "__main__":
    import json

    print(json.dumps(run("--quick" in sys.argv), indent=2))
