"""Scale-down hold: how long the HPA keeps the replicas it last needed before scaling in (its scale-down
``stabilizationWindowSeconds``), read from the request rate. A service whose load comes in windows with short
gaps between them (ten minutes on, ten off) loses its replicas in each gap once the window passes, and the next
window finds a fraction of them: those requests wait a cold start behind a queue. Holding the last window's
replicas through the gap serves them; holding them through hours of idle would only cost.

The hold is counterfactual, like the burst floor (``burst.py``): read from the request rate (demand, which the
hold does not change), not from the misses (which it does), so it cannot take itself away. An autoscaler that
asks ceil(rate / target) at each step and holds the largest ask of the last W seconds has, at step t, the
replicas asked over [t - lag - W, t - lag] ready (``lag``: a poll and a cold start); a step whose rate is above
what those serve at the objective has its requests over it. Where the plan acts on a forecast, the autoscaler
also serves its band ahead (the external scaler's metric): each step's ask is then read on the rate plus the
least the band lies above its mean over the horizon (``band_rps``), so the hold covers only the misses that band
would leave, not those a reactive autoscaler alone would have. That band is the one read now, not the ones
served then (a forecast refitted while idle may have kept less), so it is checked against what happened: where
the history shows the objective missed after a scale-in on more than the allowance's share of its requests, the
band is not read (``band_to_read``) until those misses leave the history. The hold is the shortest W, from the
base window up to the HPA's 3600 s limit, whose misses are within ``allowance`` of the requests of the
longest's: what a longer hold would still remove is under that share. It rises as such gaps recur in the
history and falls as they leave it. Rates in req/s, times in seconds. Pure: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from policies.replicas.burst import lag_steps, late
from policies.replicas.history import ReplicaHistory, clean_rate


@dataclass(frozen=True)
class Hold:
    """The scale-down window to emit (s) and why; ``shares`` maps each window tried (s) to the share (0-1) of
    the history's requests an autoscaler holding that long would have left over the objective."""

    seconds: int
    shares: dict[int, float]
    reason: str


def scale_down_hold(history: ReplicaHistory, capacity_rps: float, target_rps: float, wake_s: float, base_s: int,
                    max_s: int, allowance: float, band_rps: float = 0.0) -> Hold | None:
    """The shortest window from ``base_s`` to ``max_s`` (s, in steps of the history's step) whose counterfactual
    misses (:func:`held_misses`, asks read on the rate + ``band_rps``) are within ``allowance`` (a share,
    0-1, of the history's requests) of the ``max_s`` window's; None where there is no rate, no requests or nothing
    to choose (``max_s`` <= ``base_s``)."""
    rate = history.request_rate_per_s
    if rate is None or capacity_rps <= 0 or target_rps <= 0 or max_s <= base_s:
        return None
    r = clean_rate(rate.to_numpy(dtype="float64"))
    total = float(r.sum())
    if total <= 0:
        return None
    step = history.step_s
    lag = lag_steps(wake_s, step)
    windows = sorted({base_s, *range(int(math.ceil(base_s / step) * step), max_s + 1, int(step)), max_s})
    spans = [max(0, math.ceil(w / step) - 1) for w in windows]
    shares = {w: m / total for w, m in zip(windows, held_misses(r, capacity_rps, target_rps, lag, spans, band_rps),
                                            strict=True)}
    floor = shares[max_s]
    chosen = next(w for w in windows if shares[w] <= floor + allowance)
    if chosen == base_s:
        return Hold(base_s, shares, "")
    served = f", its forecast band {band_rps:.3g} req/s above the rate served" if band_rps > 0 else ""
    return Hold(chosen, shares, (
        f"scale-down held {chosen} s, not {base_s} s: load returned after short gaps, and an autoscaler holding "
        f"its replicas {base_s} s would have left {shares[base_s]:.2%} of requests over the objective where they "
        f"came back (from the request rate, a poll and a cold start late{served}), {chosen} s {shares[chosen]:.2%} "
        f"(the most a hold up to {max_s} s removes, within {allowance:.2%})"))


def held_misses(rate: np.ndarray, capacity_rps: float, target_rps: float, lag: int, spans: list[int],
                band_rps: float = 0.0) -> list[float]:
    """For each span (steps, ascending), requests/s summed over the steps whose rate exceeds ``capacity_rps`` x
    the replicas ready there: the largest ask (ceil((rate + ``band_rps``) / ``target_rps``)) of the span + 1 steps
    ending ``lag`` steps earlier. The first ``lag`` steps count as served: what served them lies before the
    history."""
    asked = np.ceil((rate + max(0.0, band_rps)) / target_rps - 1e-9)
    held, at, out = asked.copy(), 0, []
    for span in spans:
        for back in range(at + 1, min(span, rate.size - 1) + 1):  # one more step back: max with the ask before it
            np.maximum(held[back:], asked[:-back], out=held[back:])
        at = max(at, span)
        out.append(float(rate[rate > late(held, lag) * capacity_rps].sum()))
    return out


def band_to_read(history: ReplicaHistory, band_rps: float, objective_s: float, wake_s: float, max_s: int,
                 allowance: float) -> tuple[float, str]:
    """``band_rps`` (req/s) where the history does not contradict it, else 0 and why: where the share of its
    requests at the steps :func:`missed_after_scale_in` finds (the p95 TTFT over ``objective_s`` with fewer
    replicas ready than a ``max_s`` hold would have kept) is over ``allowance`` (0-1). Without TTFT or replica
    history, ``band_rps``."""
    if band_rps <= 0:
        return 0.0, ""
    missed = missed_after_scale_in(history, objective_s, lag_steps(wake_s, history.step_s),
                                   max(0, math.ceil(max_s / history.step_s) - 1))
    if missed is None or missed <= allowance:
        return band_rps, ""
    return 0.0, (f"its forecast band not read: {missed:.2%} of requests missed the objective after a scale-in "
                  f"(over {allowance:.2%}), so the band served then did not keep the replicas it reads now")


def missed_after_scale_in(history: ReplicaHistory, objective_s: float, lag: int, span: int) -> float | None:
    """The share (0-1) of the history's requests at steps whose p95 TTFT was over ``objective_s`` (s) while fewer
    replicas were ready than the most ready over the ``span`` + 1 steps ending ``lag`` steps earlier: load that
    returned after a scale-in a longer hold would have kept replicas for. None without a rate, TTFT or replicas."""
    rate, p95, ready = history.request_rate_per_s, history.ttft_p95_s, history.replicas
    if rate is None or p95 is None or ready is None:
        return None
    r = clean_rate(rate.to_numpy(dtype="float64"))
    total = float(r.sum())
    if total <= 0:
        return None
    count = ready.reindex(rate.index).to_numpy(dtype="float64")
    before = pd.Series(count).shift(lag).rolling(span + 1, min_periods=1).max().to_numpy()
    over = p95.reindex(rate.index).to_numpy(dtype="float64") > objective_s
    with np.errstate(invalid="ignore"):
        after = np.isfinite(count) & np.isfinite(before) & (count < before)
    return float(r[after & over].sum()) / total
