"""Slurm beside us (issue 21): the same N trivial jobs through a single-node Slurm's `sbatch`
and through our CLI, REST and gRPC against the default server, 8 concurrent submitters each,
in one run on one machine.

Per system: submit latency p50/p99 (client-observed, until the job id is back), submits/s
(N over the wall time of the whole burst), and submit → started (the job writes its start
time; p50/p99 over the jobs). Our rows carry Slurm's as the baseline and the ratios in
`extra` (`p50_x_slurm` < 1 and `rate_x_slurm` > 1 mean faster than Slurm). Skipped, with the
reason printed, where Slurm is not installed (`make deps` installs it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import httpx
from _harness import baseline, result
from _peers import Server, Slurm, local_server, local_slurm, slurm_missing, started_times

from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2_grpc as pb_grpc

CLIENTS = 8
BIN = Path(sys.executable).with_name("gpu-platform")
CLI = [str(BIN)] if BIN.exists() else [sys.executable, "-m", "gpu_platform.main"]

# A submitter: made once per client thread, returns a function that submits one job and
# returns its id.
Submitter = Callable[[], Callable[[], str]]


def burst(make: Submitter, n: int, clients: int = CLIENTS) -> dict[str, Any]:
    """n submits from `clients` threads (each its own connection), as fast as answers come.
    Returns latencies (µs), each job's wall-clock submit time, and the burst's wall time."""
    lock = threading.Lock()
    remaining = [n]
    latencies: list[float] = []
    submitted: dict[str, float] = {}
    errors: list[str] = []

    def client() -> None:
        submit = make()
        while True:
            with lock:
                if remaining[0] <= 0:
                    return
                remaining[0] -= 1
            wall, t0 = time.time(), time.perf_counter_ns()
            try:
                job_id = submit()
            except Exception as exc:  # counted and reported, not fatal
                errors.append(f"{type(exc).__name__}: {exc}"[:200])
                continue
            took = (time.perf_counter_ns() - t0) / 1000
            with lock:
                latencies.append(took)
                submitted[job_id] = wall

    threads = [threading.Thread(target=client) for _ in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {
        "latencies": latencies,
        "submitted": submitted,
        "seconds": time.perf_counter() - t0,
        "errors": errors,
    }


def sbatch(slurm: Slurm) -> Submitter:
    def make() -> Callable[[], str]:
        def submit() -> str:
            out = subprocess.run(
                slurm.sbatch_args(), env=slurm.env, capture_output=True, text=True, check=True
            )
            return out.stdout.strip().split(";")[0]

        return submit

    return make


def cli(server: Server) -> Submitter:
    def make() -> Callable[[], str]:
        def submit() -> str:
            out = subprocess.run(
                [*CLI, "submit", "-q", "--", *server.command()],
                env=server.env,
                capture_output=True,
                text=True,
                check=True,
            )
            return out.stdout.strip()

        return submit

    return make


def rest(server: Server) -> Submitter:
    def make() -> Callable[[], str]:
        client = httpx.Client(base_url=server.url, timeout=60)
        body = {"command": server.command(), "gpus": 0}

        def submit() -> str:
            response = client.post("/v1/jobs", json=body)
            response.raise_for_status()
            return str(response.json()["id"])

        return submit

    return make


def grpc_api(server: Server) -> Submitter:
    def make() -> Callable[[], str]:
        stub = pb_grpc.JobServiceStub(grpc.insecure_channel(server.grpc_target))
        request = pb.SubmitJobRequest(command=server.command(), gpus=0)

        def submit() -> str:
            return str(stub.SubmitJob(request, timeout=60).id)

        return submit

    return make


def measure(make: Submitter, started_dir: Path, n: int) -> dict[str, Any]:
    """One burst, then wait for its jobs to start; the figures of one system."""
    done = burst(make, n)
    ids = list(done["submitted"])
    starts = started_times(started_dir, ids, timeout=max(60.0, n * 0.5))
    to_started = [(starts[i] - done["submitted"][i]) * 1e6 for i in ids if i in starts]
    first = min(done["submitted"].values(), default=0.0)
    return done | {
        "to_started": to_started,
        "not_started": len(ids) - len(starts),
        # submit of the first job → start of the last: jobs/s through the whole system
        "jobs_per_s": round(len(starts) / (max(starts.values()) - first), 1) if starts else None,
    }


def rows_of(system: str, api: str, n: int, m: dict[str, Any], peer: Any) -> list[dict[str, Any]]:
    params = {"system": system, "api": api, "clients": CLIENTS, "jobs": n}
    load = [round(x, 2) for x in os.getloadavg()]
    extra: dict[str, Any] = {"errors": len(m["errors"]), "load_average": load}
    if m["errors"]:
        extra["first_error"] = m["errors"][0]
    submit = result("peer.submit", params, m["latencies"], extra=dict(extra))
    submit["ops_per_s"] = round(len(m["latencies"]) / m["seconds"], 1)
    started = result(
        "peer.submit_to_started",
        params,
        m["to_started"],
        extra={"not_started": m["not_started"], "jobs_per_s": m["jobs_per_s"], **extra},
    )
    started["ops_per_s"] = m["jobs_per_s"]
    if not m["to_started"]:  # none started in time: no figure to make up
        submit["extra"]["not_started"] = m["not_started"]
        return [submit]
    if peer is not None and len(peer) == 2:
        for row, peer_row in ((submit, peer[0]), (started, peer[1])):
            row["baseline"] = baseline("slurm sbatch", peer_row)
            row["extra"]["p50_x_slurm"] = _ratio(row["p50_us"], peer_row["p50_us"])
            row["extra"]["p99_x_slurm"] = _ratio(row["p99_us"], peer_row["p99_us"])
            row["extra"]["rate_x_slurm"] = _ratio(row["ops_per_s"], peer_row["ops_per_s"])
    return [submit, started]


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def run(quick: bool = False) -> list[dict[str, Any]]:
    n = 200 if quick else 1000
    n_cli = 40 if quick else 200  # a process per call: 1,000 of them take minutes here
    if os.environ.get("GPU_PLATFORM_BENCH_SMOKE"):
        n, n_cli = 8, 4
    reason = slurm_missing()
    rows: list[dict[str, Any]] = []
    peer = None
    if reason:
        print(f"   slurm skipped: {reason}", flush=True)
    else:
        with local_slurm() as slurm:
            m = measure(sbatch(slurm), slurm.started_dir, n)
        peer = rows_of("slurm", "sbatch", n, m, None)
        rows += peer
        _print(peer)
    with local_server() as server:
        for api, make, count in (
            ("rest", rest(server), n),
            ("grpc", grpc_api(server), n),
            ("cli", cli(server), n_cli),
        ):
            m = measure(make, server.started_dir, count)
            mine = rows_of("gpu-platform", api, count, m, peer)
            rows += mine
            _print(mine)
    return rows


def _print(rows: list[dict[str, Any]]) -> None:
    for r in rows:
        p = r["params"]
        print(
            f"   {r['name']:<24} {p['system']:<13} {p['api']:<7} p50 {r['p50_us'] / 1000:8.2f} ms"
            f"  p99 {r['p99_us'] / 1000:8.2f} ms  {r['ops_per_s']}/s  {r['extra']}",
            flush=True,
        )
