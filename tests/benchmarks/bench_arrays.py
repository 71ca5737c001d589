"""Job arrays: jobs created per second by one array submit, beside single submits in the same
run (DESIGN row 22, issue 21: >= 20,000 jobs/s created).

- `embedded`: the embedded core in this process — a ControlPlane over the SQLite job store that
  `serve --server-id 0` uses (WAL, synchronous=FULL: every task durable when the call returns),
  the scheduler loop not running. One `submit_array` of N tasks against N `submit` calls
  (capped: see `singles`).
- `rest`: the default server (`gpu-platform serve`: a one-voter Raft cluster, its own agent) on
  loopback. One POST /v1/arrays against POST /v1/jobs one by one (keep-alive). Every task and
  single depends on a job that sleeps, so they stay queued (reason `dependency`) and nothing
  else is launched while we measure; the array carries the issue's throttle `%64`.

A row's ops_per_s is jobs created per second: tasks / seconds until the call returned (the
array's whole answer, its summary included). Its baseline is the single submits' rate.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from _harness import baseline, result

from gpu_platform.adapters.outbound.sim.inventory import build_node
from gpu_platform.adapters.outbound.storage import SqliteJobStore
from gpu_platform.application.control_plane import ControlPlane
from gpu_platform.domain.model.job import JobSpec
from gpu_platform.domain.model.node import Inventory
from gpu_platform.testing.fakes import (
    FakeJobRunner,
    ManualClock,
    RecordingPublisher,
    SequentialJobIds,
)
from gpu_platform.testing.ports import wait_for_ports

ENTRY = [sys.executable, "-m", "gpu_platform.main"]


def sizes(quick: bool, path: str) -> tuple[tuple[int, ...], int]:
    """(array sizes, most single submits measured beside each). Over REST the singles are
    capped lower: each one pays a scheduling cycle over every queued job (100,000 single
    submits would take most of an hour)."""
    if os.environ.get("GPU_PLATFORM_BENCH_SMOKE"):  # the test suite's run: the schema only
        return (100, 1000), 20
    if quick:
        return (1000, 10_000), 200
    return (1000, 10_000, 100_000), 1000 if path == "embedded" else 200


def rows_for(
    path: str, n: int, seconds: float, singles_us: list[float], cpu_seconds: float | None = None
) -> list[dict[str, Any]]:
    single = result("arrays.single_submits", {"path": path, "submits": len(singles_us)}, singles_us)
    per_job_us = seconds * 1e6 / n
    array = result(
        "arrays.create",
        {"path": path, "tasks": n},
        [per_job_us],
        baseline=baseline("single submits", single, submits=len(singles_us)),
        extra={
            "seconds": round(seconds, 4),
            "target_jobs_per_s": 20_000,
            # CPU time the call cost (this process, or the server's): on a shared, loaded
            # machine wall time counts other processes' turns too
            **({} if cpu_seconds is None else {"cpu_seconds": round(cpu_seconds, 4)}),
        },
    )
    cpu = f", cpu {cpu_seconds:.3f}s" if cpu_seconds is not None else ""
    print(  # as it goes: a full run takes minutes
        f"arrays.create {path} {n:>7,} tasks: {n / seconds:>9,.0f} jobs/s ({seconds:.3f}s{cpu})"
        f" | {len(singles_us)} single submits: {single['ops_per_s']:,.0f}/s",
        file=sys.stderr,
        flush=True,
    )
    return [array, single]


def _timed(fn: Any, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        out.append((time.perf_counter_ns() - t0) / 1000)
    return out


def bench_embedded(quick: bool) -> list[dict[str, Any]]:
    arrays, cap = sizes(quick, "embedded")
    inventory = Inventory((build_node("n0", 8, numa_nodes=2),), source="bench", simulated=True)
    spec = JobSpec(("true",), gpus=1)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in arrays:
            store = SqliteJobStore(Path(tmp) / f"jobs-{n}.db")
            plane = ControlPlane(
                inventory,
                store,
                FakeJobRunner(),
                ManualClock(),
                SequentialJobIds(),
                RecordingPublisher(),
            )
            t0, c0 = time.perf_counter(), time.process_time()
            made = plane.submit_array(spec, f"0-{n - 1}%64")
            seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
            assert made.array.count == n
            singles = _timed(lambda p=plane: p.submit(spec), min(n, cap))
            rows += rows_for("embedded", n, seconds, singles, cpu)
            store.close()
    return rows


def bench_rest(quick: bool) -> list[dict[str, Any]]:
    arrays, cap = sizes(quick, "rest")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, _Server(Path(tmp)) as server:
        client = server.client
        blocker = client.post("/v1/jobs", json={"command": ["sleep", "3600"], "gpus": 0})
        blocker_id = blocker.raise_for_status().json()["id"]
        # everything measured waits for the blocker to complete: nothing is launched meanwhile
        body: dict[str, Any] = {"command": ["true"], "gpus": 1, "depends_on": [blocker_id]}
        for _ in range(10):  # warm-up
            client.post("/v1/jobs", json=body).raise_for_status()
        for n in arrays:
            t0, c0 = time.perf_counter(), server.cpu_seconds()
            made = client.post("/v1/arrays", json={**body, "array": f"0-{n - 1}%64"})
            seconds, cpu = time.perf_counter() - t0, server.cpu_seconds() - c0
            assert made.raise_for_status().json()["count"] == n
            singles = _timed(
                lambda: client.post("/v1/jobs", json=body).raise_for_status(), min(n, cap)
            )
            rows += rows_for("rest", n, seconds, singles, cpu)
            client.post(f"/v1/arrays/{made.json()['id']}/cancel").raise_for_status()
    return rows


class _Server:
    """`gpu-platform serve` with defaults (a one-voter Raft cluster) and an httpx client."""

    def __init__(self, tmp: Path) -> None:
        self.env = dict(
            os.environ,
            GPU_PLATFORM_LOG_LEVEL="warning",
            GPU_PLATFORM_LOG_FORMAT="json",
            GPU_PLATFORM_GRPC_PORT="0",  # any free port, as is --port 0: see ports.json
            GPU_PLATFORM_RAFT_PORT="0",
            GPU_PLATFORM_AGENT_PORT="0",
            GPU_PLATFORM_ISOLATION="none",
        )
        self.data = tmp / "data"

    def cpu_seconds(self) -> float:
        """The server process's CPU time so far (user + system, every thread)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def __enter__(self) -> _Server:
        self.proc = subprocess.Popen(
            [*ENTRY, "serve", "--port", "0", "--data-dir", str(self.data)],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.port = wait_for_ports(self.data, self.proc, timeout=60)["rest"]
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=600)
        for _ in range(600):
            try:
                if self.client.get("/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        return self

    def __exit__(self, *_: object) -> None:
        self.client.close()
        self.proc.terminate()
        self.proc.wait(timeout=120)


def run(quick: bool = False) -> list[dict[str, Any]]:
    return bench_embedded(quick) + bench_rest(quick)


if __name__ == "__main__":
    run(quick="--quick" in sys.argv)  # each figure is printed as it is measured
