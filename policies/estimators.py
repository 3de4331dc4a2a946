"""Small composable estimators, VPA style: each turns features into a Bound, wrappers adjust it.

``with_margin(0.15, percentile(0.99))`` reads as what it does. Bounds: lower from the median,
target from the percentile, upper from the peak widened while history is short.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from recommender.analysis.features import Quantiles
from recommender.core.plan import Bound

DAY_S = 86_400.0
Estimator = Callable[[Quantiles], Bound]


def percentile(q: float) -> Estimator:
    """lower = median, target = q-th percentile, upper = observed peak."""

    def estimate(x: Quantiles) -> Bound:
        return Bound(lower=x.p50, target=x.at(q), upper=max(x.max, x.at(q)))

    return estimate


def with_margin(frac: float, inner: Estimator) -> Estimator:
    """Scale all three by (1 + frac): headroom for what the window did not show."""

    def estimate(x: Quantiles) -> Bound:
        b = inner(x)
        return Bound(b.lower * (1 + frac), b.target * (1 + frac), b.upper * (1 + frac))

    return estimate


def with_min(floor: float, inner: Estimator) -> Estimator:
    """No bound below ``floor`` (e.g. one max-length sequence's memory)."""

    def estimate(x: Quantiles) -> Bound:
        b = inner(x)
        return Bound(max(b.lower, floor), max(b.target, floor), max(b.upper, floor))

    return estimate


def confidence_multiplier(history_s: float) -> float:
    """VPA's widening of the upper bound: 12 h of history x3, 24 h x2, a week x1.14."""
    days = max(history_s / DAY_S, 1e-3)
    return 1.0 + 1.0 / days


def with_confidence(history_s: float, inner: Estimator) -> Estimator:
    """Widen the upper bound while history is short."""

    def estimate(x: Quantiles) -> Bound:
        b = inner(x)
        return replace(b, upper=b.upper * confidence_multiplier(history_s))

    return estimate


def _unit(x: float) -> float:
    return max(0.0, min(1.0, x))


def history_factor(history_s: float, full_history_s: float) -> float:
    """Linear in history up to ``full_history_s`` (a week by default), then 1: monotone, and a day of a week's
    worth earns 1/7."""
    return _unit(history_s / full_history_s)


def coverage_factor(coverage_frac: float) -> float:
    """The share of steps in the history that have data: gaps are evidence not seen."""
    return _unit(coverage_frac)


def quality_factor(usable_frac: float) -> float:
    """The share of the sizing metrics' samples the data-quality stage kept (recommender.analysis.quality): data thrown
    away as impossible says the rest may be wrong too."""
    return _unit(usable_frac)


def band_factor(band: Bound | None) -> float:
    """target / upper: an upper bound twice the target halves the confidence (a need that may be double what
    it was sized for); 1 without a band or with none above the target, 0 for a zero target under a positive
    upper bound."""
    if band is None or band.upper <= band.target:
        return 1.0
    return _unit(band.target / band.upper) if band.target > 0 else 0.0


def confidence(history_s: float, coverage_frac: float, full_history_s: float, usable_frac: float = 1.0,
               band: Bound | None = None) -> float:
    """0-1, the product of :func:`history_factor`, :func:`coverage_factor`, :func:`quality_factor` and
    :func:`band_factor` (of the memory need, what the placement is sized on), to three decimals."""
    product = (history_factor(history_s, full_history_s) * coverage_factor(coverage_frac)
               * quality_factor(usable_frac) * band_factor(band))
    return round(product, 3)
