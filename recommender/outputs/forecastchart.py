"""One workload's demand forecasts for the HTML report: recent history, the forecast mean and its bands.

A panel per forecast metric (requests/s, tokens/s, KV tokens in use), each showing the last few
horizons of history so the reader sees the forecast continue the series, with the 80% and 95% (or the
configured) intervals as nested bands. The chosen model and its backtest error are in the panel title.
"""

from __future__ import annotations

import matplotlib.dates as mdates
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from recommender.analysis.demand import LABELS, demand_series
from recommender.core.plan import Forecast, Recommendation
from recommender.core.usage import Snapshot
from recommender.outputs import charts
from recommender.outputs.charts import COLORS, LEFT_IN, RIGHT_IN, WIDTH_IN

HISTORY_HORIZONS = 3  # history shown: this many forecast horizons back
PANEL_IN, GAP_IN, TOP_IN, BOTTOM_IN = 1.5, 0.55, 0.35, 0.5


def _naive(index: pd.DatetimeIndex) -> pd.DatetimeIndex:
    return index.tz_convert("UTC").tz_localize(None) if index.tz is not None else index


def _title(f: Forecast) -> str:
    err = f" · backtest sMAPE {f.backtest_smape:.0f}%" if f.backtest_smape is not None else ""
    return f"{LABELS.get(f.metric, f.metric)} · {f.model}{err}"


def _draw(ax: Axes, history: pd.Series | None, f: Forecast) -> None:
    frame = f.frame
    when = _naive(pd.DatetimeIndex(frame.index))
    levels = sorted((int(c[3:]) for c in frame.columns if c.startswith("hi_")), reverse=True)
    for i, level in enumerate(levels):  # widest first, so the narrower band sits on top
        ax.fill_between(when, frame[f"lo_{level}"], frame[f"hi_{level}"], color=COLORS["band"],
                        alpha=0.18 + 0.17 * i, linewidth=0, label=f"{level}% interval")
    if history is not None and not history.dropna().empty:
        start = frame.index[0] - HISTORY_HORIZONS * (frame.index[-1] - frame.index[0])
        recent = history[history.index >= start]
        times, values = charts.downsample(recent, "mean")
        ax.plot(times, values, color=COLORS["use"], linewidth=0.9, label="observed")
    ax.plot(when, frame["mean"], color=COLORS["rec"], linewidth=1.3, label="forecast")
    ax.set_title(_title(f), loc="left", fontsize=9)
    ax.set_ylim(bottom=0)
    ax.margins(x=0)
    ax.legend(loc="upper left", ncols=2 + len(levels), fontsize=8)


def forecast_figure(rec: Recommendation, snapshot: Snapshot | None) -> Figure | None:
    """Stacked panels, one per forecast; None when the workload has no forecast."""
    if not rec.forecasts:
        return None
    n = len(rec.forecasts)
    height = n * PANEL_IN + (n - 1) * GAP_IN + TOP_IN + BOTTOM_IN
    fig = Figure(figsize=(WIDTH_IN, height))
    axes = fig.subplots(n, 1, squeeze=False, gridspec_kw={
        "left": LEFT_IN / WIDTH_IN, "right": 1 - RIGHT_IN / WIDTH_IN, "top": 1 - TOP_IN / height,
        "bottom": BOTTOM_IN / height, "hspace": GAP_IN / PANEL_IN})[:, 0]
    for ax, f in zip(axes, rec.forecasts, strict=True):
        history = demand_series(snapshot, rec.workload, f.metric) if snapshot is not None else None
        _draw(ax, history, f)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.3g}"))
        locator = mdates.AutoDateLocator(minticks=3, maxticks=10)
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    return fig


def forecast_chart(rec: Recommendation, snapshot: Snapshot | None, salt: str) -> str | None:
    """The forecast panels of one workload as inline SVG, or None when it has no forecast."""
    with charts.chart_style(salt):
        fig = forecast_figure(rec, snapshot)
        return charts.to_svg(fig) if fig is not None else None
