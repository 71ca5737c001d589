"""Generic PNG charts over plain data, drawn with matplotlib's Agg backend (no display).

matplotlib is an optional dependency (extra `sim`): it is imported on first use, never at
import time, and its absence raises `PlotsUnavailable` with the one-line fix. Every function
takes plain numbers, writes one PNG and returns its path, so any simulator mode can reuse
them: `line_chart` (several series, optional min/max band, dashed overlays), `cdf_chart`
(empirical CDFs of samples), `stacked_chart` (per-group shares over x, as areas or bars) and
`bar_chart` (one value per label, optional error bars).

Errors: PlotsUnavailable (matplotlib missing) < RuntimeError; ValueError on malformed data
(series of unequal lengths, no data at all).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

__all__ = [
    "INSTALL_HINT",
    "PlotsUnavailable",
    "Series",
    "bar_chart",
    "cdf_chart",
    "line_chart",
    "require_matplotlib",
    "stacked_chart",
]

INSTALL_HINT = "pip install 'gpu-platform[sim]'"
_DPI = 110
_SIZE = (8.0, 5.0)


class PlotsUnavailable(RuntimeError):
    """matplotlib cannot be imported; the message is one line naming the install command."""


@dataclass(frozen=True, slots=True)
class Series:
    """One line: `x`/`y` of equal length; optional `low`/`high` band (same length); `dashed`
    for reference curves; `color` groups a series with another (e.g. ours and published)."""

    label: str
    x: Sequence[float]
    y: Sequence[float]
    low: Sequence[float] | None = None
    high: Sequence[float] | None = None
    dashed: bool = False
    color: str | None = None

    def check(self) -> None:
        n = len(self.x)
        if n == 0 or len(self.y) != n:
            raise ValueError(f"series {self.label!r}: x and y must be non-empty and equal")
        for name, band in (("low", self.low), ("high", self.high)):
            if band is not None and len(band) != n:
                raise ValueError(f"series {self.label!r}: {name} has {len(band)} points, not {n}")


def require_matplotlib() -> Any:
    """`matplotlib.pyplot` on the Agg backend, or PlotsUnavailable with the install hint."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        why = "is not installed" if exc.name == "matplotlib" else f"cannot be imported ({exc})"
        raise PlotsUnavailable(f"plots need matplotlib, which {why}: {INSTALL_HINT}") from None
    return plt


@contextmanager
def _figure(path: Path, title: str, xlabel: str, ylabel: str) -> Iterator[Any]:
    """A fresh figure and axes; saved to `path` and closed on exit (also on error)."""
    plt = require_matplotlib()
    fig, ax = plt.subplots(figsize=_SIZE)
    try:
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        yield ax
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=_DPI)
    finally:
        plt.close(fig)


def line_chart(
    path: Path,
    series: Sequence[Series],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    ylim: tuple[float, float] | None = None,
    zoom: tuple[float, float] | None = None,
) -> Path:
    """Several lines on one axes; a series with `low`/`high` gets a shaded band. `zoom` =
    (x0, x1) adds an inset with the same lines over that x range, y fitted to them there."""
    if not series:
        raise ValueError(f"{path.name}: no series to plot")
    for s in series:
        s.check()
    with _figure(path, title, xlabel, ylabel) as ax:
        _lines(ax, series)
        if ylim is not None:
            ax.set_ylim(*ylim)
        ax.legend(loc="upper left", fontsize="small")
        if zoom is not None:
            x0, x1 = zoom
            seen = [
                v
                for s in series
                for x, *vs in zip(s.x, s.y, s.low or s.y, s.high or s.y, strict=True)
                if x0 <= x <= x1
                for v in vs
            ]
            if seen:
                inset = ax.inset_axes((0.5, 0.08, 0.46, 0.5))
                _lines(inset, series)
                pad = max(0.1, 0.05 * (max(seen) - min(seen)))
                inset.set_xlim(x0, x1)
                inset.set_ylim(min(seen) - pad, max(seen) + pad)
                inset.grid(True, alpha=0.3)
                inset.tick_params(labelsize="x-small")
                ax.indicate_inset_zoom(inset, edgecolor="grey")
    return path


def _lines(ax: Any, series: Sequence[Series]) -> None:
    for s in series:
        (line,) = ax.plot(
            s.x, s.y, label=s.label, linestyle="--" if s.dashed else "-", color=s.color
        )
        if s.low is not None and s.high is not None:
            ax.fill_between(s.x, s.low, s.high, color=line.get_color(), alpha=0.2)


def cdf_chart(
    path: Path,
    samples: Mapping[str, Sequence[float]],
    *,
    title: str,
    xlabel: str,
    log_x: bool = False,
) -> Path:
    """The empirical CDF of each group's samples (groups without samples are left out)."""
    groups = {k: sorted(v) for k, v in samples.items() if len(v)}
    if not groups:
        raise ValueError(f"{path.name}: no samples to plot")
    with _figure(path, title, xlabel, "fraction ≤ x") as ax:
        for label, values in groups.items():
            n = len(values)
            ax.step(values, [(i + 1) / n for i in range(n)], where="post", label=label)
        if log_x:
            ax.set_xscale("log")
        ax.set_ylim(0.0, 1.0)
        ax.legend(loc="best", fontsize="small")
    return path


def stacked_chart(
    path: Path,
    x: Sequence[float],
    groups: Mapping[str, Sequence[float]],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    bars: bool = False,
) -> Path:
    """Each group's value at each x stacked on the previous groups (areas, or bars)."""
    if not x or not groups:
        raise ValueError(f"{path.name}: no data to plot")
    for label, values in groups.items():
        if len(values) != len(x):
            raise ValueError(f"group {label!r}: {len(values)} values for {len(x)} x points")
    with _figure(path, title, xlabel, ylabel) as ax:
        if bars:
            base = [0.0] * len(x)
            width = 0.8 * (min(b - a for a, b in pairwise(x)) if len(x) > 1 else 1)
            for label, values in groups.items():
                ax.bar(x, values, width=width, bottom=base, label=label)
                base = [b + v for b, v in zip(base, values, strict=True)]
        else:
            ax.stackplot(x, *groups.values(), labels=list(groups))
        ax.legend(loc="best", fontsize="small")
    return path


def bar_chart(
    path: Path,
    values: Mapping[str, float],
    *,
    title: str,
    ylabel: str,
    errors: Mapping[str, tuple[float, float]] | None = None,
    hatched: Sequence[str] = (),
    colors: Mapping[str, str] | None = None,
) -> Path:
    """One bar per label, its value written above it; `errors[label] = (low, high)` draws a
    range; labels in `hatched` (e.g. published references) are drawn hatched, in
    `colors[label]` when given (matplotlib colour names or "C0".."C9")."""
    if not values:
        raise ValueError(f"{path.name}: no values to plot")
    labels = list(values)
    errors = errors or {}
    colors = colors or {}
    with _figure(path, title, "", ylabel) as ax:
        for i, label in enumerate(labels):
            v = values[label]
            ax.bar(
                i,
                v,
                color="white" if label in hatched else colors.get(label, f"C{i % 10}"),
                edgecolor=colors.get(label, "grey") if label in hatched else None,
                hatch="//" if label in hatched else None,
            )
            top = v
            if label in errors:
                lo, hi = errors[label]
                ax.errorbar(i, v, yerr=[[v - lo], [hi - v]], color="black", capsize=4, lw=1)
                top = max(v, hi)
            ax.annotate(f"{v:.0f}", (i, top), ha="center", va="bottom", fontsize="small")
        ax.set_xticks(range(len(labels)), labels, rotation=20)
    return path
