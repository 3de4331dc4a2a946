"""Features: the shape of each workload's usage, reduced from its series to a few typed numbers.

Everything downstream (policies, report) reads these instead of raw series, so the maths is tested
on small frames. Percentiles ignore NaN; a feature with no data is None, never NaN.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pandas as pd

from recommender.analysis.shape import longest_run
from recommender.core import usage as m
from recommender.core.inventory import Workload
from recommender.core.usage import Snapshot


@dataclass(frozen=True)
class Quantiles:
    p50: float
    p95: float
    p99: float
    max: float
    mean: float

    def at(self, q: float) -> float:
        """Value at quantile q, interpolated on the stored points (0.5, 0.95, 0.99, 1.0)."""
        points = [(0.5, self.p50), (0.95, self.p95), (0.99, self.p99), (1.0, self.max)]
        if q <= 0.5:
            return self.p50
        for (q0, v0), (q1, v1) in itertools.pairwise(points):
            if q <= q1:
                return v0 + (v1 - v0) * (q - q0) / (q1 - q0)
        return self.max


def quantiles(series: pd.Series | None) -> Quantiles | None:
    """Quantiles of the finite values, or None when there are none."""
    if series is None:
        return None
    values = series.to_numpy(dtype="float64")
    values = values[np.isfinite(values)]
    if values.size == 0:
        return None
    p50, p95, p99 = np.quantile(values, [0.5, 0.95, 0.99])
    return Quantiles(float(p50), float(p95), float(p99), float(values.max()), float(values.mean()))


@dataclass(frozen=True)
class WorkloadFeatures:
    """Usage features of one workload over the window."""

    history_s: float  # span between first and last step with any GPU or vLLM data
    coverage_frac: float  # share of steps in that span that have data
    fb_used_mib: Quantiles | None
    fb_total_mib: Quantiles | None
    gr_engine_active_frac: Quantiles | None
    kv_usage_frac: Quantiles | None
    requests_waiting: Quantiles | None
    requests_running: Quantiles | None
    request_rate_per_s: Quantiles | None
    ttft_p95_s: Quantiles | None
    idle_frac: float | None  # share of steps with engine activity <= the idle threshold and no requests
    longest_idle_s: float | None
    # (prompt + generation tokens) / requests over the whole window (arrivals: the finished count to within the
    # queue's change over the window)
    tokens_per_request: float | None = None
    # share of requests over the TTFT objective in the last error-budget window (the collected objective); and in
    # the last such window on the replicas' shape before their current one, where the window still holds it
    ttft_over_objective_frac: float | None = None
    shape_before_over_objective_frac: float | None = None
    # the data-quality stage's verdict (recommender.analysis.quality): the usable share of the metrics the sizing
    # reads, and why no recommendation can be made from what is left (None: enough is)
    usable_frac: float = 1.0
    unusable: str | None = None


def tokens_per_request(snapshot: Snapshot, workload: Workload) -> float | None:
    """Mean tokens a request carries (prompt + output), from the token and request rates summed over
    the window: what one sequence holds in the KV cache on average."""
    rate = snapshot.series(m.REQUEST_RATE, workload.ref)
    if rate is None:
        return None
    tokens = sum((s.fillna(0.0).sum() for metric in (m.PROMPT_TOKENS_RATE, m.GENERATION_TOKENS_RATE)
                  if (s := snapshot.series(metric, workload.ref)) is not None), 0.0)
    requests = float(rate.fillna(0.0).sum())
    return float(tokens / requests) if requests > 0 and tokens > 0 else None


def last_window(data: pd.DataFrame, window_s: float) -> pd.DataFrame:
    """The rows of a time-indexed frame within ``window_s`` of its last one (that far back included); all of it
    for an infinite window or an index without times."""
    if not len(data) or not math.isfinite(window_s) or not isinstance(data.index, pd.DatetimeIndex):
        return data
    return data[data.index >= data.index[-1] - pd.Timedelta(seconds=window_s)]


def split_at(data: pd.DataFrame, when: datetime | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rows of a time-indexed frame before ``when`` and from it on (none before without a time)."""
    if when is None or not isinstance(data.index, pd.DatetimeIndex):
        return data.iloc[:0], data
    at = pd.Timestamp(when)
    if (data.index.tz is None) != (at.tzinfo is None):  # both in UTC, one without saying so
        at = at.tz_localize("UTC") if at.tzinfo is None else at.tz_convert("UTC").tz_localize(None)
    after = data.index >= at
    return data[~after], data[after]


def after_zero(replicas: pd.Series, within_s: float, step_s: float) -> pd.Series:
    """Steps within ``within_s`` of the end of each run at zero replicas, as booleans: the requests that arrived
    at zero and during the cold start get their first token there (``ScalingSettings.wake_s``)."""
    zero = replicas.to_numpy(dtype="float64") == 0
    ends = np.flatnonzero(zero[:-1] & ~zero[1:]) + 1  # the first step after each run at zero
    marked = np.zeros(zero.size, dtype=bool)
    for end in ends:
        marked[end:end + math.ceil(within_s / step_s) + 1] = True
    return pd.Series(marked, index=replicas.index)


def over_objective_share(snapshot: Snapshot, workload: Workload, window_s: float, shape_before: bool = False,
                         wake_s: float | None = None) -> float | None:
    """Requests over the TTFT objective as a share of all requests, over the last ``window_s``, both rates
    summed over the steps where both are known; None without requests or either series. Read across a change
    of shape (``Workload.shape_since``): a new shape's first minutes alone would give a noisy share, and a
    slice's misses still argue for the whole GPUs that replaced it. ``shape_before``: over the last
    ``window_s`` of the steps before the change instead, what the shape before did (None without a change).
    ``wake_s``: the steps within it of a wake from zero (:func:`after_zero` on the serving replicas) are left
    out, as the error budget leaves them out: their requests waited a cold start, which no shape serves."""
    slow = snapshot.series(m.TTFT_OVER_OBJECTIVE_RATE, workload.ref)
    rate = snapshot.series(m.REQUEST_RATE, workload.ref)
    if slow is None or rate is None:
        return None
    both = pd.DataFrame({"slow": slow, "rate": rate}).replace([np.inf, -np.inf], np.nan).dropna()
    replicas = snapshot.series(m.SERVING_REPLICAS, workload.ref) if wake_s is not None else None
    if replicas is not None and wake_s is not None:
        woke = after_zero(replicas, wake_s, snapshot.step_s).reindex(both.index, fill_value=False)
        both = both[~woke.to_numpy(dtype=bool)]
    both = last_window(split_at(both, workload.shape_since)[0] if shape_before else both, window_s)
    total = float(both["rate"].clip(lower=0).sum())
    return min(1.0, float(both["slow"].clip(lower=0).sum()) / total) if total > 0 else None


def _values(snapshot: Snapshot, metric: str, workload: Workload) -> np.ndarray | None:
    """``Snapshot.series`` as a float64 array (None when absent or all-NaN)."""
    s = snapshot.series(metric, workload.ref)
    return None if s is None else s.to_numpy(dtype="float64")


def _presence(snapshot: Snapshot, workload: Workload) -> np.ndarray | None:
    """Boolean per step: does the workload have any usage data at that step."""
    present: np.ndarray | None = None
    for metric in (m.FB_USED_MIB, m.GR_ENGINE_ACTIVE_FRAC, m.KV_USAGE_FRAC, m.REQUESTS_RUNNING):
        v = _values(snapshot, metric, workload)
        if v is not None:
            present = ~np.isnan(v) if present is None else (present | ~np.isnan(v))
    return present


def _history(present: np.ndarray | None, step_s: float) -> tuple[float, float]:
    if present is None or not present.any():
        return 0.0, 0.0
    idx = np.flatnonzero(present)
    span_steps = idx[-1] - idx[0] + 1
    return float(span_steps * step_s), float(idx.size / span_steps)


def idle_mask(snapshot: Snapshot, workload: Workload, idle_frac: float) -> np.ndarray | None:
    """True at steps where the GPU is idle and no request runs or waits, over the steps whose engine activity is
    known (NaN steps are left out; a request count's NaN counts as none)."""
    act = _values(snapshot, m.GR_ENGINE_ACTIVE_FRAC, workload)
    if act is None:
        return None
    idle = act <= idle_frac
    for metric in (m.REQUESTS_RUNNING, m.REQUESTS_WAITING):
        v = _values(snapshot, metric, workload)
        if v is not None:
            idle &= ~(v > 0)  # NaN > 0 is False
    return idle[~np.isnan(act)]


def longest_run_s(mask: pd.Series | np.ndarray, step_s: float) -> float:
    """Longest run of consecutive True values, in seconds."""
    return float(longest_run(np.asarray(mask, dtype=bool)) * step_s)


def workload_features(snapshot: Snapshot, workload: Workload, idle_frac: float = 0.01,
                      budget_window_s: float = math.inf, wake_s: float | None = None) -> WorkloadFeatures:
    """``budget_window_s`` and ``wake_s`` (``ScalingSettings.wake_s``) shape the share over the TTFT objective
    (:func:`over_objective_share`)."""
    ref = workload.ref
    history_s, coverage = _history(_presence(snapshot, workload), snapshot.step_s)
    idle = idle_mask(snapshot, workload, idle_frac)
    has_idle = idle is not None and len(idle) > 0
    return WorkloadFeatures(
        history_s=history_s,
        coverage_frac=coverage,
        fb_used_mib=quantiles(snapshot.series(m.FB_USED_MIB, ref)),
        fb_total_mib=quantiles(snapshot.series(m.FB_TOTAL_MIB, ref)),
        gr_engine_active_frac=quantiles(snapshot.series(m.GR_ENGINE_ACTIVE_FRAC, ref)),
        kv_usage_frac=quantiles(snapshot.series(m.KV_USAGE_FRAC, ref)),
        requests_waiting=quantiles(snapshot.series(m.REQUESTS_WAITING, ref)),
        requests_running=quantiles(snapshot.series(m.REQUESTS_RUNNING, ref)),
        request_rate_per_s=quantiles(snapshot.series(m.REQUEST_RATE, ref)),
        ttft_p95_s=quantiles(snapshot.series(m.TTFT_P95_S, ref)),
        idle_frac=float(idle.mean()) if has_idle and idle is not None else None,
        longest_idle_s=longest_run_s(idle, snapshot.step_s) if has_idle and idle is not None else None,
        tokens_per_request=tokens_per_request(snapshot, workload),
        ttft_over_objective_frac=over_objective_share(snapshot, workload, budget_window_s, wake_s=wake_s),
        shape_before_over_objective_frac=over_objective_share(snapshot, workload, budget_window_s, shape_before=True,
                                                              wake_s=wake_s),
    )


def finite_or_none(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None
