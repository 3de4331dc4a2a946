"""The aligned grid of one Prometheus collection: its points on multiples of the step (so repeated runs and
chunks line up), the range of ``*_over_time`` and ``rate()`` at that step, and the coarser step of the
inventory queries (about ``INVENTORY_POINTS`` points over the window).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from collectors.prometheus import chunks
from collectors.prometheus.chunks import Chunk, Grid
from recommender.core.settings_sources import PrometheusSettings

INVENTORY_POINTS = 336  # coarse inventory series: hourly over 14 days


@dataclass(frozen=True)
class Window:
    """The aligned query grid of one collection, and the coarse step of the inventory queries."""

    grid: Grid
    window_s: int  # range of *_over_time and rate(): one step, at least two scrapes
    coarse: Chunk  # the whole window at the inventory step

    @property
    def fine(self) -> Chunk:
        g = self.grid
        return Chunk(g.start_s, g.start_s + (g.n - 1) * g.step_s, g.step_s)


def window_for(start: datetime, end: datetime, p: PrometheusSettings) -> Window:
    """Grid points on multiples of the step, so repeated runs and chunks line up.

    Example: 14 d ending 12:34:56 at step 600 s → last point 12:30:00, first 14 d later + 600 s, 2,016 points.
    """
    history_s = (end - start).total_seconds()
    step = chunks.step_for(history_s, p)
    last = math.floor(end.timestamp() / step) * step
    n = max(1, int(history_s // step))
    first = last - (n - 1) * step
    coarse_step = max(step, math.ceil(history_s / INVENTORY_POINTS / step) * step)
    coarse_first = last - math.floor((last - first) / coarse_step) * coarse_step
    return Window(Grid(first, step, n), chunks.rate_window_s(step, p), Chunk(coarse_first, last, coarse_step))
