"""What one CLI call costs (issue 19 item 10: ≤ 0.25 s): `gpu-platform --help`,
`gpu-platform jobs list` and `gpu-platform submit -q -- true` against a running default server
(with a few jobs in it), each timed as a whole process (start to exit), sequentially, beside the floor every Python CLI pays
(`python -c pass`) and, where Slurm is installed, `squeue` against a local Slurm.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from _harness import baseline, percentile, result
from _peers import local_server, local_slurm, slurm_missing

BIN = Path(sys.executable).with_name("gpu-platform")
CLI = [str(BIN)] if BIN.exists() else [sys.executable, "-m", "gpu_platform.main"]


CPU_US: dict[str, list[float]] = {}  # per command: CPU (user + sys) of each call, in µs


def timed(argv: list[str], env: dict[str, str], n: int) -> list[float]:
    """Microseconds per whole process, n runs after one warm-up (page cache). The CPU each
    call used goes to CPU_US (it moves less than wall time on a loaded machine)."""
    subprocess.run(argv, env=env, capture_output=True, check=True)
    out, cpu = [], []
    for _ in range(n):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter_ns()
        subprocess.run(argv, env=env, capture_output=True, check=True)
        out.append((time.perf_counter_ns() - t0) / 1000)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append((after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1e6)
    CPU_US[" ".join(argv)] = cpu
    return out


def run(quick: bool = False) -> list[dict[str, Any]]:
    n = 10 if quick else 30
    smoke = bool(os.environ.get("GPU_PLATFORM_BENCH_SMOKE"))  # the test suite's run: schema only
    if smoke:
        n = 2
    load = {"load_average": [round(x, 2) for x in os.getloadavg()]}
    floor = result(
        "cli.call",
        {"command": "python -c pass", "calls": n},
        timed([sys.executable, "-c", "pass"], dict(os.environ), n),
        extra=load,
    )
    rows = [floor]
    squeue = None
    if not smoke and not slurm_missing():
        with local_slurm() as slurm:
            squeue = result(
                "cli.call", {"command": "squeue", "calls": n}, timed(["squeue"], slurm.env, n)
            )
        rows.append(squeue)
    with local_server() as server:
        for _ in range(5):
            httpx.post(f"{server.url}/v1/jobs", json={"command": ["true"], "gpus": 0}, timeout=30)
        for args in (["--help"], ["jobs", "list"], ["submit", "-q", "--", "true"]):
            row = result(
                "cli.call",
                {"command": "gpu-platform " + " ".join(args), "calls": n},
                timed([*CLI, *args], server.env, n),
                baseline=baseline("squeue", squeue) if squeue else None,
                extra={
                    "python_floor_p50_us": floor["p50_us"],
                    "target_us": 250_000,
                    "load_average": [round(x, 2) for x in os.getloadavg()],
                },
            )
            rows.append(row)
    for r, argv in zip(rows, CPU_US.values(), strict=True):
        r["ops_per_s"] = round(1e6 / r["p50_us"], 1) if r["p50_us"] else None
        r.setdefault("extra", {})["cpu_p50_us"] = round(percentile(argv, 50))
        print(
            f"   {r['params']['command']:<32} p50 {r['p50_us'] / 1000:7.1f} ms  "
            f"p99 {r['p99_us'] / 1000:7.1f} ms  cpu p50 {r['extra']['cpu_p50_us'] / 1000:6.1f} ms",
            flush=True,
        )
    return rows
