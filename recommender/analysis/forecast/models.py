"""The simple models: naive, seasonal naive (the floor), seasonal median, and TSB for intermittent demand.

Each is a few lines of numpy, fits in well under a millisecond on two weeks of 10-minute points, and
is honest about its band: from its own in-sample errors (naive, seasonal naive), from what the same
slot did on other days (seasonal median) or from the demand mixture (TSB). Holt-Winters lives in
``ets.py``.
"""

from __future__ import annotations

import numpy as np

from recommender.analysis.forecast.base import Band, FloatArray, Forecaster, ModelFitError, residual_bands


class Naive(Forecaster):
    """Tomorrow looks like the last value: the fallback for short or non-seasonal series.

    Band: quantiles of the one-step changes, widened by sqrt(h) (a random walk's error grows so).
    """

    name = "Naive"

    def _fit(self, y: FloatArray) -> None:
        self.last_ = float(y[-1])
        self.residuals_ = np.diff(y)
        self.fitted_ = y[:-1]

    def _predict(self, h: int, levels: tuple[int, ...]) -> tuple[FloatArray, dict[int, Band]]:
        mean = np.full(h, self.last_)
        return mean, residual_bands(mean, self.residuals_, self.fitted_, np.sqrt(np.arange(1, h + 1)), levels)


class SeasonalNaive(Forecaster):
    """Repeat the last season (``season_length`` points): the floor every other model must beat.

    Band: quantiles of the in-sample seasonal differences, widened by sqrt(1 + whole seasons ahead).
    """

    name = "SeasonalNaive"

    def __init__(self, season_length: int) -> None:
        self.season_length = season_length

    @property
    def min_points(self) -> int:
        return self.season_length + 1

    def _fit(self, y: FloatArray) -> None:
        m = self.season_length
        self.last_season_ = y[-m:].copy()
        self.residuals_ = y[m:] - y[:-m]
        self.fitted_ = y[:-m]

    def _predict(self, h: int, levels: tuple[int, ...]) -> tuple[FloatArray, dict[int, Band]]:
        mean = np.resize(self.last_season_, h)
        growth = np.sqrt(1.0 + np.arange(h) // self.season_length)
        return mean, residual_bands(mean, self.residuals_, self.fitted_, growth, levels)


class SeasonalMedian(Forecaster):
    """Each slot's weighted median over the last ``n_seasons`` seasons, recent seasons weighing more.

    Robust where seasonal naive is noisy: one odd day (an outage, a burst) does not move a median,
    and for intermittent demand a slot that is usually idle forecasts 0. Weights fall by ``decay``
    per season back. Band: weighted quantiles of the same slot and its two neighbours on those
    seasons, so it follows the daily rhythm of the spread too.
    """

    name = "SeasonalMedian"

    def __init__(self, season_length: int, n_seasons: int = 10, decay: float = 0.8) -> None:
        self.season_length = season_length
        self.n_seasons = n_seasons
        self.decay = decay

    @property
    def min_points(self) -> int:
        return 2 * self.season_length

    def _fit(self, y: FloatArray) -> None:
        m = self.season_length
        k = min(self.n_seasons, y.size // m)
        cycles = y[y.size - k * m:].reshape(k, m)
        self.weights_ = self.decay ** np.arange(k - 1, -1, -1, dtype="float64")
        self.profile_ = weighted_quantile(cycles, self.weights_, 0.5)
        self.cycles_ = cycles

    def _predict(self, h: int, levels: tuple[int, ...]) -> tuple[FloatArray, dict[int, Band]]:
        out: dict[int, Band] = {}
        if not levels:
            return np.resize(self.profile_, h), out
        pooled = np.concatenate([np.roll(self.cycles_, s, axis=1) for s in (-1, 0, 1)])
        weights = np.tile(self.weights_, 3)
        for lv in levels:
            tail = (100 - lv) / 200
            lo = weighted_quantile(pooled, weights, tail)
            hi = weighted_quantile(pooled, weights, 1 - tail)
            out[lv] = (np.resize(lo, h), np.resize(hi, h))
        return np.resize(self.profile_, h), out


class TSB(Forecaster):
    """Teunter-Syntetos-Babai intermittent demand: smoothed demand probability x smoothed demand size.

    Unlike Croston, the probability decays in every idle step, so a client that went quiet stops
    being forecast. The predictive distribution is a mixture: 0 with probability 1 - p, else a size
    drawn from the recent non-zero values rescaled to the smoothed size. ``point`` picks what
    ``mean`` reports: ``"mean"`` (p x size, expected demand) or ``"median"`` of the mixture (0 when
    p < 1/2), which is what absolute-error metrics (MASE, sMAPE) reward. Bands are mixture quantiles.
    """

    name = "TSB"

    def __init__(self, alpha_d: float = 0.1, alpha_p: float = 0.05, point: str = "mean") -> None:
        self.alpha_d = alpha_d
        self.alpha_p = alpha_p
        self.point = point

    def _fit(self, y: FloatArray) -> None:
        if self.point not in ("mean", "median"):
            raise ValueError(f"point must be 'mean' or 'median', got {self.point!r}")
        nonzero = y[y > 0]
        if nonzero.size == 0:
            self.prob_, self.size_, self.sizes_ = 0.0, 0.0, np.zeros(1)
            return
        self.prob_, self.size_ = tsb_smooth(y, self.alpha_d, self.alpha_p)
        recent = nonzero[-200:]
        self.sizes_ = np.sort(recent / recent.mean())  # shape of the size distribution, mean 1

    def _predict(self, h: int, levels: tuple[int, ...]) -> tuple[FloatArray, dict[int, Band]]:
        point = self.prob_ * self.size_ if self.point == "mean" else self._quantile(0.5)
        out = {lv: (np.full(h, self._quantile((100 - lv) / 200)), np.full(h, self._quantile((100 + lv) / 200)))
               for lv in levels}
        return np.full(h, point), out

    def _quantile(self, q: float) -> float:
        """Quantile of the mixture: 0 below the idle probability, else a rescaled size quantile."""
        idle = 1.0 - self.prob_
        if q <= idle or self.prob_ == 0.0:
            return 0.0
        return float(np.quantile(self.sizes_, (q - idle) / self.prob_)) * self.size_


def tsb_smooth(y: FloatArray, alpha_d: float, alpha_p: float) -> tuple[float, float]:
    """Final (probability, size) of the TSB recursions, started from the first quarter's averages.

    Both are exponential smoothing, so the final state is a closed-form weighted sum (no loop):
    ``s_n = (1 - a)^n s_0 + sum_t a (1 - a)^(n - t) x_t``; the size only updates on non-zero steps.
    """
    active = (y > 0).astype("float64")
    head = active[: max(y.size // 4, 1)]
    sizes = y[y > 0]
    prob0 = float(head.mean()) if head.any() else float(active.mean())
    size0 = float(sizes[: max(int(head.sum()), 1)].mean())
    prob = exp_smooth_last(active, alpha_p, prob0)
    size = exp_smooth_last(sizes, alpha_d, size0)
    if not np.isfinite(prob * size):
        raise ModelFitError("TSB smoothing gave a non-finite forecast")
    return prob, size


def exp_smooth_last(x: FloatArray, alpha: float, start: float) -> float:
    """Last state of ``s_t = s_(t-1) + alpha (x_t - s_(t-1))`` from ``s_0 = start``."""
    n = x.size
    decay = (1.0 - alpha) ** np.arange(n - 1, -1, -1, dtype="float64")
    return float((1.0 - alpha) ** n * start + alpha * np.dot(decay, x))


def weighted_quantile(values: FloatArray, weights: FloatArray, q: float) -> FloatArray:
    """Per column of ``values`` (rows = seasons), the weighted ``q`` quantile (inverse CDF, no blending)."""
    order = np.argsort(values, axis=0, kind="stable")
    ranked = np.take_along_axis(values, order, axis=0)
    cum = np.cumsum(weights[order], axis=0) / weights.sum()
    idx = np.minimum((cum < q - 1e-12).sum(axis=0), values.shape[0] - 1)
    return ranked[idx, np.arange(values.shape[1])]
