"""`gpu-platform simulate --plots` on a small generated cluster and trace: the PNGs, the
published-curve overlay from an expected-results folder, the progress bar (in-process and
across worker processes), and the one-line error when matplotlib is missing."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import random
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from gpu_platform.adapters.inbound.cli import CliHooks, SimulateOptions, build_cli
from gpu_platform.adapters.outbound.plots import ALLOC_PNG, INSTALL_HINT, UNALLOCATED_PNG
from gpu_platform.infrastructure import simulate as sim_entry
from gpu_platform.infrastructure.progress import progress_bar
from gpu_platform.infrastructure.simulate import simulate_command
from gpu_platform.testing.system import require

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
WORKLOAD = "tiny_pods"


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert len(data) > 2000


@pytest.fixture
def inputs(tmp_path: Path) -> tuple[Path, Path]:
    """16 nodes of 4 or 8 GPUs and 60 pods (fractional, whole and multi-GPU), seeded."""
    rng = random.Random(7)
    nodes, pods = tmp_path / "nodes.csv", tmp_path / f"{WORKLOAD}.csv"
    with nodes.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["sn", "cpu_milli", "memory_mib", "gpu", "model"])
        for i in range(16):
            w.writerow([f"n{i}", 96000, 786432, 8 if i % 2 else 4, "V100M32"])
    with pods.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"])
        for i in range(60):
            gpus = rng.choice([1, 1, 1, 2, 4])
            milli = rng.choice([250, 500, 1000]) if gpus == 1 else 1000
            w.writerow([f"p{i}", rng.choice([4000, 8000]), 16384, gpus, milli])
    return nodes, pods


@pytest.fixture
def matplotlib_installed() -> None:
    require(
        importlib.util.find_spec("matplotlib") is not None,
        f"matplotlib is not installed: {INSTALL_HINT} (it is in the dev extra)",
    )


def expected_folder(base: Path) -> Path:
    """A published-results folder for WORKLOAD in the upstream format (two seeds of BestFit
    and FGD), plus the derived means file."""
    folder = base / "expected"
    folder.mkdir()
    with (folder / "analysis_allo_discrete.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["workload", "sc_policy", "tune", "seed", "total_gpus", *range(131)])
        for policy, cap in (("05-BestFit", 90.0), ("06-FGD", 94.0)):
            for seed in (42, 43):
                w.writerow([WORKLOAD, policy, 1.3, seed, 96, *(min(k, cap) for k in range(131))])
    with (folder / "DERIVED_summary_by_workload_policy.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["workload", "sc_policy", "n_seeds", "alloc_pct_at_arrival100",
                    "alloc_pct_at_arrival130", "alloc_pct_at_arrival130_std",
                    "unallocated_gpus_at_arrival130"])  # fmt: skip
        w.writerow([WORKLOAD, "05-BestFit", 2, 90, 90, 0, 9.6])
        w.writerow([WORKLOAD, "06-FGD", 2, 94, 94, 0, 5.8])
    return folder


def options(nodes: Path, pods: Path, out: Path, **kw: object) -> SimulateOptions:
    base: dict[str, object] = {
        "protocol": "fgd",
        "cluster": nodes,
        "trace": pods,
        "policies": ("default", "bestfit"),
        "seeds": (42, 43),
        "out": out,
    }
    return SimulateOptions(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.usefixtures("matplotlib_installed")
def test_plots_are_written_beside_the_summary_with_the_published_overlay(
    inputs: tuple[Path, Path], tmp_path: Path
) -> None:
    nodes, pods = inputs
    out = tmp_path / "out"
    text = simulate_command(
        options(nodes, pods, out, plots=True, quiet=True, expected=expected_folder(tmp_path))
    )
    for name in (ALLOC_PNG, UNALLOCATED_PNG):
        assert_png(out / name)
        assert f"wrote {out / name}" in text
    assert "published fgd" in text  # the means file was found in the folder
    assert not (out / "fragmentation.png").exists()  # not recorded per step yet
    assert json.loads((out / "summary.json").read_text())["policies"].keys() == {
        "default",
        "bestfit",
    }


@pytest.mark.usefixtures("matplotlib_installed")
def test_plots_need_no_published_results(inputs: tuple[Path, Path], tmp_path: Path) -> None:
    nodes, pods = inputs
    out = tmp_path / "out"
    simulate_command(options(nodes, pods, out, plots=True, quiet=True, seeds=(42,)))
    assert_png(out / ALLOC_PNG)
    assert_png(out / UNALLOCATED_PNG)


def test_an_expected_folder_without_the_means_file_is_refused_before_any_run(
    inputs: tuple[Path, Path], tmp_path: Path
) -> None:
    nodes, pods = inputs
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=r"DERIVED_summary_by_workload_policy\.csv"):
        simulate_command(options(nodes, pods, out, expected=tmp_path))
    with pytest.raises(ValueError, match="no such file or folder"):
        simulate_command(options(nodes, pods, out, expected=tmp_path / "nosuch.csv"))
    assert not out.exists()


def recording_bar(
    console: Console,
) -> Callable[..., AbstractContextManager[Callable[[str], None]]]:
    """progress_bar drawn on `console` (a forced terminal), whatever the caller passes."""

    def make(total: int, what: str, *, enabled: bool = True) -> Iterator[Callable[[str], None]]:
        return progress_bar(total, what, enabled=enabled, console=console)

    return make  # type: ignore[return-value]


@pytest.mark.parametrize("workers", [1, 2])
def test_the_progress_bar_counts_every_run_and_results_keep_their_order(
    inputs: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    nodes, pods = inputs
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=120)
    monkeypatch.setattr(sim_entry, "progress_bar", recording_bar(console))
    out = tmp_path / "out"
    simulate_command(options(nodes, pods, out, workers=workers))
    assert "4/4" in screen.getvalue()
    runs = json.loads((out / "runs.json").read_text())
    assert [(r["policy"], r["seed"]) for r in runs] == [
        ("default", 42),
        ("default", 43),
        ("bestfit", 42),
        ("bestfit", 43),
    ]


def test_quiet_or_a_pipe_draws_no_progress_bar() -> None:
    terminal = io.StringIO()
    with progress_bar(
        3, "x", enabled=False, console=Console(file=terminal, force_terminal=True)
    ) as advance:
        advance("a")
    pipe = io.StringIO()
    with progress_bar(3, "x", console=Console(file=pipe, force_terminal=False)) as advance:
        advance("a")
    assert terminal.getvalue() == pipe.getvalue() == ""


def test_without_matplotlib_simulate_plots_exits_with_one_line_naming_the_extra(
    inputs: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in list(sys.modules):
        if name == "matplotlib" or name.startswith("matplotlib."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    nodes, pods = inputs
    out = tmp_path / "out"
    hooks = CliHooks(serve=lambda _: None, topology=lambda *_: "", simulate=simulate_command)
    args = ["simulate", "--cluster", str(nodes), "--trace", str(pods), "--out", str(out)]
    result = CliRunner().invoke(build_cli(hooks), [*args, "--plots"])
    assert result.exit_code == 1
    assert INSTALL_HINT in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not out.exists()  # refused before any run
