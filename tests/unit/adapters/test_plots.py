"""The generic chart functions write real PNGs; bad data and a missing matplotlib are refused
with a clear reason."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.plots import (
    INSTALL_HINT,
    PlotsUnavailable,
    Series,
    bar_chart,
    cdf_chart,
    line_chart,
    require_matplotlib,
    stacked_chart,
)
from gpu_platform.testing.system import require

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert len(data) > 2000  # a drawn chart, not an empty image


@pytest.fixture
def matplotlib_installed() -> None:
    require(
        importlib.util.find_spec("matplotlib") is not None,
        f"matplotlib is not installed: {INSTALL_HINT} (it is in the dev extra)",
    )


@pytest.fixture
def no_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `import matplotlib` fail as it does where the extra is not installed."""
    for name in list(sys.modules):
        if name == "matplotlib" or name.startswith("matplotlib."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)


@pytest.mark.usefixtures("matplotlib_installed")
def test_a_line_chart_with_bands_dashed_overlays_and_a_zoom_is_a_png(tmp_path: Path) -> None:
    x = list(range(131))
    ours = Series(
        "ours", x, [min(k, 95.0) for k in x], [min(k, 94.0) for k in x], [min(k, 96.0) for k in x]
    )
    ref = Series("published", x, [min(k, 93.0) for k in x], dashed=True, color=ours.color)
    path = line_chart(
        tmp_path / "sub" / "lines.png",
        [ours, ref],
        title="t",
        xlabel="x",
        ylabel="y",
        zoom=(80, 130),
    )
    assert path == tmp_path / "sub" / "lines.png"
    assert_png(path)


@pytest.mark.usefixtures("matplotlib_installed")
def test_cdf_stacked_and_bar_charts_are_pngs(tmp_path: Path) -> None:
    assert_png(
        cdf_chart(
            tmp_path / "cdf.png",
            {"a": [1.0, 5.0, 2.0, 40.0], "b": [3.0], "empty": []},
            title="queueing delay",
            xlabel="s",
            log_x=True,
        )
    )
    shares = {"team-a": [1.0, 2.0, 3.0], "team-b": [3.0, 2.0, 1.0]}
    assert_png(
        stacked_chart(
            tmp_path / "area.png", [0, 1, 2], shares, title="t", xlabel="h", ylabel="GPUs"
        )
    )
    assert_png(
        stacked_chart(
            tmp_path / "bars.png",
            [0, 1, 2],
            shares,
            title="t",
            xlabel="h",
            ylabel="GPUs",
            bars=True,
        )
    )
    assert_png(
        bar_chart(
            tmp_path / "bar.png",
            {"ours": 255.0, "theirs": 286.0},
            title="t",
            ylabel="GPUs",
            errors={"ours": (250.0, 260.0)},
            hatched=["theirs"],
        )
    )


@pytest.mark.usefixtures("matplotlib_installed")
def test_malformed_data_is_refused_naming_the_series(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'s'"):
        line_chart(tmp_path / "a.png", [Series("s", [1, 2], [1])], title="", xlabel="", ylabel="")
    with pytest.raises(ValueError, match="low"):
        line_chart(
            tmp_path / "a.png",
            [Series("s", [1, 2], [1, 2], low=[0])],
            title="",
            xlabel="",
            ylabel="",
        )
    with pytest.raises(ValueError, match="no series"):
        line_chart(tmp_path / "a.png", [], title="", xlabel="", ylabel="")
    with pytest.raises(ValueError, match="no samples"):
        cdf_chart(tmp_path / "a.png", {"a": []}, title="", xlabel="")
    with pytest.raises(ValueError, match="'g'"):
        stacked_chart(tmp_path / "a.png", [0, 1], {"g": [1.0]}, title="", xlabel="", ylabel="")
    assert not (tmp_path / "a.png").exists()


def test_without_matplotlib_plots_fail_with_the_install_command(
    no_matplotlib: None, tmp_path: Path
) -> None:
    with pytest.raises(PlotsUnavailable, match=r"pip install 'gpu-platform\[sim\]'") as info:
        require_matplotlib()
    assert "\n" not in str(info.value)
    with pytest.raises(PlotsUnavailable):
        bar_chart(tmp_path / "bar.png", {"a": 1.0}, title="", ylabel="")
    assert not (tmp_path / "bar.png").exists()
