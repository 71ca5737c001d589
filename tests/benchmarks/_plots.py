"""The latency-against-offered-load figure the open-loop benchmarks draw (PNGs are not
committed; matplotlib is imported only when a figure is drawn)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def loglog_figure(path: Path, *, xlabel: str, ylabel: str, title: str) -> Iterator[Any]:
    """The axes to draw on; on leaving, both axes log scale, a grid and the legend, saved to
    `path` (its folder made) and closed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    try:
        yield ax
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
    print(f"   wrote {path}", flush=True)
