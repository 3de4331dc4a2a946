"""Error-budget headroom: the class's share of capacity held back below the target, raised where the service
overspent its TTFT error budget (over a day, and in its worst short window), so the next plan absorbs what the
last one did not. Shares are 0-1 of steps with a p95 TTFT; windows in seconds. Pure: no I/O.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from policies.replicas.estimates import Headroom
from policies.replicas.history import ReplicaHistory, per_replica_rate, rescue_s, rescued_steps, this_shape
from recommender.analysis.features import after_zero, last_window
from recommender.core.inventory import Workload
from recommender.core.plan import WorkloadClass
from recommender.core.settings import ScalingSettings

MIN_WINDOW_STEPS = 10  # steps a short error-budget window spans and needs a TTFT in: over fewer, one miss is >10%


def error_budget_headroom(cls: WorkloadClass, base: float, workload: Workload, history: ReplicaHistory,
                          capacity: float | None, objective_s: float, settings: ScalingSettings) -> Headroom:
    """The class's headroom, raised where the service overspent its TTFT error budget, and why.

    Headroom absorbs what the forecast does not see (bursts within a step, jumps it cannot predict, the cold
    start before new replicas serve); the steps that missed the objective measure how much of that it failed
    to absorb. Over the last ``error_budget_window_s``, if more than ``ttft_error_budget`` of the steps with a
    p95 TTFT missed the objective, headroom rises by ``headroom_step_frac`` per doubling of their share over
    the budget, up to ``max_headroom_frac`` (never below the class's); it falls back as they leave the
    window. With a ``capacity`` read from this history (measured, or a lower bound; None for a configured one)
    the misses its replicas served above it do not count: they are the knee it was measured from, or rates
    the service was never seen to serve within the objective, and the replica count already sizes for them.
    The worst ``fast_budget_window_s`` of the last ``fast_budget_hold_s`` is set against the same budget, every
    miss counted: a burst's misses would weigh in a day's share only once the day was spent, and its episode
    (a burst day) outlasts the hour that shows it. A window counts from ``fast_budget_min_missed`` missed steps:
    one stray miss in an hour's 60 steps is over a 1% budget on its own.
    Batch has no latency objective to spend: its headroom is left alone.
    """
    ttft = history.ttft_p95_s
    if cls is WorkloadClass.BATCH or ttft is None or not len(ttft):
        return Headroom(base)
    frame = _budget_frame(workload, history, ttft, settings.min_capacity_steps)
    missed, wake_why = _without_wakes((frame["ttft"] > objective_s).where(np.isfinite(frame["ttft"])), history,
                                      settings.wake_s(workload.cold_start_s))
    if settings.count_rescued_steps:
        missed, rescue_why = _with_rescued(missed, history, rescue_s(settings, workload.cold_start_s))
        wake_why += rescue_why
    known = missed * ~(frame["per"] > capacity) if capacity is not None else missed  # unknown rate: within capacity
    spent = _spent(known, missed, history.step_s, settings, within=capacity is not None)
    if not spent:
        return Headroom(base, tuple(wake_why))
    share, where, within = max(spent)
    budget = settings.ttft_error_budget
    if share <= budget:
        return Headroom(base, tuple(wake_why))
    raised = max(base, min(settings.max_headroom_frac, base + settings.headroom_step_frac * math.log2(share / budget)))
    return Headroom(raised, (*wake_why, f"headroom {base:.0%} raised to {raised:.0%}: {share:.1%} {where} had p95 "
                    f"TTFT over the {objective_s:g} s objective" + (" within the capacity read from history" if within
                                                                    else "")
                    + f", against an error budget of {budget:.1%} (+{settings.headroom_step_frac:.0%} per doubling, "
                    f"at most {settings.max_headroom_frac:.0%})"))


def _budget_frame(workload: Workload, history: ReplicaHistory, ttft: pd.Series, min_steps: int) -> pd.DataFrame:
    """TTFT and rate per replica by step: only the steps since the replicas took their current shape, once
    ``min_steps`` of them have a TTFT (a new shape's first few steps alone would make a noisy share); until
    then, all of them."""
    frame = pd.DataFrame({"ttft": ttft})
    per = per_replica_rate(workload, history)
    frame["per"] = np.nan if per is None else per
    own = this_shape(frame, workload)
    return own if np.isfinite(own["ttft"]).sum() >= min_steps else frame


def _without_wakes(missed: pd.Series, history: ReplicaHistory, wake_s: float) -> tuple[pd.Series, list[str]]:
    """``missed`` (1, 0, or NaN: no TTFT) with the steps of a wake from zero (:func:`wake_steps`) unknown, and
    why: the requests that arrived at zero waited a cold start, which no headroom serves (``wake_budget_frac``
    bounds them)."""
    steps = wake_steps(history, wake_s)
    woke = np.zeros(len(missed), dtype=bool) if steps is None \
        else steps.reindex(missed.index, fill_value=False).to_numpy(dtype=bool)
    left_out = int((missed[woke] == 1).sum())
    why = [f"{left_out} missed step(s) within {wake_s:g} s of a wake from zero left out of the error budget: "
           "the requests that arrive at zero wait a cold start, which no headroom serves"] if left_out else []
    return missed.mask(woke), why


def _with_rescued(missed: pd.Series, history: ReplicaHistory, span_s: float) -> tuple[pd.Series, list[str]]:
    """``missed`` with the steps the fast loop rescued (:func:`rescued_steps`) counted as missed, and why: the
    objective was met there on replicas added for a miss, which the plan had not sized."""
    if history.replicas is None:
        return missed, []
    rate = history.request_rate_per_s
    if rate is None:
        return missed, []
    rescued = rescued_steps(missed, history.replicas, rate, int(span_s // history.step_s)).to_numpy(dtype=bool)
    if not rescued.any():
        return missed, []
    return missed.mask(rescued, 1.0), [
        f"{int(rescued.sum())} step(s) within {span_s:g} s of a miss that met the objective on more replicas than "
        "missed it counted as missed: the replicas added for the miss served them, not the plan's"]


def _spent(known: pd.Series, missed: pd.Series, step_s: float, settings: ScalingSettings, *, within: bool
           ) -> list[tuple[float, str, bool]]:
    """The shares of missed steps set against the budget, where each is known: the last day's (``known``: the
    misses within capacity) and the worst short window's (every miss), with where each was read."""
    day = settings.error_budget_window_s
    spent = [(_share(known, day), f"of the last {day / 3600:g} h's steps", within)]
    if settings.fast_budget_window_s is not None:
        fast = max(settings.fast_budget_window_s, MIN_WINDOW_STEPS * step_s)  # coarse steps: 10 of them
        hold = settings.fast_budget_hold_s
        spent.append((_worst_share(missed, fast, hold, settings.fast_budget_min_missed),
                      f"of the steps in the worst {fast / 3600:g} h of the last {hold / 3600:g} h", False))
    return [x for x in spent if math.isfinite(x[0])]


def wake_steps(history: ReplicaHistory, wake_s: float) -> pd.Series | None:
    """Steps within ``wake_s`` of the end of each run at zero (``replicas`` 0), as booleans
    (``recommender.analysis.features.after_zero``). None without a replica count."""
    return None if history.replicas is None else after_zero(history.replicas, wake_s, history.step_s)


def _share(missed: pd.Series, window_s: float) -> float:
    """Share of the steps with a TTFT within ``window_s`` of the last step that missed (NaN: none has one)."""
    return float(last_window(missed.to_frame(), window_s).iloc[:, 0].mean())


def _worst_share(missed: pd.Series, window_s: float, hold_s: float, min_missed: int) -> float:
    """The largest share of missed steps in any ``window_s`` ending within ``hold_s`` of the last step, counting
    windows with at least ``MIN_WINDOW_STEPS`` steps with a TTFT and ``min_missed`` missed ones (NaN: none; the
    whole series without times)."""
    if not isinstance(missed.index, pd.DatetimeIndex):
        return float(missed.mean()) if missed.sum() >= min_missed else math.nan
    rolling = missed.rolling(pd.Timedelta(seconds=window_s), min_periods=MIN_WINDOW_STEPS)
    share = rolling.mean().where(rolling.sum() >= min_missed)
    return float(last_window(share.to_frame(), hold_s).iloc[:, 0].max())
