"""Run every `tests/benchmarks/bench_*.py`, write bench/results.json and print a table.

Usage: python tests/benchmarks/run_all.py [--out bench/results.json] [--quick] [--only NAME]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def machine() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
    }


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
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    rows: list[dict[str, Any]] = []
    for path in sorted(HERE.glob("bench_*.py")):
        if args.only and args.only not in path.stem:
            continue
        print(f"== {path.stem}", flush=True)
        rows.extend(load(path).run(quick=args.quick))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": machine(), "results": rows}, indent=2) + "\n")
    print(f"\n{'name':<44} {'params':<64} {'p50_us':>10} {'p99_us':>10} {'ops/s':>12}  baseline")
    for row in rows:
        params = ",".join(f"{k}={v}" for k, v in row["params"].items())
        base = row.get("baseline") or {}
        base_s = ", ".join(f"{k}={fmt(v)}" for k, v in base.items())
        print(
            f"{row['name']:<44} {params[:64]:<64} {fmt(row['p50_us']):>10} "
            f"{fmt(row['p99_us']):>10} {fmt(row['ops_per_s']):>12}  {base_s}"
        )
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
