"""Run every `tests/benchmarks/bench_*.py`; write bench/results.json, bench/REPORT.md and a table.

Usage: python tests/benchmarks/run_all.py [--out bench/results.json] [--quick] [--only NAME] [--retry]

results.json = {"machine": {...}, "results": [{"name", "params", "p50_us", "p99_us", "ops_per_s",
"baseline": {"name", "p50_us", "p99_us", "ops_per_s"}, "extra": {...}}]}; fields that do not apply
are omitted. REPORT.md (beside results.json) has the machine and one table per benchmark name.
A full run (no --only) also lists the issue-13 names no benchmark produced (`ISSUE_13_NAMES`),
on the terminal and at the top of REPORT.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# The figure names issue 13 asks for; a name ending in "." is a prefix (fgd.<workload>).
ISSUE_13_NAMES = (
    "placement.decision",
    "scheduler.throughput",
    "scheduler.utilization",
    "buddy.alloc_free",
    "raft.core.commits",
    "raft.grpc.throughput",
    "raft.grpc.commit_latency",
    "raft.failover",
    "recovery.node_loss",
    "e2e.submit",
    "fgd.",
)


def missing_names(rows: list[dict[str, Any]]) -> list[str]:
    """The `ISSUE_13_NAMES` no row carries (a prefix counts when some name starts with it)."""
    names = {row["name"] for row in rows}
    return [
        want
        for want in ISSUE_13_NAMES
        if not any(n == want or (want.endswith(".") and n.startswith(want)) for n in names)
    ]


def _proc_field(path: str, key: str) -> str | None:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _cpu_model() -> str:
    return _proc_field("/proc/cpuinfo", "model name") or platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    total = _proc_field("/proc/meminfo", "MemTotal")
    return round(int(total.split()[0]) / (1 << 20), 1) if total else None


def _git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            check=False,
            capture_output=True,
            text=True,
            cwd=HERE,
        )
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def machine() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "git_commit": _git_commit(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def clean(row: dict[str, Any]) -> dict[str, Any]:
    """Drop fields that do not apply (None baseline, empty extra)."""
    return {k: v for k, v in row.items() if v not in (None, {}, [])}


def report(
    data: dict[str, Any], quick: bool, seconds: float, missing: list[str] | None = None
) -> str:
    m = data["machine"]
    lines = [
        "# Benchmark report",
        "",
        f"- commit `{m['git_commit']}`, {m['date']}, {'quick' if quick else 'full'} run, "
        f"{seconds:.0f} s",
        f"- {m['cpu']}, {m['cpus']} CPUs, {m['memory_gib']} GiB, load {m['load_average']}",
        f"- {m['implementation']} {m['python']} on {m['platform']}",
        "",
        "Latencies in microseconds; each figure beside its in-run baseline where one exists.",
    ]
    if missing:
        lines += ["", f"**Issue-13 figures not produced:** {', '.join(missing)}"]
    names: dict[str, list[dict[str, Any]]] = {}
    for row in data["results"]:
        names.setdefault(row["name"], []).append(row)
    for name, rows in names.items():
        lines += [
            "",
            f"## {name}",
            "",
            "| params | p50 µs | p99 µs | ops/s | baseline |",
            "|---|---|---|---|---|",
        ]
        for row in rows:
            params = ", ".join(f"{k}={v}" for k, v in row["params"].items())
            base = row.get("baseline") or {}
            base_s = (
                f"{base.get('name', '')}: p50 {fmt(base.get('p50_us'))}, p99 {fmt(base.get('p99_us'))}"
                if base
                else "-"
            )
            lines.append(
                f"| {params} | {fmt(row.get('p50_us'))} | {fmt(row.get('p99_us'))} | "
                f"{fmt(row.get('ops_per_s'))} | {base_s} |"
            )
            extra = row.get("extra") or {}
            if extra:
                lines.append(f"| ↳ {', '.join(f'{k}={v}' for k, v in extra.items())} | | | | |")
    return "\n".join(lines) + "\n"


def load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}"
    return str(value)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="bench/results.json")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for smoke runs")
    parser.add_argument("--only", default="", help="substring of benchmark module names to run")
    parser.add_argument(
        "--retry",
        action="store_true",
        help="run a benchmark that raised once more (the test suite's smoke run: timing-bound "
        "set-ups can miss on a loaded machine); both outcomes are reported",
    )
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    out = Path(args.out)
    # where benchmarks put files beside results.json (the PNGs of bench_offered_load.py and
    # bench_cluster_offered.py)
    os.environ["GPU_PLATFORM_BENCH_DIR"] = str(out.parent)
    rows: list[dict[str, Any]] = []
    failed: dict[str, str] = {}
    retried: dict[str, str] = {}
    started = time.monotonic()
    for path in sorted(HERE.glob("bench_*.py")):
        if args.only and args.only not in path.stem:
            continue
        tries = 2 if args.retry else 1
        for attempt in range(1, tries + 1):
            print(f"== {path.stem}" + (f" (try {attempt})" if attempt > 1 else ""), flush=True)
            try:
                rows.extend(load(path).run(quick=args.quick))
            except Exception:  # one benchmark's failure must not hide the others' figures
                error = traceback.format_exc()
                print(error, file=sys.stderr, flush=True)
                if attempt < tries:
                    retried[path.stem] = error
                else:
                    failed[path.stem] = error
            else:
                break
    out.parent.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {"machine": machine(), "results": [clean(r) for r in rows]}
    if retried:
        data["retried"] = retried  # failed once, then ran: read the traceback
    if failed:
        data["failed"] = failed
    out.write_text(json.dumps(data, indent=2) + "\n")
    missing = [] if args.only else missing_names(rows)
    (out.parent / "REPORT.md").write_text(
        report(data, args.quick, time.monotonic() - started, missing)
    )
    print(f"\n{'name':<44} {'params':<64} {'p50_us':>10} {'p99_us':>10} {'ops/s':>12}  baseline")
    for row in rows:
        params = ",".join(f"{k}={v}" for k, v in row["params"].items())
        base = row.get("baseline") or {}
        base_s = ", ".join(f"{k}={fmt(v)}" for k, v in base.items())[:100]
        print(
            f"{row['name']:<44} {params[:64]:<64} {fmt(row['p50_us']):>10} "
            f"{fmt(row['p99_us']):>10} {fmt(row['ops_per_s']):>12}  {base_s}"
        )
    if missing:
        print(f"\nissue-13 figures not produced: {', '.join(missing)}")
    for name in set(retried) - set(failed):
        print(f"\n{name} failed once and was run again (traceback above)")
    print(f"\nwrote {out} and {out.parent / 'REPORT.md'}")
    if failed:
        print(f"benchmarks that failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
