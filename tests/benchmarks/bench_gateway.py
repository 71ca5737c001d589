"""What the OpenAI-compatible gateway adds to a call: the same client and load sent straight to a
model-server replica (the baseline) and through the gateway of a real `gpu-platform serve`
(auth off, one replica behind it), in the same run, phases interleaved.

    gateway.chat   non-streamed POST /v1/chat/completions (16 tokens), at 1, 16 and 64
                   concurrent clients: p50/p99 latency and requests/s, each beside the direct
                   call; extra: added_p50_us, added_p99_us, throughput_ratio
    gateway.ttft   streamed chat (stream: true, 16 events): time to the first event, same setup

Each of them twice: with a replica that answers at once (`token_delay_ms` 0, no such param in
the row: the CPU-bound worst case, where the gateway's CPU is taken from the replica and the
client on the same cores), and with one that takes TOKEN_DELAY_MS per token, as a small model
decoding on one GPU does (the delay is a sleep: GPU time, no host CPU), so the rows show what a
caller of a real engine would see.
    gateway.upstream_client   the client side alone: one request after another to the
                   replica from httpx.AsyncClient (what the gateway used before), httpcore,
                   bare asyncio streams (the floor) and the gateway's UpstreamPool (what it
                   uses now); extra: cpu_us_per_request

The server serves its gateway on a port of its own (`gateway_port`). Extra of each gateway row:
gateway_cpu_us_per_request (the server process's CPU over the gateway phases, per request) and
gateway_net_cpu_us_per_request (the same less what the idle server spends in that time: where
answers take long, the control plane's background work would otherwise dominate).

The client is one httpx.AsyncClient in this process; client, gateway and replica share the
machine's cores, so at 64 clients the figures include that contention on both sides.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import baseline, percentile, result

from gpu_platform.ports.inbound.model_routes import ReplicaAddress
from gpu_platform.testing.model_routes import StaticModelRoutes
from gpu_platform.testing.model_server import spawn_model_server
from gpu_platform.testing.ports import wait_for_ports

_BIN = Path(sys.executable).with_name("gpu-platform")
ENTRY = [str(_BIN)] if _BIN.exists() else [sys.executable, "-m", "gpu_platform.main"]
BODY = {
    "model": "bench",
    "messages": [{"role": "user", "content": "hello gateway"}],
    "max_tokens": 16,
}
STREAM_BODY = {**BODY, "stream": True}
# Per-token decode time of the realistic rows: a 7-8B model in bf16 on one H100 decodes about
# 60-100 tokens/s per sequence with a few dozen sequences batched, i.e. 10-16 ms per token.
# 16 tokens at 15 ms keep a whole answer at 0.24 s, so the rows stay short.
TOKEN_DELAY_MS = 15.0
IDLE_CPU = {"server": 0.0}  # CPU seconds per second of the idle server, measured at its start


def _start_server(tmp: Path, routes_file: Path) -> tuple[subprocess.Popen[bytes], str]:
    env = dict(
        os.environ,
        GPU_PLATFORM_GATEWAY_PORT="0",
        GPU_PLATFORM_AUTH="off",
        GPU_PLATFORM_GRPC_PORT="-1",
        GPU_PLATFORM_RAFT_PORT="0",
        GPU_PLATFORM_AGENT_PORT="0",
        GPU_PLATFORM_LOG_LEVEL="warning",
        GPU_PLATFORM_GATEWAY_ROUTES_FILE=str(routes_file),
    )
    argv = [*ENTRY, "serve", "--port", "0", "--data-dir", str(tmp / "data")]
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=(tmp / "server.log").open("wb")
    )
    ports = wait_for_ports(tmp / "data", proc, timeout=90)
    url, gateway_url = (f"http://127.0.0.1:{ports[k]}" for k in ("rest", "gateway"))
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc, gateway_url  # the gateway's port is up before the REST port
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"server did not start: {(tmp / 'server.log').read_text()[-2000:]}")


async def _load(
    url: str, clients: int, total: int, stream: bool, model: str = "bench"
) -> tuple[list[float], float, list[str]]:
    """`total` requests from `clients` concurrent workers: (latencies in µs, requests/s, the
    failures). For streams the latency is the time to the first event."""
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    body = {**(STREAM_BODY if stream else BODY), "model": model}
    samples: list[float] = []
    failures: list[str] = []
    left = total
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:

        async def one() -> None:
            t0 = time.perf_counter_ns()
            if stream:
                async with client.stream("POST", "/v1/chat/completions", json=body) as r:
                    first = True
                    async for _ in r.aiter_raw():
                        if first:
                            samples.append((time.perf_counter_ns() - t0) / 1000)
                            first = False
            else:
                r = await client.post("/v1/chat/completions", json=body)
                samples.append((time.perf_counter_ns() - t0) / 1000)
            if r.status_code != 200:
                failures.append(f"HTTP {r.status_code}")

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                try:
                    await one()
                except httpx.HTTPError as exc:
                    failures.append(repr(exc))

        left = min(total, 4 * clients)
        await asyncio.gather(*(worker() for _ in range(clients)))  # connections open, warm
        samples.clear()
        failures.clear()
        left = total
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        elapsed = time.perf_counter() - started
    return samples, total / elapsed, failures


async def _read_answer(reader: asyncio.StreamReader) -> tuple[int, int]:
    """One HTTP/1.1 answer off a kept-alive connection: (status, ns when its first body byte
    arrived). Content-Length or chunked bodies, which is what the replica and gateway send."""
    head = await reader.readuntil(b"\r\n\r\n")
    first = 0
    status = int(head.split(b" ", 2)[1])
    lower = head.lower()
    if b"content-length:" in lower:
        length = int(lower.split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
        await reader.readexactly(length)
        return status, time.perf_counter_ns()
    while True:  # chunked
        size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
        await reader.readexactly(size + 2)
        first = first or time.perf_counter_ns()
        if size == 0:
            return status, first


async def _load_lean(
    url: str, clients: int, total: int, stream: bool, model: str = "bench"
) -> tuple[list[float], float, list[str]]:
    """As `_load`, from a client that costs little CPU: one kept-alive connection per worker
    on bare asyncio streams (what the gateway's own upstream pool does), so that on a small
    machine the load generator takes fewer of the cores the replica and the gateway need."""
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    body = json.dumps({**(STREAM_BODY if stream else BODY), "model": model}).encode()
    request = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: {host}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode() + body
    samples: list[float] = []
    failures: list[str] = []
    left = 0

    async def worker() -> None:
        nonlocal left
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            while left > 0:
                left -= 1
                t0 = time.perf_counter_ns()
                writer.write(request)
                status, first = await _read_answer(reader)
                samples.append((first - t0) / 1000)
                if status != 200:
                    failures.append(f"HTTP {status}")
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            failures.append(repr(exc))
        finally:
            writer.close()

    left = min(total, 4 * clients)
    await asyncio.gather(*(worker() for _ in range(clients)))  # warm
    samples.clear()
    failures.clear()
    left = total
    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    return samples, total / (time.perf_counter() - started), failures


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pair(
    name: str,
    direct_url: str,
    gateway_url: str,
    pids: tuple[int, int],
    clients: int,
    total: int,
    stream: bool,
    token_delay_ms: float = 0.0,
    lean: bool = False,
) -> dict[str, Any]:
    replica_pid, server_pid = pids
    model = "bench-decode" if token_delay_ms else "bench"
    params: dict[str, Any] = {"clients": clients}
    if token_delay_ms:
        params["token_delay_ms"] = token_delay_ms
    if lean:
        params["client"] = "asyncio-streams"
    load = _load_lean if lean else _load
    direct: list[float] = []
    through: list[float] = []
    direct_rate = gateway_rate = 0.0
    replica_cpu = server_cpu = gateway_s = 0.0
    direct_failures: list[str] = []
    gateway_failures: list[str] = []
    for _ in range(2):  # interleaved halves, so drift in the machine's load hits both
        before = _cpu_s(replica_pid)
        d, dr, df = asyncio.run(load(direct_url, clients, total // 2, stream, model))
        replica_cpu += _cpu_s(replica_pid) - before
        before = _cpu_s(server_pid)
        g, gr, gf = asyncio.run(load(gateway_url, clients, total // 2, stream, model))
        server_cpu += _cpu_s(server_pid) - before
        gateway_s += (total // 2) / gr
        direct += d
        through += g
        direct_failures += df
        gateway_failures += gf
        direct_rate += dr / 2
        gateway_rate += gr / 2
    base = result(name, {**params, "path": "direct"}, direct)
    base["ops_per_s"] = direct_rate
    row = result(
        name,
        {**params, "path": "gateway"},
        through,
        baseline=baseline("direct to the replica", {**base, "ops_per_s": direct_rate}),
        extra={
            "added_p50_us": round(percentile(through, 50) - percentile(direct, 50), 1),
            "added_p99_us": round(percentile(through, 99) - percentile(direct, 99), 1),
            "throughput_ratio": round(gateway_rate / direct_rate, 3),
            # CPU the gateway's server process spent per request (with its control plane's
            # background work), and the replica's per direct request (includes warm-up)
            "gateway_cpu_us_per_request": round(server_cpu / len(through) * 1e6),
            # the same less the server's CPU when idle (its control plane's ticks) over the
            # gateway phases' time: what the requests cost where answers take long
            "gateway_net_cpu_us_per_request": round(
                (server_cpu - IDLE_CPU["server"] * gateway_s) / len(through) * 1e6
            ),
            "replica_cpu_us_per_request": round(replica_cpu / len(direct) * 1e6),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "failed": {"direct": len(direct_failures), "gateway": len(gateway_failures)},
            "first_failures": sorted(set(direct_failures + gateway_failures))[:3],
        },
    )
    row["ops_per_s"] = gateway_rate
    return row


async def _sequential(kind: str, url: str, n: int) -> list[float]:
    """`n` non-streamed requests one after another from one client of `kind` (µs each)."""
    import httpcore

    body = json.dumps(BODY).encode()
    headers = [(b"content-type", b"application/json")]
    target = url + "/v1/chat/completions"
    samples: list[float] = []
    clock = time.perf_counter_ns
    if kind == "httpx":
        async with httpx.AsyncClient() as client:
            parsed = httpx.URL(target)
            for _ in range(n):
                t0 = clock()
                request = client.build_request("POST", parsed, content=body, headers=headers)
                response = await client.send(request, stream=True)
                async for _chunk in response.aiter_raw():
                    pass
                await response.aclose()
                samples.append((clock() - t0) / 1000)
    elif kind == "httpcore":
        async with httpcore.AsyncConnectionPool() as pool:
            for _ in range(n):
                t0 = clock()
                async with pool.stream("POST", target, headers=headers, content=body) as r:
                    async for _chunk in r.aiter_stream():
                        pass
                samples.append((clock() - t0) / 1000)
    elif kind == "gateway-pool":
        from gpu_platform.adapters.inbound.gateway.upstream import UpstreamPool

        pool = UpstreamPool()
        for _ in range(n):
            t0 = clock()
            response = await pool.post(url, "/v1/chat/completions", body)
            while await response.read():
                pass
            response.release(True)
            samples.append((clock() - t0) / 1000)
        await pool.aclose()
    else:  # bare asyncio streams: the floor for any Python client
        host, port = url.split("//", 1)[1].rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nhost: {host}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
        ).encode()
        for _ in range(n):
            t0 = clock()
            writer.write(head + body)
            await writer.drain()
            answer = await reader.readuntil(b"\r\n\r\n")
            length = int(answer.lower().split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
            await reader.readexactly(length)
            samples.append((clock() - t0) / 1000)
        writer.close()
    return samples


def _clients(url: str, n: int) -> list[dict[str, Any]]:
    rows = []
    for kind in ("httpx", "httpcore", "asyncio-streams", "gateway-pool"):
        asyncio.run(_sequential(kind, url, min(n, 50)))  # warm
        before = time.process_time()
        samples = asyncio.run(_sequential(kind, url, n))
        cpu = time.process_time() - before
        rows.append(
            result(
                "gateway.upstream_client",
                {"client": kind},
                samples,
                extra={
                    "cpu_us_per_request": round(cpu / n * 1e6),
                    "load_average": [round(x, 2) for x in os.getloadavg()],
                },
            )
        )
    return rows


def run(quick: bool = False) -> list[dict[str, Any]]:
    smoke = bool(os.environ.get("GPU_PLATFORM_BENCH_SMOKE"))
    per_client = 4 if smoke else (30 if quick else 150)
    rows: list[dict[str, Any]] = []
    replica = spawn_model_server("bench", replica_id="bench-1")
    decode = spawn_model_server(
        "bench-decode", replica_id="bench-decode-1", token_delay_ms=TOKEN_DELAY_MS
    )
    with tempfile.TemporaryDirectory() as tmp:
        routes = StaticModelRoutes()
        routes.set_model("bench", "default", [ReplicaAddress("bench-1", replica.url)])
        routes.set_model("bench-decode", "default", [ReplicaAddress("bench-decode-1", decode.url)])
        routes_file = Path(tmp) / "routes.json"
        routes.write(routes_file)
        proc, url = _start_server(Path(tmp), routes_file)
        try:
            time.sleep(0.5 if smoke else 2)  # settled after its start
            before = _cpu_s(proc.pid)
            time.sleep(0.5 if smoke else 3)
            IDLE_CPU["server"] = (_cpu_s(proc.pid) - before) / (0.5 if smoke else 3)
            fan = (1,) if smoke else (1, 16, 64)  # smoke: the test suite's run
            for name, stream in (("gateway.chat", False), ("gateway.ttft", True)):
                for clients in fan:
                    total = max(200 if not smoke else 20, per_client * clients)
                    pids = (replica.process.pid, proc.pid)
                    rows.append(_pair(name, replica.url, url, pids, clients, total, stream))
            # with decode time: fewer requests, each takes 16 x TOKEN_DELAY_MS (0.24 s); the
            # smoke run sends 2 non-streamed requests each way (about 3 s)
            per_client = 8 if quick else 30
            kinds = (("gateway.chat", False), ("gateway.ttft", True))
            for name, stream in kinds[:1] if smoke else kinds:
                for clients in fan:
                    total = 2 if smoke else max(40, per_client * clients)
                    pids = (decode.process.pid, proc.pid)
                    rows.append(
                        _pair(name, decode.url, url, pids, clients, total, stream, TOKEN_DELAY_MS)
                    )
            # 64 clients again from the lean client (the httpx client alone spends ~1.5 ms of
            # CPU per request, most of what a request costs here): zero delay, then decode
            for name, stream in kinds[:1] if smoke else kinds:
                for delay, target in ((0.0, replica), (TOKEN_DELAY_MS, decode)):
                    clients = 4 if smoke else 64
                    total = 8 if smoke else (per_client if delay else 30) * clients
                    pids = (target.process.pid, proc.pid)
                    rows.append(
                        _pair(name, target.url, url, pids, clients, total, stream, delay, True)
                    )
            rows += _clients(replica.url, 20 if smoke else (300 if quick else 1500))
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            replica.stop()
            decode.stop()
    return rows


if __name__ == "__main__":
    for row in run(quick="--quick" in sys.argv):
        print(row)
