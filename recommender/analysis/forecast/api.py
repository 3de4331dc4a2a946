"""``forecast_series``: the one call the pipeline and the CLI make per series.

Clean, choose a model by backtest, predict, then widen the band for what the history lacked: VPA
style, a short history (under two days) widens it by ``2 days / history`` (capped at x5) and filled
gaps by ``1 + filled share``. Each widening and each repair comes back as a reason.

Series finer than 10 minutes (a 60 s Prometheus step: 1,440 points a day) are modelled on 10-minute
means and each forecast value is held over its 10 minutes: seasonal models over 1,440-point seasons
cost seconds a series, and demand planned a day ahead does not need minute detail.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from recommender.analysis.forecast.auto import AutoForecaster
from recommender.analysis.forecast.base import check_levels, widen
from recommender.analysis.forecast.clean import clean_series, coarsen
from recommender.analysis.forecast.seasonality import DAY_S, candidate_periods
from recommender.core.plan import Forecast

FULL_HISTORY_DAYS = 2  # this much history or more: no widening for length
MAX_WIDENING = 5.0
MODEL_STEP_S = 600.0  # finer series are modelled at (about) this step


def forecast_series(y: pd.Series, horizon: int, levels: Iterable[int] = (80, 95), metric: str = "") -> Forecast:
    """Forecast ``horizon`` steps of ``y`` (float series on a DatetimeIndex, any regularity).

    Raises ``NotEnoughHistory`` (one line) when fewer than 3 finite points remain after cleaning.
    ``metric`` only labels the result (a canonical name from ``recommender.core.usage``, or KV_TOKENS).
    """
    if horizon < 1:
        raise ValueError(f"horizon must be at least 1 step, got {horizon}")
    lv = check_levels(levels)
    cleaned = clean_series(y)
    values = cleaned.y.to_numpy(dtype="float64")
    k = _coarsening(values.size, cleaned.step_s)
    auto = AutoForecaster(-(-horizon // k)).fit(coarsen(cleaned.y, k) if k > 1 else cleaned.y)
    factor, why = _widening(values.size, cleaned.step_s, cleaned.filled_frac)
    frame = widen(auto.predict(auto.horizon, lv), factor)
    if k > 1:
        frame = _held(frame, k, horizon, pd.DatetimeIndex(cleaned.y.index))
        why.append(f"modelled on {k * cleaned.step_s / 60:g}-minute means ({k} steps of {cleaned.step_s:g} s): "
                   "each value holds for that long")
    notes = [*auto.reasons_, *cleaned.reasons, *why, *_flat_note(values)]
    return Forecast(metric=metric, model=auto.label, frame=frame, reasons=tuple(notes),
                    backtest_smape=auto.backtest_smape_, backtest_mase=auto.backtest_mase_)


def _coarsening(n_points: int, step_s: float) -> int:
    """How many steps to average into one for modelling: 1 unless finer than 10 minutes with 2 days of it."""
    k = max(1, round(MODEL_STEP_S / step_s))
    return k if k > 1 and n_points // k >= FULL_HISTORY_DAYS * DAY_S / (k * step_s) else 1


def _held(frame: pd.DataFrame, k: int, horizon: int, history: pd.DatetimeIndex) -> pd.DataFrame:
    """The coarse forecast back on the series' own step: each value repeated over its ``k`` steps."""
    step = history[1] - history[0]
    index = pd.date_range(history[-1] + step, periods=horizon, freq=step, tz="UTC")
    return pd.DataFrame(np.repeat(frame.to_numpy(), k, axis=0)[:horizon], index=index, columns=frame.columns)


def _widening(n_points: int, step_s: float, filled_frac: float) -> tuple[float, list[str]]:
    """Band factor for short history and filled gaps, and the reasons for it."""
    factor, why = 1.0, []
    daily, _ = candidate_periods(step_s)
    full = FULL_HISTORY_DAYS * (daily or 2)
    if n_points < full:
        short = min(full / n_points, MAX_WIDENING)
        factor *= short
        why.append(f"only {n_points * step_s / 3600:.1f} h of history (under {FULL_HISTORY_DAYS} days, no daily "
                   f"season): band widened x{short:.1f}")
    if filled_frac > 0:
        factor *= 1.0 + filled_frac
        why.append(f"{filled_frac:.0%} of the history was filled in: band widened x{1 + filled_frac:.2f}")
    return factor, why


def _flat_note(values: np.ndarray) -> list[str]:
    if np.all(values == values[0]):
        return [f"all {values.size} points are {values[0]:g}: nothing varies, so the band has no width"]
    return []
