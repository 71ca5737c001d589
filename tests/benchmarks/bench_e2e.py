"""End-to-end submit latency against a live `gpu-platform serve` process on loopback:
POST /v1/jobs over HTTP (httpx, keep-alive) and SubmitJob over gRPC, the same job spec, the
same server, in one run. The jobs ask for no GPU and run `true`, so the queue never blocks;
each figure is the client-observed time from request to the acknowledged (durable) answer.

Per server: 1 client (sequential calls), then, on the default server, 8 and 64 concurrent
clients (each its own connection) — p50/p99 and submits/s over the burst. `extra` has the
server process's CPU per job (`server_cpu_ms_per_job`: user + system from the burst's first
call until every job has ended, so the jobs' bind, launch and finish count too) and the
load average when the row began (`load_average`): the machine is shared, compare rows of one
run only.

`e2e.held_submit` (the default server, gRPC and REST, 1 and 64 clients): the submit path
alone — each job depends on one that never ends, so nothing is launched — with the server's CPU
per held submit over the burst (`server_cpu_ms_per_submit`) and this benchmark's own, the
clients' (`client_cpu_ms_per_submit`: httpx costs several times grpc's per call, so REST at 64
clients is bounded by its clients on a small machine). Then the same gRPC rows against a server
with `api_workers = 2` (`params.api_workers`), beside the default's in the same run: the
server process's CPU per submit, and its workers' (`workers_cpu_ms_per_submit`). Then the
default server's held rows again with `cpu_affinity = off` (`params.cpu_affinity`: the
server's threads wherever the kernel puts them; the default, `auto`, keeps them on one CPU).
"""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import httpx
from _harness import baseline, result
from bench_slurm_peer import burst

from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2_grpc as pb_grpc
from gpu_platform.testing.api_workers import worker_pids
from gpu_platform.testing.ports import wait_for_ports

ENTRY = [sys.executable, "-m", "gpu_platform.main"]
JOB = ["true"]


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _until_settled(server: _Server, timeout_s: float = 300.0) -> float:
    """Wait until no job is queued, scheduled or running; the server's CPU seconds then."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client(base_url=server.url, timeout=60) as client:
        while time.monotonic() < deadline:
            states = client.get("/v1/status").json()["jobs_by_state"]
            if not any(states.get(s) for s in ("QUEUED", "SCHEDULED", "RUNNING")):
                break
            time.sleep(0.2)
    return _cpu_s(server.proc.pid)


class _Server:
    def __init__(self, proc: subprocess.Popen[bytes], http_port: int, grpc_port: int) -> None:
        self.proc = proc
        self.url = f"http://127.0.0.1:{http_port}"
        self.grpc_target = f"127.0.0.1:{grpc_port}"
        self.opened: list[httpx.Client | grpc.Channel] = []
        self.cpu_affinity = "auto"
        # one TLS context for every client (unused: the URL is http): httpx builds one per
        # client otherwise, ~30 ms of this process's CPU each, inside the burst's clock
        self.tls = ssl.create_default_context()

    def close_clients(self) -> None:
        """Close the clients' connections: a row's idle gRPC channels would go on using this
        process's CPU (and GIL) during the next rows."""
        while self.opened:
            self.opened.pop().close()

    def rest(self, depends_on: str = "") -> Callable[[], str]:
        client = httpx.Client(base_url=self.url, timeout=60, verify=self.tls)
        self.opened.append(client)
        body = {"command": JOB, "gpus": 0, "depends_on": [depends_on] if depends_on else []}

        def submit() -> str:
            response = client.post("/v1/jobs", json=body)
            response.raise_for_status()
            return str(response.json()["id"])

        return submit

    def grpc(self, depends_on: str = "") -> Callable[[], str]:
        channel = grpc.insecure_channel(self.grpc_target)
        self.opened.append(channel)
        stub = pb_grpc.JobServiceStub(channel)
        request = pb.SubmitJobRequest(
            command=JOB, gpus=0, depends_on=[depends_on] if depends_on else []
        )
        return lambda: str(stub.SubmitJob(request, timeout=60).id)


@contextmanager
def _serve(server_id: str, api_workers: int = 0, cpu_affinity: str = "auto") -> Iterator[_Server]:
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(
            os.environ,
            GPU_PLATFORM_LOG_LEVEL="warning",
            GPU_PLATFORM_LOG_FORMAT="json",
            GPU_PLATFORM_GRPC_PORT="0",  # any free port, as is --port 0: see ports.json
            GPU_PLATFORM_SERVER_ID=server_id,
            GPU_PLATFORM_RAFT_PORT="0",
            GPU_PLATFORM_AGENT_PORT="0",
            GPU_PLATFORM_ISOLATION="none",
            GPU_PLATFORM_API_WORKERS=str(api_workers),
            GPU_PLATFORM_CPU_AFFINITY=cpu_affinity,
        )
        proc = subprocess.Popen(
            [*ENTRY, "serve", "--port", "0", "--data-dir", str(Path(tmp) / "data")],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            ports = wait_for_ports(Path(tmp) / "data", proc, timeout=60)
            server = _Server(proc, ports["rest"], ports["grpc"])
            server.cpu_affinity = cpu_affinity
            with httpx.Client(base_url=server.url, timeout=30) as client:
                for _ in range(600):
                    try:
                        if client.get("/healthz").status_code == 200:
                            break
                    except httpx.HTTPError:
                        time.sleep(0.05)
            for make in (server.rest, server.grpc):  # warm-up
                submit = make()
                for _ in range(20):
                    submit()
            server.close_clients()
            _until_settled(server)
            yield server
        finally:
            proc.terminate()
            proc.wait(timeout=60)


def _row(server: _Server, api: str, store: str, n: int, clients: int) -> dict[str, Any]:
    make = server.rest if api == "rest" else server.grpc
    load = os.getloadavg()[0]
    cpu0 = _cpu_s(server.proc.pid)
    out = burst(make, n, clients)
    server.close_clients()
    cpu1 = _until_settled(server)
    done = len(out["latencies"])
    row = result(
        "e2e.submit",
        {"api": api, "submits": n, "store": store, "clients": clients},
        out["latencies"],
        extra={
            "server_cpu_ms_per_job": round((cpu1 - cpu0) / max(1, done) * 1000, 2),
            "errors": len(out["errors"]),
            "load_average": round(load, 2),
        },
    )
    row["ops_per_s"] = round(done / out["seconds"], 1)  # the burst's rate (with clients > 1)
    return row


def _held_rows(
    server: _Server, n: int, many: tuple[int, ...], apis: tuple[str, ...] = ("grpc", "rest")
) -> list[dict[str, Any]]:
    """Held submits (gRPC, then REST): every job waits on `sleep 3600`, killed afterwards."""
    with httpx.Client(base_url=server.url, timeout=60) as client:
        body = {"command": ["sleep", "3600"], "gpus": 0}
        anchor = str(client.post("/v1/jobs", json=body).json()["id"])
        rows = []
        try:
            for api in apis:
                make = server.grpc if api == "grpc" else server.rest
                burst(lambda make=make: make(anchor), 50, 8)  # warm-up
                server.close_clients()
                for clients in (many[0], many[-1]):
                    rows.append(_held_row(server, api, make, anchor, n, clients))
        finally:
            client.post(f"/v1/jobs/{anchor}/kill")  # its dependents end too
    return rows


def _held_row(
    server: _Server,
    api: str,
    make: Callable[[str], Callable[[], str]],
    anchor: str,
    n: int,
    clients: int,
) -> dict[str, Any]:
    load = os.getloadavg()[0]
    workers = worker_pids(server.proc.pid)
    cpu0, mine0 = _cpu_s(server.proc.pid), time.process_time()
    aside0 = sum(_cpu_s(w) for w in workers)
    out = burst(lambda: make(anchor), n, clients)
    mine = time.process_time() - mine0
    server.close_clients()
    done = len(out["latencies"])
    aside = sum(_cpu_s(w) for w in workers) - aside0
    params = {"api": api, "submits": n, "store": "raft", "clients": clients}
    if workers:  # rows without the key are the default server's (api_workers = 0)
        params["api_workers"] = len(workers)
    if server.cpu_affinity != "auto":  # ... and without this one, cpu_affinity = auto
        params["cpu_affinity"] = server.cpu_affinity
    row = result(
        "e2e.held_submit",
        params,
        out["latencies"],
        extra={
            "server_cpu_ms_per_submit": round(
                (_cpu_s(server.proc.pid) - cpu0) / max(1, done) * 1000, 2
            ),
            "workers_cpu_ms_per_submit": round(aside / max(1, done) * 1000, 2),
            "client_cpu_ms_per_submit": round(mine / max(1, done) * 1000, 2),
            "errors": len(out["errors"]),
            "load_average": round(load, 2),
        },
    )
    row["ops_per_s"] = round(done / out["seconds"], 1)
    p, e = row["params"], row["extra"]
    print(
        f"e2e.held_submit {api:4} workers={p.get('api_workers', 0)} "
        f"affinity={p.get('cpu_affinity', 'auto')} clients={p['clients']:2} "
        f"p50={row['p50_us'] / 1000:.2f} ms p99={row['p99_us'] / 1000:.2f} ms "
        f"{row['ops_per_s']}/s cpu/submit={e['server_cpu_ms_per_submit']} ms "
        f"workers cpu/submit={e['workers_cpu_ms_per_submit']} ms "
        f"client cpu/submit={e['client_cpu_ms_per_submit']} ms load={e['load_average']}",
        file=sys.stderr,
        flush=True,
    )
    return row


def run(quick: bool = False) -> list[dict[str, Any]]:
    """The default server (a one-voter Raft cluster whose jobs run on its in-process agent)
    and, for comparison, the embedded core (server_id = 0: SQLite, jobs in the server)."""
    n = 200 if quick else 1000
    many = (1, 8, 64)
    if os.environ.get("GPU_PLATFORM_BENCH_SMOKE"):  # the test suite's run: the schema only
        n, many = 10, (1, 2)
    rows: list[dict[str, Any]] = []
    for server_id, store in (("1", "raft"), ("0", "sqlite")):
        with _serve(server_id) as server:
            for clients in many if store == "raft" else (1,):
                rest_row = _row(server, "rest", store, n, clients)
                grpc_row = _row(server, "grpc", store, n, clients)
                grpc_row["baseline"] = baseline("rest", rest_row)
                rows += [rest_row, grpc_row]
                _print(rest_row)
                _print(grpc_row)
            if store == "raft":
                rows += _held_rows(server, 3 * n // 2, many)
    with _serve("1", api_workers=2) as server:  # the same held gRPC rows, behind two workers
        rows += _held_rows(server, 3 * n // 2, many, apis=("grpc",))
    with _serve("1", cpu_affinity="off") as server:  # the same rows, threads on any core
        rows += _held_rows(server, 3 * n // 2, many)
    return rows


def _print(row: dict[str, Any]) -> None:
    p, e = row["params"], row["extra"]
    print(
        f"e2e.submit {p['store']:6} {p['api']:4} clients={p['clients']:2} "
        f"p50={row['p50_us'] / 1000:.2f} ms p99={row['p99_us'] / 1000:.2f} ms "
        f"{row['ops_per_s']}/s cpu/job={e['server_cpu_ms_per_job']} ms load={e['load_average']}",
        file=sys.stderr,
        flush=True,
    )
