"""Charts of a replay (``replay.py --chart``) and of a sweep (``replay_sweep.py --chart``).

A replay's figures say how much each policy held and how often it missed; the chart says when: demand,
the GPUs each policy held minute by minute, and the share of each hour's requests over the objective.
A sweep's chart puts every client against the goal: GPU-hours as a share of static peak's on one axis,
requests over the objective on the other, the goal a box in the corner.

Drawn with the report's matplotlib style (``recommender.outputs.charts``): ``Figure`` objects, no pyplot.
The file's suffix picks the format (.svg, .png or .pdf).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.text import Annotation
from matplotlib.ticker import FuncFormatter

from recommender.outputs.charts import WIDTH_IN, chart_style, downsample, keep_ticks_inside, place_labels, to_svg

POLICY_COLORS = {"static-peak": "#8a96a3", "reactive": "#f59f00", "reactive-zero": "#e8590c",
                 "reactive-rightsized": "#c2255c", "ours": "#1f6fb2",
                 "oracle": "#2b8a3e"}
GOAL_SAVING_PCT = 50.0  # the goal: at most half of static peak's GPU-hours...
GOAL_OVER_PCT = 1.0  # ...and at most 1 point of requests over the objective beyond the unavoidable
MAX_POINTS = 1500  # a 14-day replay is 20,160 minutes: bucket maxima keep the peaks
FORMATS = (".svg", ".png", ".pdf")  # by the file's suffix
LABEL_OFFSETS = ((4, 3), (4, -9), (-4, 3), (-4, -9))  # points from a client's dot: its name's corners to try


def chart_path_problem(path: Path | None) -> str | None:
    """Why ``path`` cannot take a chart (checked before a replay of minutes, not after), or None."""
    if path is None:
        return None
    if path.suffix.lower() not in FORMATS:
        return f"--chart {path}: give a {', '.join(FORMATS)} file"
    if not path.parent.is_dir():
        return f"--chart {path}: no folder {path.parent}"
    return None


def save(fig: Figure, path: Path, salt: str) -> None:
    """Write ``fig`` to ``path``: inline-ready SVG for .svg, else whatever matplotlib makes of the suffix."""
    with chart_style(salt):
        if path.suffix.lower() == ".svg":
            path.write_text(to_svg(fig) + "\n", encoding="utf-8")
        else:
            fig.savefig(path, dpi=120, bbox_inches="tight")


def _minutes(values: np.ndarray) -> pd.Series:
    return pd.Series(values, index=pd.to_datetime(np.arange(values.size) * 60, unit="s"))


def replay_figure(arrival_s: np.ndarray, results: Mapping[str, tuple[np.ndarray, np.ndarray]], objective_s: float,
                  title: str, events: Mapping[str, float] | None = None) -> Figure:
    """Three panels over the trace's time (from 0): requests/s per minute; GPUs held per policy (bucket
    maxima); % of each hour's requests (5 minutes' on traces under 12 h) whose TTFT exceeds ``objective_s``,
    per policy.

    ``results``: policy → (GPU-equivalents held per minute, TTFT of each request in arrival order; inf: never
    served). ``events``: label → seconds from the start (a policy's change of shape), a dashed line through
    the three panels, labelled on the GPUs', so a step in GPUs or misses can be told from a change of shape."""
    fig = Figure(figsize=(WIDTH_IN, 7.2))
    demand_ax, gpu_ax, miss_ax = fig.subplots(3, 1, sharex=True, gridspec_kw={"height_ratios": [1, 1.4, 1]})
    minute = (arrival_s // 60).astype(np.int64)
    per_min = np.bincount(minute, minlength=int(minute.max()) + 1 if minute.size else 1) / 60.0
    t, v = downsample(_minutes(per_min), "max", MAX_POINTS)
    demand_ax.plot(t, v, color="#495057", linewidth=0.8)
    demand_ax.set_ylabel("requests/s\n(minute, bucket max)")
    demand_ax.set_title(title, loc="left", fontsize=10)
    bin_s = 3600 if arrival_s.size and arrival_s[-1] > 12 * 3600 else 300  # hours, or 5 minutes on short traces
    binned = (arrival_s // bin_s).astype(np.int64)
    n_bins = int(binned.max()) + 1 if binned.size else 1
    requests = np.bincount(binned, minlength=n_bins)
    starts = pd.to_datetime(np.arange(n_bins) * bin_s, unit="s")
    for name, (gpus, ttft) in results.items():
        color = POLICY_COLORS.get(name, "#343a40")
        t, v = downsample(_minutes(gpus), "max", MAX_POINTS)
        gpu_ax.plot(t, v, color=color, linewidth=0.9, label=name, drawstyle="steps-post")
        over = np.bincount(binned, weights=(ttft > objective_s).astype("float64"), minlength=n_bins)
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.where(requests > 0, 100.0 * over / requests, np.nan)
        miss_ax.plot(starts, share, color=color, linewidth=0.9, marker=".", markersize=2)
    marks = []
    for label, at_s in (events or {}).items():
        when = pd.to_datetime(at_s, unit="s")
        for ax in (demand_ax, gpu_ax, miss_ax):
            ax.axvline(when, color="#343a40", linewidth=0.8, linestyle="--")
        marks.append(gpu_ax.annotate(label, (when, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -10),
                                     textcoords="offset points", fontsize=7, color="#343a40"))
    gpu_ax.set_yscale("symlog", linthresh=1.0)  # a thrashing policy's hundred GPUs beside ours' one or two
    gpu_ax.set_ylim(bottom=0)  # a policy at zero would otherwise open a negative half-decade
    gpu_ax.yaxis.set_major_formatter(FuncFormatter(_plain))  # the style keeps text literal: no mathtext 10^n
    gpu_ax.set_ylabel("GPUs held (minute,\nbucket max; log above 1)")
    gpu_ax.legend(loc="upper left", ncols=len(results), fontsize=8, bbox_to_anchor=(0, 1.02, 1, 0.1))
    miss_ax.set_ylabel(f"% of each {'hour' if bin_s == 3600 else '5 minutes'}'s\nrequests over "
                       f"{objective_s:g} s TTFT")
    miss_ax.set_xlabel("time from the trace's start (day hh:mm)")
    miss_ax.xaxis.set_major_formatter(FuncFormatter(_day_tick))
    fig.align_ylabels()
    fig.subplots_adjust(left=0.1, right=0.98, top=0.95, bottom=0.08, hspace=0.25)
    if marks:  # moves close together: each label one line lower than the last, or on the line's left
        place_labels(fig, marks, [(3, -10 - 9 * i) for i in range(4)] + [(-3, -10 - 9 * i) for i in range(4)],
                     avoid=[gpu_ax.get_legend()])
    keep_ticks_inside(fig)  # the last time tick sits at the figure's right edge
    return fig


def _plain(x: float, _pos: int | None = None) -> str:
    return f"{x:g}"


def _day_tick(x: float, _pos: int | None = None) -> str:
    """A tick as day and time since the trace's start (its timestamps start at matplotlib's date epoch)."""
    day, rest = divmod(round(x * 86_400), 86_400)
    return f"d{day} {rest // 3600:02d}:{rest % 3600 // 60:02d}"


@dataclass(frozen=True)
class ClientPoint:
    """One client's replay for the sweep chart: GPU-hours and % over the objective per policy."""

    client: str
    rows: Mapping[str, tuple[float, float]]  # policy → (GPU-hours, % of requests over the objective)
    unavoidable_pct: float = 0.0


def sweep_points(clients: Sequence[ClientPoint], policy: str) -> list[tuple[str, float, float]]:
    """(client, GPU-hours as % of static peak's, points over the objective beyond the unavoidable) for
    ``policy``, on the clients where both it and static peak ran."""
    out = []
    for c in clients:
        if policy in c.rows and "static-peak" in c.rows and c.rows["static-peak"][0] > 0:
            gpu, over = c.rows[policy]
            out.append((c.client, 100.0 * gpu / c.rows["static-peak"][0], max(0.0, over - c.unavoidable_pct)))
    return out


def sweep_figure(clients: Sequence[ClientPoint], policies: Sequence[str] = ("ours", "reactive", "oracle")
                 ) -> Figure:
    """Each client as a point per policy: x = GPU-hours as % of static peak's, y = points over the objective
    (symlog: 0 to 1 linear, then logarithmic). The goal's box (x <= 50, y <= 1) is shaded; the reactive part
    of the goal (15% under reactive) is not drawn: it binds only where the other two do (README)."""
    fig = Figure(figsize=(WIDTH_IN * 0.7, 5.0))
    ax = fig.subplots()
    ax.fill_between([0, GOAL_SAVING_PCT], 0, GOAL_OVER_PCT, color="#2b8a3e", alpha=0.12, linewidth=0,
                    label=f"goal: <= {GOAL_SAVING_PCT:g}% of static peak, <= {GOAL_OVER_PCT:g} point over")
    top = GOAL_OVER_PCT * 2
    right = 100.0
    names: list[Annotation] = []
    for policy in policies:
        pts = sweep_points(clients, policy)
        if not pts:
            continue
        xs, ys = [p[1] for p in pts], [p[2] for p in pts]
        top, right = max(top, *ys), max(right, *xs)
        ax.scatter(xs, ys, s=28, color=POLICY_COLORS.get(policy, "#343a40"), label=policy, zorder=3)
        if policy == "ours":
            names = [ax.annotate(name.removeprefix("chunk-"), (x, y), xytext=(4, 3), textcoords="offset points",
                                 fontsize=7, color=POLICY_COLORS["ours"]) for name, x, y in pts]
    ax.set_yscale("symlog", linthresh=GOAL_OVER_PCT)
    ax.yaxis.set_major_formatter(FuncFormatter(_plain))
    ax.set_xlim(0, right * 1.05)
    ax.set_ylim(0, top * 1.3)
    ax.set_xlabel("GPU-hours, % of static peak's")
    ax.set_ylabel("points of requests over the TTFT objective\n(beyond the unavoidable)")
    # above the axes, where no client's point can be: inside, any corner may hold data
    legend = ax.legend(loc="lower left", bbox_to_anchor=(0, 1.01), ncols=2, fontsize=8, frameon=False)
    fig.subplots_adjust(left=0.14, right=0.97, top=0.88, bottom=0.11)
    place_labels(fig, names, LABEL_OFFSETS, avoid=[legend])  # clients close together: a name beside, or none
    keep_ticks_inside(fig)
    return fig
