"""Which seasons a series has: candidate periods from its step, and how strong each is.

Candidates come from the step alone (1 day = 86400 / step points, 1 week = 7 days); a period is only
measured when the history holds at least two of its cycles. Strength is the STL-style variance
ratio of Wang, Smith & Hyndman (2006), ``1 - Var(remainder) / Var(seasonal + remainder)``, computed
on cycle-demeaned data (each cycle minus its own mean, so slow level shifts do not count as season)
with the slot means' noise removed: pure noise scores about 0, a clean sine about 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

DAY_S = 86_400.0
WEEK_DAYS = 7
MIN_CYCLES = 2  # cycles of history needed before a period is measured
MIN_STRENGTH = 0.2  # weaker seasons are ignored when choosing models


@dataclass(frozen=True)
class Seasonality:
    """Detected seasons of one series: period lengths in points and their strengths (0-1)."""

    step_s: float
    daily_points: int | None  # None when the step does not divide a day into >= 2 points
    weekly_points: int | None
    daily_strength: float = 0.0  # 0 when not measured (less than two days)
    weekly_strength: float = 0.0  # beyond the daily pattern; 0 when less than two weeks

    @property
    def periods(self) -> tuple[int, ...]:
        """Periods strong enough to model, shortest first."""
        found = [(self.daily_points, self.daily_strength), (self.weekly_points, self.weekly_strength)]
        return tuple(p for p, s in found if p is not None and s >= MIN_STRENGTH)

    @property
    def season_length(self) -> int | None:
        """The period a seasonal model should use: the longest strong one, else None."""
        return self.periods[-1] if self.periods else None


def candidate_periods(step_s: float) -> tuple[int | None, int | None]:
    """Points per day and per week for a step in seconds (None when a day is under two steps)."""
    if step_s <= 0:
        raise ValueError(f"step must be positive, got {step_s} s")
    daily = round(DAY_S / step_s)
    if daily < 2:
        return None, None
    return daily, daily * WEEK_DAYS


def seasonal_profile(y: npt.ArrayLike, period: int) -> tuple[np.ndarray, np.ndarray]:
    """Cycle-demeaned values of the last whole cycles (k x period) and their slot means (period,)."""
    x = np.asarray(y, dtype="float64")
    k = x.size // period
    cycles = x[x.size - k * period:].reshape(k, period)
    demeaned = cycles - np.nanmean(cycles, axis=1, keepdims=True)
    return demeaned, np.nanmean(demeaned, axis=0)


def seasonal_strength(y: npt.ArrayLike, period: int) -> float:
    """Strength (0-1) of a season of ``period`` points over the last whole cycles; 0 if under two."""
    x = np.asarray(y, dtype="float64")
    k = x.size // period
    if period < 2 or k < MIN_CYCLES:
        return 0.0
    demeaned, profile = seasonal_profile(x, period)
    total = float(np.nanvar(demeaned))
    if total == 0.0:
        return 0.0
    remainder = float(np.nanvar(demeaned - profile)) * k / (k - 1)  # slot means fit 1/k of the noise
    return float(np.clip(1.0 - remainder / total, 0.0, 1.0))


def detect_seasonality(y: npt.ArrayLike, step_s: float) -> Seasonality:
    """Daily strength on the series; weekly strength on what the daily profile leaves over."""
    x = np.asarray(y, dtype="float64")
    daily, weekly = candidate_periods(step_s)
    if daily is None or weekly is None:
        return Seasonality(step_s, None, None)
    daily_s = seasonal_strength(x, daily)
    weekly_s = 0.0
    if x.size >= MIN_CYCLES * weekly:
        k = x.size // daily
        tail = x[x.size - k * daily:]
        _, profile = seasonal_profile(tail, daily)
        weekly_s = seasonal_strength(tail - np.tile(profile, k), weekly)
    return Seasonality(step_s, daily, weekly, daily_s, weekly_s)
