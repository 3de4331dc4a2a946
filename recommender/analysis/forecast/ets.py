"""Holt-Winters (additive ETS) from statsmodels, made fast enough and quiet enough for a fleet.

Speed: it fits on the last ``fit_seasons`` seasons only, with heuristic initial states (so only the
smoothing parameters are optimised) and at most ``maxiter`` optimiser iterations: about 10-20 ms on
a week of 10-minute points. ``frozen()`` keeps the learned parameters, and a frozen model answers a
whole backtest from one filter pass (``origin_forecasts``) instead of re-optimising at each origin.
Quiet: statsmodels' warnings never reach
the user; a ConvergenceWarning or a non-finite forecast becomes a ``ModelFitError`` with one line,
and the auto forecaster falls back with that line as the reason.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from recommender.analysis.forecast.base import Band, FloatArray, Forecaster, ModelFitError, residual_bands

NONSEASONAL_WINDOW = 288  # points a non-seasonal fit looks back (fit_seasons x this)


def preload() -> None:
    """Import what a fit imports (statsmodels' Holt-Winters, with scipy), now: a process about to fork a copy that
    fits hands the modules over instead of each importing them (a report's forked forecasts,
    ``recommender.pipeline.aside``)."""
    import statsmodels.tsa.holtwinters  # noqa: F401
    from statsmodels.tools import sm_exceptions  # noqa: F401


class HoltWinters(Forecaster):
    """Additive seasonal exponential smoothing, ETS(A,N,A) or with ``trend="add"`` ETS(A,Ad,A).

    ``season_length=None`` drops the season: simple exponential smoothing, ETS(A,N,N), for series
    with no daily rhythm or too short to hold two days.

    ``params`` (alpha, beta, gamma, phi) fixes the smoothing parameters instead of estimating them.
    Band: quantiles of the one-step residuals x the ETS h-step standard-deviation factor
    ``sqrt(1 + sum_{j<h} c_j^2)``, ``c_j = alpha + alpha beta (phi + ... + phi^j) + gamma [j % m == 0]``
    (Hyndman et al. 2008, class 1), so it widens with the horizon and at each new season.
    """

    name = "HoltWinters"

    def __init__(self, season_length: int | None, trend: str | None = None, fit_seasons: int = 7, maxiter: int = 40,
                 params: tuple[float, float, float, float] | None = None) -> None:
        self.season_length = season_length
        self.trend = trend
        self.fit_seasons = fit_seasons
        self.maxiter = maxiter
        self.params = params

    @property
    def min_points(self) -> int:
        return 2 * self.season_length if self.season_length else 4

    def frozen(self) -> HoltWinters:
        """An unfitted copy that reuses the learned parameters: refitting only re-runs the filter."""
        args = self.get_params() | {"params": self.params_}
        return HoltWinters(**args)

    def _fit(self, y: FloatArray) -> None:
        y = y[-self.fit_seasons * (self.season_length or NONSEASONAL_WINDOW):]
        result = self._quiet_estimate(y)
        fitted = np.asarray(result.fittedvalues, dtype="float64")
        if not np.isfinite(fitted).all():
            raise ModelFitError("Holt-Winters gave non-finite fitted values")
        p = result.params
        phi = p.get("damping_trend", 1.0)
        alpha, beta, gamma, phi = (float(0.0 if v is None or not np.isfinite(v) else v) for v in (
            p["smoothing_level"], p.get("smoothing_trend", 0.0), p.get("smoothing_seasonal", 0.0), phi))
        self.params_: tuple[float, float, float, float] = (alpha, beta, gamma, phi)
        self.result_ = result
        self.residuals_ = y - fitted
        self.fitted_ = fitted

    def origin_forecasts(self, y: pd.Series, positions: Sequence[int], h: int) -> list[FloatArray] | None:
        """Backtest forecasts at every origin from one filter pass, for a frozen seasonal model.

        With the parameters fixed, the states at an origin depend only on the data before it, so one
        pass over the history up to the last origin gives each origin's forecast: the level there
        plus the latest seasonal state of each slot (Hyndman & Athanasopoulos, 8.3). One statsmodels
        run instead of one per origin. Other configurations return None (refit per origin).
        """
        m = self.season_length
        if self.params is None or self.trend is not None or not m:
            return None
        start = max(0, positions[0] - self.fit_seasons * m)
        if positions[0] - start < self.min_points:
            return None
        result = self._quiet_estimate(y.to_numpy(dtype="float64")[start: positions[-1]])
        level, season = np.asarray(result.level), np.asarray(result.season)
        slots = np.arange(h) % m
        return [np.maximum(level[p - start - 1] + season[p - start - m + slots], 0.0) for p in positions]

    def _quiet_estimate(self, y: FloatArray) -> Any:
        """statsmodels' fit with its warnings caught: non-convergence or bad input is a ModelFitError."""
        with warnings.catch_warnings(record=True) as caught, np.errstate(all="ignore"):
            warnings.simplefilter("always")
            try:
                result = self._estimate(y)
            except (ValueError, np.linalg.LinAlgError) as exc:
                raise ModelFitError(f"Holt-Winters could not be fit: {str(exc).splitlines()[0]}") from None
        from statsmodels.tools.sm_exceptions import ConvergenceWarning

        if any(issubclass(w.category, ConvergenceWarning) for w in caught):
            raise ModelFitError(f"Holt-Winters did not converge in {self.maxiter} iterations")
        return result

    def _estimate(self, y: FloatArray) -> Any:  # statsmodels' HoltWintersResults (untyped)
        from statsmodels.tsa.holtwinters import ExponentialSmoothing  # here: statsmodels takes ~0.4 s to import,
        # and a report whose forecasts are all remembered fits none

        m = self.season_length
        model = ExponentialSmoothing(y, trend=self.trend, damped_trend=self.trend is not None,
                                     seasonal="add" if m else None, seasonal_periods=m,
                                     initialization_method="heuristic" if m else "estimated")
        if self.params is None:
            return model.fit(minimize_kwargs={"options": {"maxiter": self.maxiter}})
        alpha, beta, gamma, phi = self.params
        trend = {"smoothing_trend": beta, "damping_trend": phi} if self.trend else {}
        season = {"smoothing_seasonal": gamma} if m else {}
        return model.fit(smoothing_level=alpha, optimized=False, **season, **trend)

    def _predict(self, h: int, levels: tuple[int, ...]) -> tuple[FloatArray, dict[int, Band]]:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            mean = np.asarray(self.result_.forecast(h), dtype="float64")
        if not np.isfinite(mean).all():
            raise ModelFitError("Holt-Winters gave a non-finite forecast")
        growth = ets_sd_factor(h, *self.params_, self.season_length or h + 1)
        return mean, residual_bands(mean, self.residuals_, self.fitted_, growth, levels)


def ets_sd_factor(h: int, alpha: float, beta: float, gamma: float, phi: float, m: int) -> FloatArray:
    """h-step / one-step forecast standard deviation of additive ETS, for steps 1..h (see the class doc)."""
    j = np.arange(1, h, dtype="float64")
    damp = np.cumsum(phi ** j) if beta else np.zeros_like(j)
    c = alpha + alpha * beta * damp + gamma * (j % m == 0)
    return np.sqrt(1.0 + np.concatenate([[0.0], np.cumsum(c**2)]))
