"""Charts for the HTML report as inline SVG strings, drawn with matplotlib without pyplot.

Why these choices:
- SVG inline (no images, no JavaScript): the report is one file that opens offline.
- ``Figure`` objects, never pyplot: no global figure registry to leak memory or state between reports,
  and no GUI backend is touched (works headless without ``matplotlib.use("Agg")``).
- Deterministic output for golden tests: a fixed ``svg.hashsalt`` per chart (unique per chart, so
  clip-path ids from different charts never collide in one page), no date in the metadata, and ids no
  element references are stripped (matplotlib names groups ``figure_1``, ``axes_1`` in every chart).
- Small files: text stays text (``svg.fonttype: none``), paths are simplified, and every line is
  downsampled to at most :data:`MAX_POINTS` points (memory by bucket max, so peaks survive; compute by
  bucket mean).
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from io import StringIO
from typing import Any

import matplotlib as mpl
import matplotlib.dates as mdates
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

MAX_POINTS = 500
WIDTH_IN = 10.0  # about 960 px: drawn near 1:1 in the page, so 9 pt text reads as 12 px
COLORS = {"held": "#8a96a3", "needed": "#1f6fb2", "use": "#1f6fb2", "rec": "#d9480f", "band": "#f59f00"}
_RC: dict[str, Any] = {
    "svg.fonttype": "none",
    "text.parse_math": False,  # user text such as "$x$" stays literal, never mathtext
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans", "Arial", "Helvetica", "sans-serif"],
    "font.size": 9,
    "path.simplify": True,
    "path.simplify_threshold": 0.5,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#e6e8eb",
    "grid.linewidth": 0.6,
    "axes.edgecolor": "#8a96a3",
    "legend.frameon": False,
}
_ID = re.compile(r'\s(?:id)="([^"]+)"')
_REF = re.compile(r'(?:href="#|url\(#)([^")]+)')


@contextmanager
def chart_style(salt: str) -> Iterator[None]:
    """matplotlib settings for one chart; ``salt`` makes its SVG ids stable and unique in the page."""
    rc: Any = {**_RC, "svg.hashsalt": salt}  # Any: matplotlib types the keys as a Literal of every rcParam
    with mpl.rc_context(rc):
        yield


def to_svg(fig: Figure, *, tight: bool = False) -> str:
    """The figure as an inline ``<svg>`` element (call inside :func:`chart_style`).

    It keeps its natural size and viewBox; the page's CSS (``max-width: 100%; height: auto``) shrinks
    it on narrow screens without ever blowing it up. ``tight`` crops to the drawn content (one more
    draw: worth it only where labels of unknown length, such as namespace names, set the margins).
    """
    buf = StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight" if tight else None, pad_inches=0.05,
                metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg, flags=re.S)
    used = set(_REF.findall(svg))
    return _ID.sub(lambda m: m.group(0) if m.group(1) in used else "", svg).strip()


def downsample(series: pd.Series, how: str = "max", max_points: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """(times, values) with at most ``max_points`` points: ``how`` = max or mean per equal bucket.

    NaN gaps stay gaps (an all-NaN bucket is NaN), so a line breaks where data is missing.
    """
    idx = pd.DatetimeIndex(series.index)
    times = (idx.tz_convert("UTC").tz_localize(None) if idx.tz is not None else idx).to_numpy()
    values = series.to_numpy(dtype="float64")
    if len(values) <= max_points:
        return times, values
    size = math.ceil(len(values) / max_points)
    padded = np.concatenate([values, np.full((-len(values)) % size, np.nan)]).reshape(-1, size)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN buckets: NaN is the right answer
        agg = np.nanmax(padded, axis=1) if how == "max" else np.nanmean(padded, axis=1)
    return times[::size], agg


@dataclass(frozen=True)
class Level:
    """A horizontal reference line (what is held or recommended), with an optional band around it
    (the need's lower..upper bound)."""

    label: str
    value: float
    color: str
    style: str = "-"
    lower: float | None = None
    upper: float | None = None
    band_label: str = ""


def _higher(top: float, value: float) -> float:
    """The axis' top raised to ``value`` where that is a finite number (an axis limit cannot be infinite)."""
    return max(top, value) if math.isfinite(value) else top


def draw_panel(ax: Axes, series: pd.Series, how: str, label: str, levels: Sequence[Level]) -> None:
    """One usage line against its reference levels, with the legend in one row above the plot."""
    top = 0.0
    for lv in levels:
        if lv.lower is not None and lv.upper is not None:
            ax.axhspan(lv.lower, lv.upper, color=lv.color, alpha=0.18, linewidth=0, label=lv.band_label)
            top = _higher(top, lv.upper)
        ax.axhline(lv.value, color=lv.color, linestyle=lv.style, linewidth=1.3, label=lv.label)
        top = _higher(top, lv.value)
    times, values = downsample(series, how)
    values = np.where(np.isfinite(values), values, np.nan)  # ±Inf is no sample (the quality stage drops it too)
    ax.plot(times, values, color=COLORS["use"], linewidth=0.9, label=label)
    peak = np.nanmax(values) if np.isfinite(values).any() else 0.0
    ax.set_ylim(0, _higher(top, float(peak)) * 1.08 or 1.0)
    ax.margins(x=0)
    ax.set_axisbelow(True)
    handles, labels = ax.get_legend_handles_labels()
    handles, labels = handles[-1:] + handles[:-1], labels[-1:] + labels[:-1]  # the usage line first
    ax.legend(handles, labels, loc="lower left", bbox_to_anchor=(0, 1.0), ncols=len(labels), fontsize=8,
              handlelength=1.8, columnspacing=1.2, borderaxespad=0.2)


@dataclass(frozen=True)
class Panel:
    """One panel of a usage chart: a series (aggregated by ``how`` when downsampled) and its levels."""

    series: pd.Series
    how: str  # "max" or "mean"
    label: str
    ylabel: str
    levels: Sequence[Level]
    tick_format: str = ",.0f"


PANEL_IN, GAP_IN, TOP_IN, BOTTOM_IN, LEFT_IN, RIGHT_IN = 1.6, 0.42, 0.3, 0.5, 0.85, 0.2


def usage_figure(panels: Sequence[Panel]) -> Figure:
    """Stacked panels sharing the time axis, laid out with fixed margins.

    Fixed margins instead of constrained layout or a tight bounding box: those draw the figure two or
    three times, and charting 50 workloads took 12 s instead of about 4 s.
    """
    n = len(panels)
    height = n * PANEL_IN + (n - 1) * GAP_IN + TOP_IN + BOTTOM_IN
    fig = Figure(figsize=(WIDTH_IN, height))
    axes = fig.subplots(n, 1, sharex=True, squeeze=False, gridspec_kw={
        "left": LEFT_IN / WIDTH_IN, "right": 1 - RIGHT_IN / WIDTH_IN, "top": 1 - TOP_IN / height,
        "bottom": BOTTOM_IN / height, "hspace": GAP_IN / PANEL_IN})[:, 0]
    for ax, panel in zip(axes, panels, strict=True):
        draw_panel(ax, panel.series, panel.how, panel.label, panel.levels)
        ax.set_ylabel(panel.ylabel)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _, f=panel.tick_format: format(v, f)))
    locator = mdates.AutoDateLocator(maxticks=8)
    axes[-1].xaxis.set_major_locator(locator)
    axes[-1].xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    return fig


def fleet_figure(names: Sequence[str], held: Sequence[float], needed: Sequence[float],
                 autoscaled: Sequence[float] | None = None) -> Figure:
    """Horizontal grouped bars: GPU-equivalents held vs needed per namespace, largest on top; with
    ``autoscaled``, a third bar for right-sized and autoscaled (on average over the window)."""
    n = len(names)
    bars = [("held", held, COLORS["held"]), ("needed", needed, COLORS["needed"])]
    if autoscaled is not None:
        bars.append(("right-sized + autoscaled (mean)", autoscaled, COLORS["band"]))
    height = 0.76 / len(bars)
    fig = Figure(figsize=(WIDTH_IN, 0.9 + 0.16 * len(bars) * max(n, 1)), layout="constrained")
    ax = fig.subplots()
    y = np.arange(n)[::-1]
    for i, (label, values, color) in enumerate(bars):
        ax.barh(y + 0.38 - height * (i + 0.5), values, height=height, color=color, label=label)
    ax.set_yticks(y, labels=list(names))
    ax.set_xlabel("GPU-equivalents (all replicas)")
    ax.grid(axis="y", visible=False)
    ax.set_axisbelow(True)
    ax.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncols=len(bars), fontsize=8, borderaxespad=0.2)
    ax.set_xlim(left=0)
    ax.set_ylim(-0.6, n - 0.4)
    return fig


def _collides(box: Any, kept: Sequence[Any], page: Any) -> bool:
    """Whether ``box`` overlaps any of ``kept`` or sticks out of ``page`` (where it would be cut off)."""
    outside = box.x0 < page.x0 or box.y0 < page.y0 or box.x1 > page.x1 or box.y1 > page.y1
    return outside or any(box.overlaps(k) for k in kept)


def drawn_xticklabels(ax: Any) -> list[Any]:
    """The x tick labels matplotlib draws: visible, not empty, on a tick inside the view (it also lays out
    ticks just beyond the limits, which are never drawn)."""
    lo, hi = sorted(ax.get_xlim())
    return [t for t in ax.get_xticklabels() if t.get_visible() and t.get_text() and lo <= t.get_position()[0] <= hi]


def keep_ticks_inside(fig: Figure) -> int:
    """Align a tick label that would stick out of the figure with its tick's inner side instead of centring
    it on the tick (the last date on an axis that ends at the figure's edge), so no tick label is clipped.
    Draws the figure once to measure; returns how many labels it moved."""
    canvas = fig.canvas if hasattr(fig.canvas, "get_renderer") else FigureCanvasAgg(fig)
    renderer = canvas.get_renderer()
    fig.draw_without_rendering()
    moved = 0
    for ax in fig.axes:
        for label in drawn_xticklabels(ax):
            box = label.get_window_extent(renderer)
            if box.x1 > fig.bbox.x1:
                label.set_horizontalalignment("right")
                moved += 1
            elif box.x0 < fig.bbox.x0:
                label.set_horizontalalignment("left")
                moved += 1
    return moved


def place_labels(fig: Figure, labels: Sequence[Any], offsets: Sequence[tuple[float, float]],
                 avoid: Sequence[Any] = ()) -> list[bool]:
    """Move each point label (an ``Annotation`` with ``textcoords="offset points"``) to the first of
    ``offsets`` (points from its anchor) where its box stays inside the figure and overlaps no label
    placed before it and none of ``avoid`` (other texts: legends, tick labels); hide it where none
    does. In order, so the same figure always gets the same labels. Draws the figure once to measure;
    returns which labels show."""
    canvas = fig.canvas if hasattr(fig.canvas, "get_renderer") else FigureCanvasAgg(fig)
    renderer = canvas.get_renderer()
    fig.draw_without_rendering()
    kept = [a.get_window_extent(renderer) for a in avoid if a.get_visible()]
    shown = []
    for label in labels:
        for dx, dy in offsets:
            label.xyann = (dx, dy)
            label.set_horizontalalignment("left" if dx >= 0 else "right")
            box = label.get_window_extent(renderer)
            if not _collides(box, kept, fig.bbox):
                kept.append(box)
                break
        else:
            label.set_visible(False)
        shown.append(label.get_visible())
    return shown
