"""`make bench` keeps working: every benchmark runs in quick mode and writes the agreed schema.
(No timing is asserted; figures are read from bench/results.json by people.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(540)  # every benchmark, small (one retried): minutes on a loaded 2 cores
def test_every_benchmark_runs_and_writes_results_json(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "tests/benchmarks/run_all.py"),
            "--quick",
            "--retry",
            "--out",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "GPU_PLATFORM_BENCH_SMOKE": "1"},
        start_new_session=True,  # on a timeout, the benchmarks' own children go too
    )
    try:
        stdout, stderr = proc.communicate(timeout=500)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail(f"benchmarks still running after 500 s: {stdout[-3000:]}")
    # the benchmark that failed and its traceback, not only the exit status
    assert proc.returncode == 0, (stdout[-3000:], stderr[-6000:])
    data = json.loads(out.read_text())
    for name, error in data.pop("retried", {}).items():  # shown in the summary, not hidden
        warnings.warn(f"benchmark {name} failed once, then ran: {error[-1500:]}", stacklevel=1)
    assert set(data) == {"machine", "results"} and data["results"]
    assert {"cpu", "cpus", "python", "git_commit"} <= set(data["machine"])
    for row in data["results"]:
        assert {"name", "params", "p50_us", "p99_us"} <= set(row)  # ops_per_s only for rates
        assert row["p50_us"] <= row["p99_us"]
        assert "." in row["name"], row["name"]  # issue-13 names: area.metric
        if "baseline" in row:
            assert "name" in row["baseline"], row
    report = (tmp_path / "REPORT.md").read_text()
    assert report.startswith("# Benchmark report") and "## buddy.alloc_free" in report
