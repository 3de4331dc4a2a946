"""One workload's replicas under its scaling plan, for the HTML report.

The reader sees what the autoscaling estimate is made of, on the shape the plan is for (the recommended one:
``scaling.mean_replicas_right_sized`` where it has a figure, else ``mean_replicas``): the request rate as
replicas at the plan's target (unrounded), the replicas the autoscaler would have held (whole pods, started
one cold start ahead, held through the scale-down window) and today's fixed count. Drawn from the series the
pipeline made with the same pure function that made the estimate (``Advice.replicas``), so they cannot differ.
"""

from __future__ import annotations

import matplotlib.dates as mdates
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from recommender.core.plan import Recommendation
from recommender.core.usage import Snapshot
from recommender.outputs import charts
from recommender.outputs.charts import COLORS, LEFT_IN, RIGHT_IN, WIDTH_IN

HEIGHT_IN, TOP_IN, BOTTOM_IN = 2.2, 0.35, 0.5


def replica_figure(rec: Recommendation, snapshot: Snapshot | None) -> Figure | None:
    """None when there is nothing to draw: no snapshot, no scaling plan with a mean, or no request rate."""
    plan, series = rec.scaling, rec.advice.replicas
    if snapshot is None or plan is None or plan.mean_on_shape is None or series is None:
        return None
    held, demand = series.held, series.demand
    fig = Figure(figsize=(WIDTH_IN, HEIGHT_IN))
    ax = fig.add_axes((LEFT_IN / WIDTH_IN, BOTTOM_IN / HEIGHT_IN, 1 - (LEFT_IN + RIGHT_IN) / WIDTH_IN,
                       1 - (TOP_IN + BOTTOM_IN) / HEIGHT_IN))
    times, values = charts.downsample(demand, "max")
    ax.plot(times, values, color=COLORS["use"], linewidth=0.8, label=f"demand / target ({plan.target_per_replica:.3g})")
    times, values = charts.downsample(held, "max")
    ax.step(times, values, where="post", color=COLORS["rec"], linewidth=1.3,
            label=f"autoscaled{f' on {plan.shape}' if plan.shape else ''} (mean ≥ {plan.mean_on_shape:.2f})")
    today = rec.workload.allocation.replicas
    ax.axhline(today, color=COLORS["held"], linestyle="--", linewidth=1.3, label=f"today ({today})")
    ax.set_ylim(0, max(float(held.max()), today, float(demand.max(skipna=True) or 0.0)) * 1.1 or 1.0)
    ax.yaxis.set_major_locator(MaxNLocator(nbins=5, integer=True))  # "auto" put 10 labels on its 1.35 in
    locator = mdates.AutoDateLocator(minticks=3, maxticks=10)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    ax.margins(x=0)
    ax.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncols=3, fontsize=8, borderaxespad=0.2)
    return fig


def replica_chart(rec: Recommendation, snapshot: Snapshot | None, salt: str) -> str | None:
    """The replica chart of one workload as inline SVG, or None (see :func:`replica_figure`)."""
    with charts.chart_style(salt):
        fig = replica_figure(rec, snapshot)
        return charts.to_svg(fig) if fig is not None else None
