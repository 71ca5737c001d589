"""`gpu-platform simulate --protocol arrivals` through the CLI: a small generated workload on a
profile cluster (files, failures, plots), a slice of the real openb pod list on the real node
list, and one-line errors for bad input."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpu_platform.adapters.inbound.cli import CliHooks, build_cli
from gpu_platform.adapters.outbound.plots import INSTALL_HINT
from gpu_platform.infrastructure.simulate import simulate_command
from gpu_platform.testing.system import require, require_shared

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TRACES = "traces/alibaba-clusterdata-gpu-v2023"
HOOKS = CliHooks(serve=lambda _: None, topology=lambda *_: "", simulate=simulate_command)


def simulate(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(build_cli(HOOKS), ["simulate", "--protocol", "arrivals", *args])
    return result.exit_code, result.output


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_a_generated_workload_with_failures_writes_summary_jobs_and_utilization(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    code, text = simulate(
        "--cluster", "4x8", "--trace", "generate:n=60,load=1.2", "--policy", "fifo,preempt",
        "--seeds", "1,2", "--fail-rate", "0.002", "--repair-s", "1800", "--out", str(out),
    )  # fmt: skip
    assert code == 0, text
    assert text.splitlines()[0].split()[:2] == ["policy", "alloc"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["protocol"] == "arrivals" and summary["gpus"] == 32
    assert list(summary["policies"]) == ["fifo", "preempt"]
    for figures in summary["policies"].values():
        assert [s["seed"] for s in figures["seeds"]] == [1, 2]
        assert 0 <= figures["alloc_pct"] <= 100
        assert figures["queue_delay_p50_s"] <= figures["queue_delay_p99_s"]
        assert figures["jct_p50_s"] <= figures["jct_p99_s"]
        for s in figures["seeds"]:
            assert s["finished"] + s["abandoned"] == s["jobs"] == 60  # no job lost
    assert sum(s["failures"] for s in summary["policies"]["fifo"]["seeds"]) > 0
    jobs = read_csv(out / "jobs.csv")
    assert len(jobs) == 2 * 2 * 60
    assert {(j["policy"], j["seed"]) for j in jobs} == {
        (p, s) for p in ("fifo", "preempt") for s in ("1", "2")
    }
    assert all(j["outcome"] in ("finished", "abandoned") for j in jobs)
    util = read_csv(out / "utilization.csv")
    assert {u["policy"] for u in util} == {"fifo", "preempt"}
    assert all(0 <= int(u["allocated_gpus"]) + int(u["down_gpus"]) <= 32 for u in util)
    free = [32 - int(u["allocated_gpus"]) - int(u["down_gpus"]) for u in util]
    assert all(0 <= float(u["fragmented_gpus"]) <= f for u, f in zip(util, free, strict=True))
    assert not list(out.glob("*.png"))

    again = tmp_path / "again"
    code, _ = simulate(
        "--cluster", "4x8", "--trace", "generate:n=60,load=1.2", "--policy", "fifo,preempt",
        "--seeds", "1,2", "--fail-rate", "0.002", "--repair-s", "1800", "--out", str(again),
    )  # fmt: skip
    assert code == 0
    assert (again / "jobs.csv").read_text() == (out / "jobs.csv").read_text()


def test_node_failures_are_counted_in_summary_jobs_and_utilization(tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, text = simulate(
        "--cluster", "4x8", "--trace", "generate:n=40", "--policy", "fifo,preempt",
        "--seeds", "1,2", "--node-fail-rate", "0.1", "--node-repair-s", "900",
        "--preempt-exempt-s", "600", "--out", str(out),
    )  # fmt: skip
    assert code == 0, text
    assert text.splitlines()[0].split()[-3:] == ["node", "fail", "requeued"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["node_fail_rate"] == 0.1 and summary["node_repair_s"] == 900
    assert summary["preempt_exempt_s"] == 600
    seeds = [s for p in summary["policies"].values() for s in p["seeds"]]
    assert sum(s["node_failures"] for s in seeds) > 0
    assert all(s["finished"] + s["abandoned"] == s["jobs"] == 40 for s in seeds)
    jobs = read_csv(out / "jobs.csv")
    by_run: dict[tuple[str, str], int] = {}
    for j in jobs:
        key = (j["policy"], j["seed"])
        by_run[key] = by_run.get(key, 0) + int(j["node_failures"])
    assert sorted(by_run.values()) == sorted(s["jobs_requeued_by_node_failure"] for s in seeds)
    util = read_csv(out / "utilization.csv")
    assert any(int(u["down_nodes"]) for u in util)
    assert all(int(u["down_gpus"]) >= 8 * int(u["down_nodes"]) for u in util)


def test_plots_are_written_when_matplotlib_is_present(tmp_path: Path) -> None:
    require(importlib.util.find_spec("matplotlib") is not None, f"no matplotlib: {INSTALL_HINT}")
    out = tmp_path / "out"
    code, text = simulate(
        "--cluster", "2x8", "--trace", "generate:n=40", "--seeds", "3", "--out", str(out),
        "--plots", "--quiet",
    )  # fmt: skip
    assert code == 0, text
    names = {
        "utilization.png",
        "fragmentation.png",
        "queue_delay_cdf.png",
        "jct_cdf.png",
        "preemptions.png",
        *(f"tenant_share_{p}.png" for p in ("fifo", "priority", "drf", "backfill", "preempt")),
    }
    assert {p.name for p in out.glob("*.png")} == names
    for name in names:
        assert (out / name).read_bytes()[:8] == PNG_SIGNATURE
        assert f"wrote {out / name}" in text


def test_a_slice_of_the_real_pod_list_runs_on_the_real_node_list(tmp_path: Path) -> None:
    nodes = require_shared(TRACES, "openb_node_list_gpu_node.csv")
    pods = require_shared(TRACES, "openb_pod_list_default.csv")
    piece = tmp_path / "pods_300.csv"
    with pods.open() as fh:
        piece.write_text("".join(line for _, line in zip(range(301), fh, strict=False)))
    out = tmp_path / "out"
    code, text = simulate(
        "--cluster", str(nodes), "--trace", str(piece), "--policy", "fifo,backfill",
        "--seeds", "1", "--out", str(out),
    )  # fmt: skip
    assert code == 0, text
    summary = json.loads((out / "summary.json").read_text())
    gpu_pods = [r for r in read_csv(piece) if int(r["num_gpu"]) > 0]
    for figures in summary["policies"].values():
        assert figures["seeds"][0]["jobs"] == figures["seeds"][0]["finished"] == len(gpu_pods)
    jobs = read_csv(out / "jobs.csv")
    first = next(j for j in jobs if j["id"] == gpu_pods[0]["name"])
    assert float(first["submit_s"]) == float(gpu_pods[0]["creation_time"])
    assert first["tenant"] == gpu_pods[0]["qos"]


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (
            ("--cluster", "4x8", "--trace", "generate", "--policy", "nosuch"),
            "unknown policy nosuch",
        ),
        (("--cluster", "0x8", "--trace", "generate"), "nodes and GPUs per node must be >= 1"),
        (("--cluster", "nowhere.csv", "--trace", "generate"), "neither a profile like 128x8"),
        (("--cluster", "4x8", "--trace", "generate:jobs=3"), "bad item 'jobs=3'"),
        (("--cluster", "4x8", "--trace", "nowhere.csv"), "neither a generator spec"),
        (("--cluster", "4x8", "--trace", "generate", "--fail-rate", "-1"), "--fail-rate must be"),
        (("--cluster", "4x8", "--trace", "generate", "--repair-s", "0"), "--repair-s must be"),
        (("--cluster", "4x8", "--trace", "generate", "--workers", "2"), "belong to the fgd"),
        (
            ("--cluster", "4x8", "--trace", "generate", "--node-fail-rate", "-0.5"),
            "--node-fail-rate must be >= 0",
        ),
        (
            ("--cluster", "4x8", "--trace", "generate", "--node-repair-s", "0"),
            "--node-repair-s must be > 0",
        ),
        (
            ("--cluster", "4x8", "--trace", "generate", "--preempt-exempt-s", "-1"),
            "--preempt-exempt-s must be >= 0",
        ),
    ],
)
def test_bad_input_exits_non_zero_with_one_line(
    tmp_path: Path, args: tuple[str, ...], reason: str
) -> None:
    code, text = simulate(*args, "--out", str(tmp_path / "out"))
    assert code == 1
    assert reason in text
    assert len(text.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
