"""What a job's launch costs the node: `true` jobs through `ProcessJobRunner`, launched back to
back, with the runner's launch server (a zygote: each task forked from one Python process with
the exec shim imported) beside the path it replaced (`testing.shim_launch.ShimJobRunner`: a new
`python -I -S _shim.py` per task), in one run, blocks alternated A B B A.

Set up as `serve` does as root: job cgroups (isolation auto, under a prefix of this run, swept
afterwards), tasks as `nobody` in their own PID namespace; not root: no cgroups, the runner's
own account, the host's namespace. Per block: `cpu_ms_per_job` = CPU of this process (the
runner, all threads) and of its children and theirs (the shims; the launch server and its
tasks), user + system, from the first launch until every job was reported and reaped, over
the jobs; `launches_per_s` = jobs over the time from the first `start` to the last one's
return; p50/p99 = each job's `start` call to its exit report. `load_average` when the block
began: the machine is shared, compare rows of one run only.
"""

from __future__ import annotations

import os
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _harness import baseline, result

from gpu_platform.adapters.outbound.cgroups.detect import detect_isolation
from gpu_platform.adapters.outbound.cgroups.noop import NoopIsolation
from gpu_platform.adapters.outbound.process import ProcessJobRunner
from gpu_platform.ports.outbound.isolation import Isolation
from gpu_platform.ports.outbound.job_runner import ExitReport, LaunchSpec
from gpu_platform.testing.shim_launch import ShimJobRunner

TICK = os.sysconf("SC_CLK_TCK")


def _tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` and of its children it has reaped."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / TICK


def _own_cpu_s(runner: ProcessJobRunner) -> float:
    """This process and its reaped children, plus the launch server (alive: not reaped yet)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    server = runner.launch_server.pid
    extra = _tree_cpu_s(server) if server is not None else 0.0
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime + extra


def _isolation(tag: str) -> Isolation:
    if os.geteuid() != 0:
        return NoopIsolation()
    isolation = detect_isolation("auto")
    if hasattr(isolation, "use_prefix"):
        isolation.use_prefix(f"gpu-platform/bench-spawn-{os.getpid()}-{tag}")
    return isolation


def _block(kind: str, n: int) -> dict[str, Any]:
    """`n` `true` jobs (after 3 warm-up jobs) through a new runner of `kind`."""
    root = os.geteuid() == 0
    cls = ShimJobRunner if kind == "shim" else ProcessJobRunner
    isolation = _isolation(kind)
    with tempfile.TemporaryDirectory() as tmp:
        runner = cls(
            Path(tmp) / "jobs",
            base_env={"PATH": os.environ["PATH"]},
            isolation=isolation,
            default_user="nobody" if root else None,
            pid_namespace=root,
        )
        try:
            return _measure(runner, n, isolation.name)
        finally:
            runner.close(grace_s=1)
            isolation.sweep()


def _measure(runner: ProcessJobRunner, n: int, isolation: str) -> dict[str, Any]:
    ended: dict[int, float] = {}
    all_done = threading.Event()
    lock = threading.Lock()

    def on_exit(i: int, report: ExitReport) -> None:
        if report.exit_code != 0:
            print(f"job {i}: {report.reason}", file=sys.stderr)
        with lock:
            ended[i] = time.perf_counter()
            if len(ended) == n + 3:
                all_done.set()

    def launch(i: int) -> float:
        spec = LaunchSpec(job_id=f"j-{i}", epoch=1, attempt=1, argv=("true",), env=(),
                          gpu_indices=(), gpu_uuids=())  # fmt: skip
        t0 = time.perf_counter()
        runner.start(spec, lambda r, i=i: on_exit(i, r))  # type: ignore[misc]
        return t0

    for i in range(3):  # warm up: the launch server, the isolation's first groups
        launch(i)
    while len(ended) < 3:
        time.sleep(0.01)
    load = os.getloadavg()[0]
    cpu0 = _own_cpu_s(runner)
    started = {i: launch(i) for i in range(3, n + 3)}
    launched = time.perf_counter()
    if not all_done.wait(300):
        raise RuntimeError("`true` jobs did not all end within 300 s")
    while runner._live:  # every waiter done (its task reaped)
        time.sleep(0.01)
    time.sleep(0.2)  # the launch server reaps on the runner's word
    cpu = _own_cpu_s(runner) - cpu0
    first = started[3]
    return {
        "samples": [(ended[i] - t) * 1e6 for i, t in started.items()],
        "cpu_ms_per_job": cpu / n * 1000,
        "launches_per_s": n / (launched - first),
        "jobs_per_s": n / (max(ended.values()) - first),
        "load_average": round(load, 2),
        "isolation": isolation,
    }


def _row(name: str, kind: str, n: int, blocks: list[dict[str, Any]]) -> dict[str, Any]:
    samples = [s for b in blocks for s in b["samples"]]
    cpu = [round(b["cpu_ms_per_job"], 2) for b in blocks]
    launches = [round(b["launches_per_s"], 1) for b in blocks]
    params = {"jobs": n * len(blocks), "blocks": len(blocks), "launch": kind,
              "isolation": blocks[0]["isolation"], "user": "nobody" if os.geteuid() == 0 else "self",
              "pid_namespace": os.geteuid() == 0}  # fmt: skip
    extra = {
        "cpu_ms_per_job": round(sum(cpu) / len(cpu), 2),
        "cpu_ms_per_job_blocks": cpu,
        "launches_per_s_blocks": launches,
        "jobs_per_s": round(sum(b["jobs_per_s"] for b in blocks) / len(blocks), 1),
        "load_average": [b["load_average"] for b in blocks],
    }
    row = result(name, params, samples, extra=extra)
    row["ops_per_s"] = round(sum(launches) / len(launches), 1)  # launches/s, not 1/latency
    p = row
    print(f"{name:16} p50={p['p50_us'] / 1000:.2f} ms p99={p['p99_us'] / 1000:.2f} ms "
          f"launches/s={p['ops_per_s']} jobs/s={extra['jobs_per_s']} "
          f"cpu/job={extra['cpu_ms_per_job']} ms {cpu} load={extra['load_average']}",
          file=sys.stderr, flush=True)  # fmt: skip
    return row


def run(quick: bool = False) -> list[dict[str, Any]]:
    n = 40 if quick else 300
    if os.environ.get("GPU_PLATFORM_BENCH_SMOKE"):  # the test suite's run: the schema only
        n = 3
    blocks: dict[str, list[dict[str, Any]]] = {"shim": [], "server": []}
    for kind in ("shim", "server", "server", "shim"):  # A B B A
        blocks[kind].append(_block(kind, n))
    old = _row("job.spawn.shim", "python shim per task", n, blocks["shim"])
    new = _row("job.spawn", "launch server", n, blocks["server"])
    new["baseline"] = baseline("python shim per task (same run, A B B A)", old,
                               cpu_ms_per_job=old["extra"]["cpu_ms_per_job"])  # fmt: skip
    return [old, new]


if __name__ == "__main__":
    run(quick="--quick" in sys.argv)
