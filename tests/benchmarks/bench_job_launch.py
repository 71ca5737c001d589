"""Job launch cost of the isolation defaults: a `true` job from `ProcessJobRunner.start` to its
exit report, run as `nobody` in its own PID namespace with its own /proc (the agent's
defaults, `job_user` and `job_pid_namespace`), beside the baseline measured in the same run:
the runner's own account (root) in the host's PID namespace. Needs root (else skipped: the
defaults only apply under root). No cgroups (isolation none), no GPUs: only the account switch,
the namespace and the extra fork are measured.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _harness import baseline, result

from gpu_platform.adapters.outbound.process import ProcessJobRunner
from gpu_platform.ports.outbound.job_runner import LaunchSpec


def _samples(n: int, **options: Any) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        runner = ProcessJobRunner(
            Path(tmp) / "jobs", base_env={"PATH": os.environ["PATH"]}, **options
        )
        out = []
        try:
            for i in range(n + 2):  # the first 2 warm up
                done = threading.Event()
                spec = LaunchSpec(job_id=f"j-{i}", epoch=1, attempt=1, argv=("true",), env=(),
                                  gpu_indices=(), gpu_uuids=())  # fmt: skip
                t0 = time.perf_counter_ns()
                runner.start(spec, lambda _, done=done: done.set())  # type: ignore[misc]
                if not done.wait(30):
                    raise RuntimeError("a `true` job did not end within 30 s")
                if i >= 2:
                    out.append((time.perf_counter_ns() - t0) / 1000.0)
        finally:
            runner.close(grace_s=1)
        return out


def run(quick: bool) -> list[dict[str, Any]]:
    if os.geteuid() != 0:
        return []
    n = 100
    if quick:  # the test suite's smoke run (GPU_PLATFORM_BENCH_SMOKE): the schema only
        n = 3 if os.environ.get("GPU_PLATFORM_BENCH_SMOKE") else 20
    base = result("job.launch.root_host_pidns", {"jobs": n}, _samples(n))
    isolated = _samples(n, default_user="nobody", pid_namespace=True)
    params = {"jobs": n, "user": "nobody", "pid_namespace": True}
    return [
        base,
        result("job.launch", params, isolated, baseline("root, host PID namespace", base)),
    ]
