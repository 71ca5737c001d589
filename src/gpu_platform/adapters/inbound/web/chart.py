"""GPU-hours over time as an inline SVG, rendered on the server: stacked bars, one per time
bucket, one colour per tenant, with a legend and a text alternative. No JavaScript.

`usage_buckets` asks the UsageQueries port once per bucket; `svg_chart` is pure.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from html import escape

__all__ = ["PALETTE", "Bucket", "svg_chart", "usage_buckets"]

# Colour-blind-safe (Okabe-Ito), dark enough for 3:1 against white.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#8C6D00", "#56B4E9", "#000000")
WIDTH, HEIGHT, LEFT, BOTTOM, TOP = 720, 240, 84, 28, 12


@dataclass(frozen=True, slots=True)
class Bucket:
    """GPU-hours per tenant in [start, end) (Unix seconds)."""

    start: float
    end: float
    hours: Mapping[str, float]


def usage_buckets(
    usage: Callable[[float, float], Mapping[str, float]],
    hours: float,
    count: int = 24,
    now: float | None = None,
) -> list[Bucket]:
    """`count` equal buckets covering the last `hours` hours; `usage(since, until)` returns
    GPU-hours by tenant in that window."""
    end = time.time() if now is None else now
    step = hours * 3600.0 / count
    starts = [end - (count - i) * step for i in range(count)]
    return [Bucket(s, s + step, dict(usage(s, s + step))) for s in starts]


def _nice(peak: float) -> float:
    """The smallest 1/2/5 x 10^k at or above `peak` (the axis top)."""
    if peak <= 0:
        return 1.0
    scale = 10.0 ** (len(str(int(peak))) - 1) if peak >= 1 else 10.0**-3
    while True:
        for m in (1, 2, 5):
            if m * scale >= peak:
                return m * scale
        scale *= 10


def _clock(t: float, hours: float) -> str:
    fmt = "%H:%M" if hours <= 48 else "%m-%d"
    return time.strftime(fmt, time.gmtime(t))


def svg_chart(buckets: Sequence[Bucket], title: str, hours: float) -> str:
    """The chart as an `<svg role="img">` string (escaped), with a `<title>`, a `<desc>` giving
    the totals, and one `<rect>` per tenant and bucket with a tooltip."""
    tenants = sorted({t for b in buckets for t in b.hours})
    colour = {t: PALETTE[i % len(PALETTE)] for i, t in enumerate(tenants)}
    peak = max((sum(b.hours.values()) for b in buckets), default=0.0)
    top = _nice(peak)
    plot_w, plot_h = WIDTH - LEFT - 8, HEIGHT - BOTTOM - TOP
    slot = plot_w / max(len(buckets), 1)
    totals = {t: sum(b.hours.get(t, 0.0) for b in buckets) for t in tenants}
    desc = "; ".join(f"{t}: {h:.3f} GPU-hours" for t, h in totals.items()) or "no usage"
    parts = [
        f'<svg class="chart" role="img" aria-labelledby="chart-title chart-desc" '
        f'viewBox="0 0 {WIDTH} {HEIGHT + 24 + 18 * ((len(tenants) + 3) // 4)}" '
        f'xmlns="http://www.w3.org/2000/svg">',
        f'<title id="chart-title">{escape(title)}</title>',
        f'<desc id="chart-desc">{escape(desc)}</desc>',
    ]
    for k in range(5):  # horizontal grid lines and their labels
        y = TOP + plot_h - plot_h * k / 4
        parts.append(
            f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - 8}" y2="{y:.1f}" stroke="#bbb" '
            f'stroke-width="1"/><text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" '
            f'font-size="11" fill="#333">{top * k / 4:g}</text>'
        )
    for i, b in enumerate(buckets):
        x = LEFT + i * slot + slot * 0.15
        y = TOP + plot_h
        for t in tenants:
            h = b.hours.get(t, 0.0)
            if h <= 0:
                continue
            px = plot_h * h / top
            y -= px
            parts.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{slot * 0.7:.1f}" height="{px:.1f}" '
                f'fill="{colour[t]}"><title>{escape(t)}: {h:.3f} GPU-hours, '
                f"{_clock(b.start, hours)}-{_clock(b.end, hours)} UTC</title></rect>"
            )
        if i % max(len(buckets) // 6, 1) == 0:
            parts.append(
                f'<text x="{x:.1f}" y="{TOP + plot_h + 16}" font-size="11" '
                f'fill="#333">{_clock(b.start, hours)}</text>'
            )
    parts.append(
        f'<text x="14" y="{TOP + plot_h / 2:.0f}" font-size="11" fill="#333" '
        f'transform="rotate(-90 14 {TOP + plot_h / 2:.0f})" text-anchor="middle">GPU-hours</text>'
    )
    for i, t in enumerate(tenants):  # the legend, four per line
        lx, ly = LEFT + (i % 4) * 160, HEIGHT + 10 + 18 * (i // 4)
        parts.append(
            f'<rect x="{lx}" y="{ly}" width="12" height="12" fill="{colour[t]}"/>'
            f'<text x="{lx + 18}" y="{ly + 11}" font-size="12" fill="#222">{escape(t)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)
