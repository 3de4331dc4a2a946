"""Recurring-burst floor: replicas kept ahead of a rise the request rate showed at this time of day before. A
service whose load starts from idle at the same time every day (a job at 02:00, a schedule at 10:00, 12:00
and 14:00) finds one replica at each start, and no causal step serves the minutes before its new replicas are
ready; a forecast fitted to the whole series smooths a ten-minute window away. The days before show it: the
floor is the replicas for the rate seen over the next ``ahead_s`` at this time of day on at least
``min_days`` of the last ``days`` days (the ``min_days``-th largest of those days' peaks there), so one day's
burst does not warm the next and a schedule that stops leaves the floor within the history. Read from the
request rate (demand the floor does not change). Rates in req/s, times in seconds. Pure: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from policies.replicas.counts import replicas_for
from policies.replicas.history import ReplicaHistory

DAY_S = 86_400


@dataclass(frozen=True)
class RecurringFloor:
    """Replicas to keep at least until the next plan (0: none), the rate they are for (req/s), and why."""

    replicas: int
    rate: float
    reason: str


def recurring_floor(history: ReplicaHistory, target_rps: float, ahead_s: float, days: int = 7,
                    min_days: int = 2) -> RecurringFloor | None:
    """The floor for the ``ahead_s`` after the history's end from the same stretch of the ``days`` days before
    (:func:`day_peaks`); None without a dated rate or fewer than ``min_days`` days with one."""
    rate = history.request_rate_per_s
    if rate is None or target_rps <= 0 or ahead_s <= 0 or not isinstance(rate.index, pd.DatetimeIndex) \
            or not len(rate):
        return None
    now = rate.index[-1] + pd.Timedelta(seconds=history.step_s)
    peaks = day_peaks(rate, now, ahead_s, days)
    if peaks.size < min_days:
        return None
    seen = float(np.sort(peaks)[::-1][min_days - 1])
    n = replicas_for(seen, target_rps)
    if n <= 1:
        return RecurringFloor(n, seen, "")
    return RecurringFloor(n, seen, (
        f"recurring-burst floor {n} replica(s): {seen:.3g} req/s came in the next {ahead_s / 60:g} min at this time "
        f"of day on {int((peaks >= seen).sum())} of the last {peaks.size} days"))


def day_peaks(rate: pd.Series, now: pd.Timestamp, ahead_s: float, days: int) -> np.ndarray:
    """The largest finite rate in [now - d days, now - d days + ``ahead_s``) for each d of 1..``days`` whose
    stretch holds one (days before the history or with no finite step are left out)."""
    values, index = rate.to_numpy(dtype="float64"), rate.index
    out = []
    for d in range(1, days + 1):
        start = now - pd.Timedelta(seconds=d * DAY_S)
        lo, hi = index.searchsorted(start), index.searchsorted(start + pd.Timedelta(seconds=ahead_s))
        part = values[lo:hi]
        part = part[np.isfinite(part)]
        if part.size:
            out.append(float(part.max()))
    return np.array(out)


def ahead_of(interval_s: float, wake_s: float) -> float:
    """How far ahead a plan's floor must reach: until the next plan (``interval_s``) and the wake that readies
    its replicas."""
    return float(math.ceil(interval_s + wake_s))
