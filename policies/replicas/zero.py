"""Scale to zero: only when idle gaps are long against the cold start, and for the classes in
``ScalingSettings.scale_to_zero_classes`` (batch by default) or, opted in, for a latency-bound class whose
wakes fit ``wake_budget_frac`` of the TTFT error budget: a request that arrives at zero waits a whole cold
start, and the history tells how many would have. Gaps in seconds, costs as shares (0-1) of requests. Pure.
"""

from __future__ import annotations

import math

import numpy as np

from policies.replicas.cooldown import cooldown_s
from policies.replicas.estimates import ScaleToZero
from policies.replicas.history import ReplicaHistory, clean_rate, history_span_s, idle_runs
from recommender.core.plan import WorkloadClass
from recommender.core.settings import ScalingSettings


def scale_to_zero(cls: WorkloadClass, gaps_s: np.ndarray, cold_start_s: float, settings: ScalingSettings,
                  history: ReplicaHistory, *, forecast: bool) -> ScaleToZero:
    """Whether to scale to zero, and why: most idle time must be in long gaps, and the class must allow it or,
    for a latency-bound class, its wakes must fit ``wake_budget_frac`` of the TTFT error budget
    (:func:`wakes_within_budget`).

    "Typical" gap = the time-weighted median: half of all idle time lies in gaps at least this long.
    """
    long_s = settings.scale_to_zero_idle_multiple * cold_start_s
    allowed = cls.value in settings.scale_to_zero_classes
    frac = settings.wake_budget_frac
    if not allowed and (frac is None or cls is WorkloadClass.BATCH):
        return ScaleToZero(False, f"no scale-to-zero: {cls.value} is not in scale_to_zero_classes (a request at "
                                  f"zero waits a {cold_start_s:g} s cold start)")
    if gaps_s.size == 0:
        return ScaleToZero(False, "no scale-to-zero: no idle gaps in the request history")
    typical = _time_weighted_median(gaps_s)
    gap_why = f"typical idle gap {typical:g} s vs {long_s:g} s ({settings.scale_to_zero_idle_multiple:g} cold " \
              f"starts of {cold_start_s:g} s)"
    if typical < long_s:
        return ScaleToZero(False, f"no scale-to-zero: {gap_why}")
    if allowed:
        return ScaleToZero(True, f"scale to zero: {gap_why}")
    return wakes_within_budget(cls, gaps_s, cold_start_s, settings, history, gap_why, forecast=forecast)


def wakes_within_budget(cls: WorkloadClass, gaps_s: np.ndarray, cold_start_s: float, settings: ScalingSettings,
                        history: ReplicaHistory, gap_why: str, *, forecast: bool) -> ScaleToZero:
    """Scale-to-zero for a latency-bound class opted in by ``wake_budget_frac``: each request that arrives at
    zero waits a cold start, which no headroom serves (:func:`wake_cost`), so its wakes must fit that share of the
    TTFT error budget, and a request-rate ``forecast`` and ``wake_min_history_s`` of history must exist. Without a
    forecast nothing wakes the service ahead of a burst (the activation reads it; the external scaler keeps a
    workload without one active), and going to zero would drop the floor real-time keeps until one exists (the
    last hours' peak); on hours of history one or two gaps decide the wake cost (benchmarks/REPLAY.md)."""
    frac = settings.wake_budget_frac
    assert frac is not None  # not opted in without it: scale_to_zero returned before
    if not forecast:
        return ScaleToZero(False, f"no scale-to-zero for {cls.value} yet: no request-rate forecast to wake it ahead "
                                  "of demand (its wakes are weighed against the error budget once one exists)")
    span_s = history_span_s(history)
    if span_s < settings.wake_min_history_s:
        return ScaleToZero(False, f"no scale-to-zero for {cls.value} yet: {span_s / 3600:.3g} h of request history, "
                                  f"under the {settings.wake_min_history_s / 3600:.3g} h its wakes are weighed on "
                                  "(scaling.wake_min_history_s)")
    wake_s = settings.wake_s(cold_start_s)
    cooldown = cooldown_s(gaps_s, cold_start_s, True, settings).seconds
    cost = wake_cost(history, cooldown, wake_s)
    budget = frac * settings.ttft_error_budget
    if cost is None or cost > budget:
        spent = "no requests to tell" if cost is None else f"{cost:.2%} of requests"
        return ScaleToZero(False, f"no scale-to-zero for {cls.value}: its wakes would have cost {spent} (arrived "
                                  f"within {wake_s:g} s of the end of an idle gap over the {cooldown} s cooldown), "
                                  f"over {frac:g} x the {settings.ttft_error_budget:.1%} error budget")
    return ScaleToZero(True, f"scale to zero: {gap_why}; its wakes would have cost {cost:.2%} of requests (arrived "
                             f"within {wake_s:g} s of the end of an idle gap over the {cooldown} s cooldown), within "
                             f"{frac:g} x the {settings.ttft_error_budget:.1%} error budget; needs something that "
                             "holds requests at zero and activates the workload (KEDA's HTTP add-on, a gateway metric)")


def wake_cost(history: ReplicaHistory, cooldown_s: float, wake_s: float) -> float | None:
    """Share of the history's requests that arrived within ``wake_s`` of the end of an idle gap of at least
    ``cooldown_s`` (the gaps :func:`idle_gaps_s` measures): at zero, each would have waited for KEDA's poll and
    a cold start. None without requests.

    The last step of a wake counts in part (``wake_s`` need not be whole steps); an idle gap that runs to the
    end of the history has no wake yet."""
    rate = history.request_rate_per_s
    if rate is None:
        return None
    values = rate.to_numpy(dtype="float64")
    arrived = clean_rate(values) * history.step_s
    total = float(arrived.sum())
    if total <= 0:
        return None
    weights = np.clip(wake_s / history.step_s - np.arange(math.ceil(wake_s / history.step_s)), 0.0, 1.0)
    spent = 0.0
    for start, end in zip(*idle_runs(history), strict=True):
        if (end - start) * history.step_s < cooldown_s or end >= values.size:
            continue
        part = arrived[end:end + weights.size]
        spent += float((part * weights[:part.size]).sum())
    return spent / total


def _time_weighted_median(gaps_s: np.ndarray) -> float:
    """The gap length (s) at least half of all idle time lies in gaps of."""
    ordered = np.sort(gaps_s)
    share = np.cumsum(ordered) / ordered.sum()
    return float(ordered[np.searchsorted(share, 0.5)])
