"""Forecast error metrics, with the conventions our demand series need spelled out.

Demand is often intermittent (ServeGen: 52-70 % of 10-minute windows are zero), so both metrics
define what happens at zero instead of returning NaN:

- sMAPE of a point is ``200 * |a - f| / (|a| + |f|)`` percent, and **0 when a = f = 0** (a correct
  zero forecast is perfect). A zero forecast of a non-zero actual, or the reverse, costs 200 %.
- MASE is the MAE of the forecast divided by the in-sample MAE of the seasonal naive forecast
  (``y[t] - y[t - m]`` over the training series, Hyndman & Koehler 2006). Below 1: better, on average,
  than repeating the last season. A flat training series has a zero scale: then MASE is 0 when the
  forecast is exact and ``inf`` otherwise (no model beats a perfect scale). When the training series
  is shorter than ``m + 1`` points the scale falls back to ``m = 1`` (naive).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def smape(actual: npt.ArrayLike, forecast: npt.ArrayLike) -> float:
    """Symmetric MAPE in percent (0-200), 0/0 counted as 0; NaN actuals are ignored."""
    a, f = _pair(actual, forecast)
    if a.size == 0:
        return float("nan")
    denom = np.abs(a) + np.abs(f)
    terms = np.divide(2.0 * np.abs(a - f), denom, out=np.zeros_like(denom), where=denom > 0)
    return float(100.0 * terms.mean())


def seasonal_naive_mae(insample: npt.ArrayLike, season_length: int) -> float:
    """In-sample MAE of ``y[t] - y[t - m]``: the MASE scale (m falls back to 1 on short series)."""
    y = np.asarray(insample, dtype="float64")
    y = y[np.isfinite(y)] if np.isnan(y).any() else y
    m = season_length if y.size > season_length else 1
    if y.size <= m:
        return float("nan")
    return float(np.mean(np.abs(y[m:] - y[:-m])))


def mase(actual: npt.ArrayLike, forecast: npt.ArrayLike, insample: npt.ArrayLike, season_length: int) -> float:
    """Mean absolute scaled error: forecast MAE / in-sample seasonal-naive MAE (see the module doc)."""
    a, f = _pair(actual, forecast)
    scale = seasonal_naive_mae(insample, season_length)
    if a.size == 0 or np.isnan(scale):
        return float("nan")
    mae = float(np.mean(np.abs(a - f)))
    if scale == 0.0:
        return 0.0 if mae == 0.0 else float("inf")
    return mae / scale


def mae(actual: npt.ArrayLike, forecast: npt.ArrayLike) -> float:
    """Mean absolute error over the points with a finite actual."""
    a, f = _pair(actual, forecast)
    return float(np.mean(np.abs(a - f))) if a.size else float("nan")


def _pair(actual: npt.ArrayLike, forecast: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    a = np.asarray(actual, dtype="float64")
    f = np.asarray(forecast, dtype="float64")
    if a.shape != f.shape:
        raise ValueError(f"actual has {a.size} points, forecast {f.size}")
    keep = np.isfinite(a)
    return a[keep], f[keep]
