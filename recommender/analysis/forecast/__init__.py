"""Demand forecasts: estimator-style models, a backtest that chooses between them, and one entry point.

    from recommender.analysis.forecast import forecast_series
    fc = forecast_series(y, horizon=144)          # -> recommender.core.plan.Forecast
    fc.frame[["mean", "lo_80", "hi_80"]], fc.model, fc.reasons

``mean`` is the point forecast. For the median-type models (SeasonalMedian, TSB with
``point="median"``, which the auto forecaster uses) it is the predictive median, what sMAPE and MASE
reward; for capacity read the ``hi_<level>`` bounds. Everything here is pure except ``csvio``.
"""

from recommender.analysis.forecast.api import ModelChoice, forecast_series, forecast_with_choice
from recommender.analysis.forecast.auto import AutoForecaster, default_candidates
from recommender.analysis.forecast.backtest import backtest, origin_positions
from recommender.analysis.forecast.base import Forecaster, ModelFitError, NotEnoughHistory, level_columns, upper_band
from recommender.analysis.forecast.clean import CleanSeries, clean_series
from recommender.analysis.forecast.ets import HoltWinters, preload
from recommender.analysis.forecast.metrics import mase, smape
from recommender.analysis.forecast.models import TSB, Naive, SeasonalMedian, SeasonalNaive
from recommender.analysis.forecast.seasonality import Seasonality, detect_seasonality, seasonal_strength

__all__ = [
    "TSB",
    "AutoForecaster",
    "CleanSeries",
    "Forecaster",
    "HoltWinters",
    "ModelChoice",
    "ModelFitError",
    "Naive",
    "NotEnoughHistory",
    "SeasonalMedian",
    "SeasonalNaive",
    "Seasonality",
    "backtest",
    "clean_series",
    "default_candidates",
    "detect_seasonality",
    "forecast_series",
    "forecast_with_choice",
    "level_columns",
    "mase",
    "origin_positions",
    "preload",
    "seasonal_strength",
    "smape",
    "upper_band",
]
