"""Submit latency against offered load (issue 21): open-loop arrivals at fixed rates
(10 → 3,000 submits/s), one curve per system — our default server over REST and over gRPC,
and a single-node Slurm's `sbatch` — in one run on one machine.

Open loop: submit i is due at t0 + i/rate whatever happened to the earlier ones, and its
latency runs from when it was due (so a client that falls behind shows up as latency, not as
a slower offer). A point lasts a few seconds; a system is *saturated* at a rate when it
completes < 90 % of the offer in time, its p99 passes 1 s, or more than `IN_FLIGHT` submits
are outstanding — its curve stops there. Every job waits on a job that never ends (Slurm: a
held job; ours: `sleep`), so the figures are the submit path alone, not the machine running
thousands of jobs. The client (asyncio, one process) shares the machine with the systems.

Writes `offered_load.png` beside results.json (GPU_PLATFORM_BENCH_DIR, set by run_all.py).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import httpx
from _harness import result
from _peers import Server, Slurm, local_server, local_slurm, slurm_missing
from _plots import loglog_figure

from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2_grpc as pb_grpc

# Log-spaced; a curve stops at its first saturated point, so the fine steps cost little.
RATES = (10, 20, 30, 50, 70, 100, 150, 200, 300, 500, 1000, 2000, 3000)
IN_FLIGHT = 512
DRAIN_S = 10.0  # how long after the last due time answers still count

Send = Callable[[], Awaitable[None]]


async def point(send: Send, rate: float, seconds: float) -> dict[str, Any]:
    """One open-loop point: `rate * seconds` submits, each due at its slot."""
    loop = asyncio.get_running_loop()
    n = max(5, round(rate * seconds))
    latencies: list[float] = []
    state = {"in_flight": 0, "errors": 0, "refused": 0, "last": 0.0}
    first_error: list[str] = []

    async def one(due: float) -> None:
        state["in_flight"] += 1
        try:
            await send()
        except Exception as exc:  # counted: the curve shows it
            state["errors"] += 1
            if not first_error:
                first_error.append(f"{type(exc).__name__}: {exc}"[:200])
        else:
            now = loop.time()
            latencies.append((now - due) * 1e6)
            state["last"] = now
        finally:
            state["in_flight"] -= 1

    tasks = []
    t0 = loop.time() + 0.05
    for i in range(n):
        due = t0 + i / rate
        delay = due - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        if state["in_flight"] >= IN_FLIGHT:
            state["refused"] += 1  # the system is this far behind: saturated
            continue
        tasks.append(asyncio.create_task(one(due)))
    end = t0 + n / rate
    _, pending = await asyncio.wait(tasks, timeout=max(0.1, end + DRAIN_S - loop.time()))
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    span = max(state["last"], end) - t0
    return {
        "offered": n,
        "latencies": latencies,
        "achieved_per_s": round(len(latencies) / span, 1) if span > 0 else 0.0,
        "errors": int(state["errors"]),
        "refused": int(state["refused"]),
        "timed_out": len(pending),
        "first_error": first_error[0] if first_error else None,
    }


def saturated(rate: float, p: dict[str, Any], row: dict[str, Any]) -> bool:
    lost = p["errors"] + p["refused"] + p["timed_out"]
    return (
        len(p["latencies"]) < 0.9 * p["offered"]
        or lost > 0.01 * p["offered"]
        or p["achieved_per_s"] < 0.9 * rate
        or row["p99_us"] > 1e6
    )


async def curve(
    system: str,
    make: Callable[[], Awaitable[tuple[Send, Any]]],
    rates: tuple[int, ...],
    seconds: float,
) -> list[dict[str, Any]]:
    send, close = await make()
    rows: list[dict[str, Any]] = []
    try:
        for rate in rates:
            p = await point(send, rate, seconds)
            extra = {k: v for k, v in p.items() if k not in ("latencies",) and v is not None}
            extra["load_average"] = [round(x, 2) for x in os.getloadavg()]
            row = result(
                "load.submit_latency",
                {"system": system, "offered_per_s": rate, "seconds": seconds},
                p["latencies"] or [DRAIN_S * 1e6],  # none answered: at least the drain time
                extra=extra,
            )
            row["ops_per_s"] = p["achieved_per_s"]
            row["extra"]["saturated"] = saturated(rate, p, row)
            rows.append(row)
            print(
                f"   {system:<18} offered {rate:>5}/s  achieved {p['achieved_per_s']:>7}/s  "
                f"p50 {row['p50_us'] / 1000:8.2f} ms  p99 {row['p99_us'] / 1000:8.2f} ms"
                f"{'  SATURATED' if row['extra']['saturated'] else ''}",
                flush=True,
            )
            if row["extra"]["saturated"]:
                break
    finally:
        await close()
    return rows


def rest_sender(server: Server, anchor: str) -> Callable[[], Awaitable[tuple[Send, Any]]]:
    async def make() -> tuple[Send, Any]:
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        client = httpx.AsyncClient(base_url=server.url, timeout=30, limits=limits)
        body = {"command": ["true"], "gpus": 0, "depends_on": [anchor]}

        async def send() -> None:
            (await client.post("/v1/jobs", json=body)).raise_for_status()

        return send, client.aclose

    return make


def grpc_sender(server: Server, anchor: str) -> Callable[[], Awaitable[tuple[Send, Any]]]:
    async def make() -> tuple[Send, Any]:
        channel = grpc.aio.insecure_channel(server.grpc_target)
        stub = pb_grpc.JobServiceStub(channel)
        request = pb.SubmitJobRequest(command=["true"], gpus=0, depends_on=[anchor])

        async def send() -> None:
            await stub.SubmitJob(request, timeout=30)

        async def close() -> None:
            await channel.close()

        return send, close

    return make


def sbatch_sender(slurm: Slurm, anchor: str) -> Callable[[], Awaitable[tuple[Send, Any]]]:
    async def make() -> tuple[Send, Any]:
        args = [*slurm.sbatch_args()[:-1], f"--dependency=afterok:{anchor}", str(slurm.script)]

        async def send() -> None:
            proc = await asyncio.create_subprocess_exec(
                *args, env=slurm.env, stdout=asyncio.subprocess.DEVNULL
            )
            if await proc.wait() != 0:
                raise RuntimeError(f"sbatch exited {proc.returncode}")

        async def close() -> None:
            return None

        return send, close

    return make


def run(quick: bool = False) -> list[dict[str, Any]]:
    rates, seconds = RATES, (2.0 if quick else 4.0)
    if os.environ.get("GPU_PLATFORM_BENCH_SMOKE"):
        rates, seconds = (10, 30), 0.5
    rows: list[dict[str, Any]] = []
    with local_server() as server:
        anchor = httpx.post(
            f"{server.url}/v1/jobs", json={"command": ["sleep", "3600"], "gpus": 0}, timeout=30
        ).json()["id"]
        rows += asyncio.run(curve("gpu-platform rest", rest_sender(server, anchor), rates, seconds))
        rows += asyncio.run(curve("gpu-platform grpc", grpc_sender(server, anchor), rates, seconds))
        httpx.post(f"{server.url}/v1/jobs/{anchor}/kill", timeout=30)  # its dependents end too
    reason = slurm_missing()
    if reason:
        print(f"   slurm skipped: {reason}", flush=True)
    else:
        with local_slurm() as slurm:
            held = (
                subprocess.run(
                    [*slurm.sbatch_args()[:-1], "--hold", str(slurm.script)],
                    env=slurm.env,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                .stdout.strip()
                .split(";")[0]
            )
            rows += asyncio.run(curve("slurm sbatch", sbatch_sender(slurm, held), rates, seconds))
    plot(rows, Path(os.environ.get("GPU_PLATFORM_BENCH_DIR", "bench")) / "offered_load.png")
    return rows


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """p50 and p99 against the offered rate, log-log, one colour per system."""
    with loglog_figure(
        path,
        xlabel="offered load (submits/s, open loop)",
        ylabel="submit latency (ms, from the due time)",
        title="Submit latency against offered load (shaded: first saturated rate)",
    ) as ax:
        systems = dict.fromkeys(r["params"]["system"] for r in rows)
        for color, system in zip(("tab:blue", "tab:green", "tab:red"), systems, strict=False):
            mine = [r for r in rows if r["params"]["system"] == system]
            x = [r["params"]["offered_per_s"] for r in mine]
            ax.plot(x, [r["p50_us"] / 1000 for r in mine], "o-", color=color, label=f"{system} p50")
            ax.plot(
                x, [r["p99_us"] / 1000 for r in mine], "s--", color=color, label=f"{system} p99"
            )
            sat = [r for r in mine if r["extra"]["saturated"]]
            if sat:
                ax.axvline(sat[0]["params"]["offered_per_s"], color=color, alpha=0.25, lw=6)
