"""The estimator API every forecaster follows, and the prediction-band helpers they share.

scikit-learn / statsforecast style: hyper-parameters only in ``__init__``; ``fit(y)`` learns from a
float series on a regular UTC DatetimeIndex and returns ``self``; learned state ends in ``_``;
``predict(h, level=(80, 95))`` returns a frame on the future index with ``mean`` (the point
forecast) and one ``lo_<l>`` / ``hi_<l>`` pair per level. Demand is never negative, so every bound is
clipped at 0, and the bands are nested: ``lo_95 <= lo_80 <= mean <= hi_80 <= hi_95``.
"""

from __future__ import annotations

import functools
import inspect
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from statistics import NormalDist
from typing import Any, ClassVar, Self

import numpy as np
import numpy.typing as npt
import pandas as pd

from recommender.core.errors import RightsizerError

FloatArray = npt.NDArray[np.float64]
Band = tuple[FloatArray, FloatArray]  # (lo, hi) per horizon step
MIN_RESIDUALS_EMPIRICAL = 30  # fewer residuals than this: normal quantiles from their RMS instead
LEVEL_BINS = 4  # residual quantiles are taken per quartile of the fitted level (see residual_bands)
MIN_RESIDUALS_PER_BIN = 100  # a bin with fewer takes the pooled quantiles (2.5 residuals in a 95% tail)


class NotEnoughHistory(RightsizerError, ValueError):
    """Too little history for any forecast; the message is one line saying how much there was."""


class ModelFitError(RightsizerError, RuntimeError):
    """A model could not be fit (did not converge, degenerate data); the auto forecaster falls back."""


def level_columns(levels: Iterable[int]) -> list[str]:
    """``mean`` then ``lo_<l>, hi_<l>`` per level, in the order given."""
    return ["mean", *(f"{side}_{lv}" for lv in levels for side in ("lo", "hi"))]


def upper_band(frame: pd.DataFrame, wanted: str | None = None) -> str:
    """The column to size capacity from: ``wanted`` when the forecast has it, else the upper bound of its
    widest interval (``hi_95`` by default), else ``mean`` for a forecast without intervals."""
    if wanted is not None and wanted in frame.columns:
        return wanted
    return max((str(c) for c in frame.columns if str(c).startswith("hi_")), default="mean", key=lambda c: int(c[3:]))


def check_levels(level: Iterable[float]) -> tuple[int, ...]:
    """Levels as sorted unique integers in (0, 100): a column name must be exact (``lo_80``)."""
    given = tuple(level)
    values = sorted({float(lv) for lv in given})
    if not values or any(not 0 < v < 100 or v != int(v) for v in values):
        raise ValueError(f"levels must be whole percentages between 0 and 100, got {given}")
    return tuple(int(v) for v in values)


def future_index(index: pd.DatetimeIndex, step: pd.Timedelta, h: int) -> pd.DatetimeIndex:
    """The ``h`` timestamps after ``index[-1]``, one ``step`` apart, in UTC."""
    return pd.date_range(index[-1] + step, periods=h, freq=step, tz="UTC", name=index.name)


@functools.cache
def _init_names(cls: type) -> tuple[str, ...]:
    """The names ``cls.__init__`` takes by name (read once per class: clones are made per backtest origin)."""
    params = inspect.signature(cls.__init__).parameters.values()  # type: ignore[misc]
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return tuple(p.name for p in params if p.name != "self" and p.kind in kinds)


class Forecaster(ABC):
    """Base of every model: validation, cloning and the frame; subclasses fill ``_fit``/``_predict``."""

    name: ClassVar[str] = "forecaster"

    @property
    def label(self) -> str:
        """Short name for reports: the class and its season, e.g. ``SeasonalNaive(144)``."""
        season = getattr(self, "season_length", None)
        return f"{self.name}({season})" if season else self.name

    @property
    def min_points(self) -> int:
        """Fewest points ``fit`` accepts (a seasonal model needs its season and more)."""
        return 2

    @abstractmethod
    def _fit(self, y: FloatArray) -> None:
        """Learn from finite values (oldest first); raise NotEnoughHistory / ModelFitError."""

    @abstractmethod
    def _predict(self, h: int, levels: tuple[int, ...]) -> tuple[FloatArray, dict[int, Band]]:
        """Point forecast and raw (lo, hi) per level; ``predict`` clips and nests them."""

    def get_params(self) -> dict[str, Any]:
        """The ``__init__`` arguments, as scikit-learn's ``get_params`` (no learned state)."""
        return {name: getattr(self, name) for name in _init_names(type(self))}

    def clone(self) -> Self:
        """A new unfitted model with the same hyper-parameters."""
        return type(self)(**self.get_params())

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    def fit(self, y: pd.Series) -> Self:
        """Learn from ``y`` (finite floats on a regular UTC DatetimeIndex) and return ``self``."""
        values, index, step = _validated(y)
        if values.size < self.min_points:
            raise NotEnoughHistory(f"{values.size} points of history; {self.label} needs at least {self.min_points}")
        self.index_, self.step_ = index, step
        self.n_points_ = int(values.size)
        self._fit(values)
        return self

    def frozen(self) -> Forecaster:
        """An unfitted copy that keeps what is expensive to learn (ETS parameters), for cheap backtests.

        Models with nothing expensive to learn return a plain clone.
        """
        return self.clone()

    def origin_forecasts(self, y: pd.Series, positions: Sequence[int], h: int) -> list[FloatArray] | None:
        """Point forecasts at several backtest origins in one go, when a fitted-and-frozen model can.

        None (the default) means: refit at each origin. ``y`` holds the whole series; an origin's
        forecast may use only ``y[:position]``.
        """
        return None

    def predict_mean(self, h: int) -> FloatArray:
        """The point forecast only, clipped at 0 and without bands: the fast path for backtests."""
        self._check_fitted(h)
        return np.maximum(np.nan_to_num(self._predict(h, ())[0]), 0.0)

    def _check_fitted(self, h: int) -> None:
        if not hasattr(self, "index_"):
            raise RuntimeError(f"{type(self).__name__} is not fitted: call fit(y) first")
        if h < 1:
            raise ValueError(f"horizon must be at least 1 step, got {h}")

    def predict(self, h: int, level: Iterable[float] = (80, 95)) -> pd.DataFrame:
        """Mean and nested, non-negative bands for the next ``h`` steps after the fitted series."""
        self._check_fitted(h)
        levels = check_levels(level)
        mean, bands = self._predict(h, levels)
        return band_frame(future_index(self.index_, self.step_, h), mean, bands, levels)


def band_frame(index: pd.DatetimeIndex, mean: FloatArray, bands: Mapping[int, Band],
               levels: tuple[int, ...]) -> pd.DataFrame:
    """The forecast frame: clipped at 0 and nested, so a wider level never gives a narrower band."""
    mean = np.maximum(np.nan_to_num(np.asarray(mean, dtype="float64")), 0.0)
    cols: dict[str, FloatArray] = {"mean": mean}
    lo_prev, hi_prev = mean, mean
    for lv in levels:
        lo, hi = bands[lv]
        lo_prev = np.maximum(np.minimum(np.nan_to_num(lo), lo_prev), 0.0)
        hi_prev = np.maximum(np.nan_to_num(hi, nan=np.inf, posinf=np.inf), hi_prev)
        cols[f"lo_{lv}"], cols[f"hi_{lv}"] = lo_prev, hi_prev
    return pd.DataFrame(cols, index=index)[level_columns(levels)]


def residual_bands(mean: FloatArray, residuals: FloatArray, fitted: FloatArray, growth: FloatArray,
                   levels: tuple[int, ...]) -> dict[int, Band]:
    """Bands from in-sample residuals: their empirical quantiles (normal ones when few), x ``growth``.

    The quantiles are taken among the residuals whose fitted value was at the level of the forecast
    (its quartile of the fitted values, ``LEVEL_BINS``): demand counts spread more where they are
    high, so one pooled quantile is too narrow at the peak and too wide in the trough, where a burst seen
    once would hold its width over every quiet hour (benchmarks/REPLAY.md § Measurements behind the
    defaults). Bins short of
    ``MIN_RESIDUALS_PER_BIN`` use the pooled quantiles. ``growth[i]`` is how much wider the error is
    ``i + 1`` steps ahead than one step ahead (sqrt of the model's h-step variance factor), so the
    band widens with the horizon.
    """
    ok = np.isfinite(residuals) & np.isfinite(fitted)
    res, fit = residuals[ok], fitted[ok]
    edges = np.unique(np.quantile(fit, np.linspace(0, 1, LEVEL_BINS + 1)[1:-1])) if res.size else np.zeros(0)
    bin_of_fit = np.searchsorted(edges, fit, side="right")
    bins = [res[bin_of_fit == b] for b in range(edges.size + 1)]
    bin_of_mean = np.searchsorted(edges, mean, side="right")
    out: dict[int, Band] = {}
    for lv in levels:
        pooled = _quantiles(res, lv)
        q = np.array([_quantiles(b, lv) if b.size >= MIN_RESIDUALS_PER_BIN else pooled for b in bins]).reshape(-1, 2)
        out[lv] = (mean + q[bin_of_mean, 0] * growth, mean + q[bin_of_mean, 1] * growth)
    return out


def _quantiles(res: FloatArray, level: int) -> tuple[float, float]:
    tail = (100 - level) / 200
    if res.size >= MIN_RESIDUALS_EMPIRICAL:
        lo, hi = np.quantile(res, [tail, 1 - tail])
        return float(lo), float(hi)
    sd = float(np.sqrt(np.mean(res**2))) if res.size else 0.0
    z = NormalDist().inv_cdf(1 - tail)
    return -z * sd, z * sd


def widen(frame: pd.DataFrame, factor: float) -> pd.DataFrame:
    """The same forecast with every band's distance from the mean times ``factor`` (lo clipped at 0)."""
    if factor == 1.0:
        return frame
    out = frame.copy()
    for col in frame.columns:
        if col != "mean":
            out[col] = np.maximum(frame["mean"] + (frame[col] - frame["mean"]) * factor, 0.0)
    return out


def _validated(y: pd.Series) -> tuple[FloatArray, pd.DatetimeIndex, pd.Timedelta]:
    if not isinstance(y, pd.Series) or not isinstance(y.index, pd.DatetimeIndex):
        raise TypeError("y must be a pandas Series on a DatetimeIndex")
    values = y.to_numpy(dtype="float64")
    if not np.isfinite(values).all():
        raise ValueError("y holds NaN or infinite values: clean it first (recommender.analysis.forecast.clean_series)")
    index = y.index.tz_localize("UTC") if y.index.tz is None else y.index.tz_convert("UTC")
    if len(index) < 2:
        raise NotEnoughHistory(f"{len(index)} point(s) of history; a forecast needs at least 2 to know the step")
    steps = np.diff(index.asi8)  # in the index's own unit: only compared, never converted
    if (steps != steps[0]).any() or steps[0] <= 0:
        raise ValueError("y is not on a regular, increasing time index: clean it first (clean_series)")
    return values, index, index[1] - index[0]
