"""Demand to size replicas for, in requests/s: the forecast's upper band by class (real-time ``hi_95``,
near-real-time ``hi_80``, batch ``mean``), else the observed peak / p95 / mean. Without a forecast the floor is
the peak of the last ``no_forecast_floor_window_s`` for real-time (bursts seen recently stay covered until the
daily pattern is known) and the quietest observed step for the others (the HPA follows demand above it); why
each was chosen over the alternatives is in benchmarks/REPLAY.md. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from policies.replicas.estimates import Absent, Demand
from recommender.analysis.features import last_window
from recommender.analysis.forecast import upper_band
from recommender.core import usage as m
from recommender.core.plan import Forecast, WorkloadClass
from recommender.core.settings import ScalingSettings

BAND_BY_CLASS = {WorkloadClass.REAL_TIME: "hi_95", WorkloadClass.NEAR_REAL_TIME: "hi_80", WorkloadClass.BATCH: "mean"}
OBSERVED_BY_CLASS = {WorkloadClass.REAL_TIME: 1.0, WorkloadClass.NEAR_REAL_TIME: 0.95, WorkloadClass.BATCH: -1.0}


def demand_to_size(cls: WorkloadClass, forecasts: Sequence[Forecast], rate: pd.Series | None,
                   floor_window_s: float = math.inf) -> Demand | Absent:
    """Peak, trough and observed max request rates and reasons: the forecast band by class, else observed.

    Without a forecast, real-time's trough (the floor) is the peak of the last ``floor_window_s`` of history.
    """
    observed = np.array([]) if rate is None else rate.to_numpy(dtype="float64")
    observed = observed[np.isfinite(observed)]
    observed_max = float(observed.max()) if observed.size else 0.0
    fc = rate_forecast(forecasts)
    if fc is not None:
        column = upper_band(fc.frame, BAND_BY_CLASS[cls])
        band = fc.frame[column].clip(lower=0.0).to_numpy(dtype="float64")
        if np.isfinite(band).any():
            peak, trough = float(np.nanmax(band)), float(np.nanmin(band))
            return Demand(peak, trough, observed_max, (f"demand {peak:.3g} req/s: peak of the forecast's {column} "
                                                       f"({fc.model}) for {cls.value}",))
    if not observed.size:
        return Absent("no request-rate history and no request-rate forecast: no demand to size replicas for")
    return _observed(cls, observed, rate, floor_window_s)


def _observed(cls: WorkloadClass, observed: np.ndarray, rate: pd.Series | None, floor_window_s: float) -> Demand:
    """Demand from the observed rates (finite, non-empty) where no forecast is acted on."""
    observed_max = float(observed.max())
    q = OBSERVED_BY_CLASS[cls]
    peak = float(observed.mean()) if q < 0 else float(np.quantile(observed, q))
    what = "mean" if q < 0 else ("peak" if q >= 1 else f"p{q * 100:g}")
    if cls is WorkloadClass.REAL_TIME:  # no forecast yet: a burst would find a floor below the peak too late
        recent = peak if rate is None else _recent_peak(rate, floor_window_s, otherwise=peak)
        return Demand(peak, recent, observed_max, (f"demand {peak:.3g} req/s: observed {what} for {cls.value} (no "
                                                   f"forecast); floor {recent:.3g} req/s: the peak of the last "
                                                   f"{floor_window_s / 3600:g} h until a forecast exists",))
    trough = min(peak, float(observed.min()))  # the floor: the quietest step, the HPA follows demand above it
    return Demand(peak, trough, observed_max, (f"demand {peak:.3g} req/s: observed {what} for {cls.value} (no "
                                               f"forecast); floor {trough:.3g} req/s: the quietest step seen",))


def band_above_mean(cls: WorkloadClass, forecasts: Sequence[Forecast]) -> float:
    """The least the request-rate forecast's band for ``cls`` lies above its mean over the horizon (req/s, at
    least 0): what the external scaler serves above the expected rate at every step ahead; 0 without a forecast
    or a band (batch sizes on the mean)."""
    fc = rate_forecast(forecasts)
    if fc is None:
        return 0.0
    column = upper_band(fc.frame, BAND_BY_CLASS[cls])
    if column == "mean" or "mean" not in fc.frame.columns:
        return 0.0
    gap = (fc.frame[column].clip(lower=0.0) - fc.frame["mean"].clip(lower=0.0)).to_numpy(dtype="float64")
    gap = gap[np.isfinite(gap)]
    return max(0.0, float(gap.min())) if gap.size else 0.0


def forecasts_to_act_on(forecasts: Sequence[Forecast], span_s: float, settings: ScalingSettings
                        ) -> tuple[Sequence[Forecast], list[str]]:
    """The forecasts a plan sizes on, and why none: a request-rate forecast on under
    ``min_forecast_history_s`` of history has its band widened for the season it cannot see yet, and
    replicas following it held far more than the observed floor does in the replay (REPLAY.md)."""
    if rate_forecast(forecasts) is None or span_s >= settings.min_forecast_history_s:
        return forecasts, []
    return (), [f"request-rate forecast not acted on yet: {span_s / 3600:.3g} h of history, under the "
                f"{settings.min_forecast_history_s / 3600:.3g} h it needs (scaling.min_forecast_history_s; its band is "
                "widened until then): sized on the observed rate"]


def rate_forecast(forecasts: Sequence[Forecast]) -> Forecast | None:
    """The first non-empty request-rate forecast, or None."""
    return next((f for f in forecasts if f.metric == m.REQUEST_RATE and not f.frame.empty), None)


def _recent_peak(rate: pd.Series, window_s: float, otherwise: float) -> float:
    """Largest finite value in the last ``window_s`` of the series (its index: timestamps); ``otherwise`` when
    nothing is known lately (a lost metric must not drop the floor)."""
    values = last_window(rate.to_frame(), window_s).to_numpy(dtype="float64").ravel()
    values = values[np.isfinite(values)]
    return float(values.max()) if values.size else otherwise
