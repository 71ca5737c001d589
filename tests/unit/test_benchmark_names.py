"""`make bench` names every figure issue 13 asks for, or says which it did not produce."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def load_run_all() -> Any:
    spec = importlib.util.spec_from_file_location("run_all", ROOT / "tests/benchmarks/run_all.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_missing_names_lists_what_no_row_carries_and_fgd_is_a_prefix() -> None:
    run_all = load_run_all()
    rows = [{"name": n} for n in run_all.ISSUE_13_NAMES if not n.endswith(".")]
    assert run_all.missing_names(rows) == ["fgd."]
    assert run_all.missing_names([*rows, {"name": "fgd.default"}]) == []
    assert "raft.failover" in run_all.missing_names([{"name": "raft.failover_ms"}])


def test_the_report_names_the_missing_figures() -> None:
    run_all = load_run_all()
    data = {
        "machine": json.loads(json.dumps(run_all.machine())),
        "results": [{"name": "e2e.submit", "params": {}, "p50_us": 1.0, "p99_us": 2.0}],
    }
    text = run_all.report(data, True, 1.0, ["recovery.node_loss"])
    assert "Issue-13 figures not produced:** recovery.node_loss" in text
    assert "not produced" not in run_all.report(data, True, 1.0, [])
