"""``forecast_series``: the one call the pipeline and the CLI make per series.

Clean, choose a model by backtest, predict, then widen the band for what the history lacked: VPA
style, a short history (under two days) widens it by ``2 days / history`` (capped at x5) and filled
gaps by ``1 + filled share``. Each widening and each repair comes back as a reason.

Series finer than 10 minutes (a 60 s Prometheus step: 1,440 points a day) are modelled on 10-minute
means and each forecast value is held over its 10 minutes: seasonal models over 1,440-point seasons
cost seconds a series, and demand planned a day ahead does not need minute detail.

A caller that forecasts the same series every few minutes (the controller, the replay's ``ours``) may carry
the last ``ModelChoice`` into ``forecast_with_choice``: while it is younger than ``reselect_s`` and the
series is modelled at the same step and horizon, only the chosen model is fitted again (the backtests over
every candidate are about half the cost). The choice is an explicit input and output: nothing is kept here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from recommender.analysis.forecast.auto import AutoForecaster
from recommender.analysis.forecast.base import Forecaster, ModelFitError, NotEnoughHistory, check_levels, widen
from recommender.analysis.forecast.clean import clean_series, coarsen
from recommender.analysis.forecast.seasonality import DAY_S, candidate_periods
from recommender.core.plan import Forecast

FULL_HISTORY_DAYS = 2  # this much history or more: no widening for length
MAX_WIDENING = 5.0
MODEL_STEP_S = 600.0  # finer series are modelled at (about) this step


@dataclass(frozen=True)
class ModelChoice:
    """The model a backtest chose for one series, to be fitted again on later history without a new backtest.

    ``template`` is unfitted (a frozen ETS keeps its parameters) and is only ever cloned. ``chosen_at`` is
    the last point of the history it was chosen on; ``step_s`` (s) and ``horizon`` (steps) are those the
    series was modelled at; ``reasons`` are the selection's own (what was chosen, on what evidence).
    """

    template: Forecaster
    chosen_at: pd.Timestamp
    step_s: float
    horizon: int
    reasons: tuple[str, ...]
    backtest_smape: float | None
    backtest_mase: float | None


def forecast_series(y: pd.Series, horizon: int, levels: Iterable[int] = (80, 95), metric: str = "") -> Forecast:
    """Forecast ``horizon`` steps of ``y`` (float series on a DatetimeIndex, any regularity).

    Raises ``NotEnoughHistory`` (one line) when fewer than 3 finite points remain after cleaning.
    ``metric`` only labels the result (a canonical name from ``recommender.core.usage``, or KV_TOKENS).
    """
    return forecast_with_choice(y, horizon, levels, metric)[0]


def forecast_with_choice(y: pd.Series, horizon: int, levels: Iterable[int] = (80, 95), metric: str = "",
                         previous: ModelChoice | None = None, reselect_s: float = 0.0) -> tuple[Forecast, ModelChoice]:
    """``forecast_series``, and the model choice it used; ``previous`` is reused while it is younger than
    ``reselect_s`` (s, by the history's last point) and the series is modelled at the same step and horizon.

    Without ``previous`` (or ``reselect_s`` 0) the forecast is ``forecast_series``'s. A reused model that
    no longer fits the history is dropped and the model chosen again.
    """
    if horizon < 1:
        raise ValueError(f"horizon must be at least 1 step, got {horizon}")
    lv = check_levels(levels)
    cleaned = clean_series(y)
    values = cleaned.y.to_numpy(dtype="float64")
    k = _coarsening(values.size, cleaned.step_s)
    series = coarsen(cleaned.y, k) if k > 1 else cleaned.y
    model_h = -(-horizon // k)
    step_s = k * cleaned.step_s
    age = None if previous is None else (series.index[-1] - previous.chosen_at).total_seconds()
    fitted = _refitted(previous, series, step_s, model_h, age is not None and 0 <= age < reselect_s)
    if fitted is not None and previous is not None and age is not None:
        choice = previous
        kept = (f"{fitted.label} refitted without a new backtest: chosen {age / 60:.0f} min before the last point "
                f"(chosen again every {reselect_s / 60:g} min)")
        model_reasons = [*previous.reasons[:1], kept, *previous.reasons[1:]]
    else:
        auto = AutoForecaster(model_h).fit(series)
        fitted = auto.chosen_
        choice = ModelChoice(auto.template_, series.index[-1], step_s, model_h, tuple(auto.reasons_),
                             auto.backtest_smape_, auto.backtest_mase_)
        model_reasons = list(auto.reasons_)
    factor, why = _widening(values.size, cleaned.step_s, cleaned.filled_frac)
    frame = widen(fitted.predict(model_h, lv), factor)
    if k > 1:
        frame = _held(frame, k, horizon, pd.DatetimeIndex(cleaned.y.index))
        why.append(f"modelled on {k * cleaned.step_s / 60:g}-minute means ({k} steps of {cleaned.step_s:g} s): "
                   "each value holds for that long")
    notes = [*model_reasons, *cleaned.reasons, *why, *_flat_note(values)]
    forecast = Forecast(metric=metric, model=fitted.label, frame=frame, reasons=tuple(notes),
                        backtest_smape=choice.backtest_smape, backtest_mase=choice.backtest_mase)
    return forecast, choice


def _refitted(previous: ModelChoice | None, series: pd.Series, step_s: float, horizon: int,
              young: bool) -> Forecaster | None:
    """``previous``' model fitted on ``series`` when it may be reused (``young``: chosen under ``reselect_s``
    before the series' last point, and at the same step and horizon); None: choose again."""
    if previous is None or not young or previous.step_s != step_s or previous.horizon != horizon:
        return None
    try:
        return previous.template.clone().fit(series)
    except (ModelFitError, NotEnoughHistory):
        return None


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
