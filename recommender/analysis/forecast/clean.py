"""Make a raw series forecastable: one value per regular step, finite, non-negative, with reasons.

Exported metrics arrive with duplicate timestamps (two scrapes in one step), gaps (a scrape failed,
a pod restarted), negative rates (a counter artefact) and NaN. Models want none of that, and the
user wants to know what was changed, so every repair adds a one-line reason and the share of
invented points, which widens the band later.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from recommender.analysis.forecast.base import NotEnoughHistory
from recommender.analysis.forecast.seasonality import candidate_periods

MIN_POINTS = 3  # fewer finite points than this: no forecast at all
SHORT_GAP_POINTS = 3  # gaps up to this many steps are interpolated linearly


@dataclass(frozen=True)
class CleanSeries:
    """A series on a regular UTC grid with no NaN, what was repaired, and how much was invented."""

    y: pd.Series
    step_s: float
    reasons: tuple[str, ...]
    filled_frac: float  # share of points that were missing and filled in


def clean_series(y: pd.Series, step_s: float | None = None) -> CleanSeries:
    """Regular, finite, non-negative version of ``y``; raises NotEnoughHistory with one line."""
    s, reasons = _indexed(y)
    s = s[np.isfinite(s.to_numpy(dtype="float64"))]
    dup = int(s.index.duplicated().sum())
    if dup:
        s = s.groupby(level=0).mean()
        reasons.append(f"{dup} duplicate timestamp(s): values averaged")
    if len(s) < MIN_POINTS:
        raise NotEnoughHistory(f"{len(s)} finite point(s) of history; a forecast needs at least {MIN_POINTS}")
    step = step_s or _median_step_s(s.index)
    grid = _regular(s, step)
    neg = int((grid < 0).sum())
    if neg:
        grid = grid.clip(lower=0.0)
        reasons.append(f"{neg} negative value(s) set to 0: demand is never negative")
    grid, filled, fill_reasons = _fill_gaps(grid, step)
    return CleanSeries(grid, step, (*reasons, *fill_reasons), filled / len(grid))


def coarsen(y: pd.Series, k: int) -> pd.Series:
    """Means of ``k`` consecutive points, bins anchored at the end (the last bin ends on the last point).

    A leading partial bin is dropped; each mean is stamped with its bin's last timestamp, so the
    coarse series ends where ``y`` does and its forecast starts right after.
    """
    n = len(y) // k * k
    values = y.to_numpy(dtype="float64")[len(y) - n:].reshape(-1, k).mean(axis=1)
    return pd.Series(values, index=y.index[len(y) - n + k - 1:: k], name=y.name)


def _indexed(y: pd.Series) -> tuple[pd.Series, list[str]]:
    """Float series on a sorted UTC DatetimeIndex (naive times are taken as UTC)."""
    if not isinstance(y.index, pd.DatetimeIndex):
        raise TypeError("the series needs a DatetimeIndex (timestamps), got " + type(y.index).__name__)
    s = pd.Series(pd.to_numeric(y, errors="coerce").to_numpy(dtype="float64"), index=y.index, name=y.name)
    idx = pd.DatetimeIndex(s.index)
    s.index = idx.tz_localize("UTC") if idx.tz is None else idx.tz_convert("UTC")
    reasons = [] if s.index.is_monotonic_increasing else ["timestamps were out of order: sorted"]
    return s.sort_index(kind="stable"), reasons


def _median_step_s(index: pd.DatetimeIndex) -> float:
    unique = index.unique().sort_values()
    return float(np.median((unique[1:] - unique[:-1]).total_seconds()))


def _regular(s: pd.Series, step_s: float) -> pd.Series:
    """Values binned onto a grid starting at the first timestamp (off-grid points join their bin)."""
    step = pd.Timedelta(seconds=step_s)
    out = s.resample(step, origin=s.index[0]).mean()
    return pd.Series(out.to_numpy(dtype="float64"), index=pd.DatetimeIndex(out.index), name=s.name)


def _fill_gaps(y: pd.Series, step_s: float) -> tuple[pd.Series, int, list[str]]:
    """Interpolate short gaps; fill long ones from the same time on other days, else linearly."""
    missing = y.isna().to_numpy()
    if not missing.any():
        return y, 0, []
    runs = _nan_runs(missing)
    longest = max(b - a for a, b in runs)
    filled = y.interpolate(limit_area="inside")
    long_runs = [(a, b) for a, b in runs if b - a > SHORT_GAP_POINTS]
    daily, _ = candidate_periods(step_s)
    how = "interpolated"
    if long_runs and daily is not None and len(y) >= 2 * daily:
        filled = _fill_from_days(y, filled, long_runs, daily)
        how = "short ones interpolated, long ones filled from the same time on other days"
    gap_s = longest * step_s
    reason = f"{int(missing.sum())} missing step(s) in {len(runs)} gap(s), the longest {_human(gap_s)}: {how}"
    return filled, int(missing.sum()), [reason]


def _fill_from_days(raw: pd.Series, filled: pd.Series, runs: list[tuple[int, int]], daily: int) -> pd.Series:
    """Long gaps take the median of the same slot on the days that have it (interpolation elsewhere)."""
    values = raw.to_numpy(dtype="float64")
    days = np.concatenate([values, np.full(-values.size % daily, np.nan)]).reshape(-1, daily)
    seen = np.isfinite(days).any(axis=0)
    slot_median = np.full(daily, np.nan)
    slot_median[seen] = np.nanmedian(days[:, seen], axis=0)
    out = filled.to_numpy(dtype="float64").copy()
    for a, b in runs:
        idx = np.arange(a, b)
        med = slot_median[idx % daily]
        out[idx[np.isfinite(med)]] = med[np.isfinite(med)]
    return pd.Series(out, index=filled.index, name=filled.name)


def _nan_runs(missing: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) of each run of True."""
    edges = np.diff(np.concatenate([[0], missing.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist(), strict=True))


def _human(seconds: float) -> str:
    if seconds >= 86_400:
        return f"{seconds / 86_400:.1f} d"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min"
