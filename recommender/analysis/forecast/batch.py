"""Forecast many series at once, as the CLI and the benchmark do: skip what cannot be forecast, say why."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pandas as pd

from recommender.analysis.forecast.api import forecast_series
from recommender.analysis.forecast.base import NotEnoughHistory
from recommender.core.plan import Forecast
from recommender.core.progress import NullProgress, Progress

TASK = "forecasting series"


def forecast_many(series: Mapping[str, pd.Series], horizon: int, levels: Iterable[int] = (80, 95),
                  progress: Progress | None = None) -> tuple[list[tuple[str, Forecast]], list[str]]:
    """``(series_id, Forecast)`` for every series that has enough history, and one line per skipped one."""
    progress = progress or NullProgress()
    lv = tuple(levels)
    done: list[tuple[str, Forecast]] = []
    skipped: list[str] = []
    progress.start(TASK, len(series))
    for sid, y in series.items():
        try:
            done.append((sid, forecast_series(y, horizon, lv)))
        except NotEnoughHistory as exc:
            skipped.append(f"series {sid!r} skipped: {exc}")
        progress.advance(TASK)
    return done, skipped
