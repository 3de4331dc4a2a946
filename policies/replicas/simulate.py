"""The replicas an HPA/KEDA would have held over the history under a plan: a lower bound on what the product's
autoscaling holds (a perfect forecast, bursts within a step averaged away), for the plan's mean replicas and
the replica chart. Counts per step; times in seconds. Pure: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from policies.autoscalerobjects import scale_down_window_s
from policies.replicas.history import ReplicaHistory
from recommender.core.inventory import Workload
from recommender.core.plan import ScalingPlan


def autoscaled_series(history: ReplicaHistory, plan: ScalingPlan) -> pd.Series | None:
    """Replicas the HPA/KEDA would have held at each step of the history under ``plan``: per step
    ``replicas_for(rate, target)`` up to the max (at least 1 while active), started one cold start
    before the demand arrives, scaled down only to the highest count of the stabilisation window, to
    zero only after ``cooldown_s`` without requests. A lower bound on what the product's scaling holds,
    so the most autoscaling could save: the forecast is perfect here, bursts within a step are averaged,
    and ``min_replicas`` (the forecast's trough, which moves with every plan) is left out. None without
    a request rate; a gap holds the last count (as the HPA does), steps before the first rate are left out."""
    if history.request_rate_per_s is None:
        return None
    rate = history.request_rate_per_s.astype("float64").where(np.isfinite(history.request_rate_per_s)).ffill().dropna()
    if rate.empty:
        return None
    steps = rate.to_numpy()
    # replicas_for per step, at least one while active (min_replicas is today's trough, not all history's)
    want = np.clip(np.ceil(steps / plan.target_per_replica - 1e-9), 1, plan.max_replicas)
    lead = max(1, math.ceil((plan.cold_start_s or 0.0) / history.step_s) + 1)  # started one cold start ahead
    ready = pd.Series(want[::-1]).rolling(lead, min_periods=1).max().to_numpy()[::-1]
    window = max(1, math.ceil(scale_down_window_s(plan) / history.step_s))
    held = pd.Series(ready).rolling(window, min_periods=1).max().to_numpy()
    if plan.scale_to_zero:  # KEDA deactivates after its cooldown, outside the HPA's window
        idle = pd.Series(steps <= 0)
        quiet_s = idle.groupby((~idle).cumsum()).cumsum().to_numpy() * history.step_s  # seconds without requests
        held = np.where(quiet_s >= plan.cooldown_s, 0.0, held)
    return pd.Series(held, index=rate.index)


def autoscaled_replicas(history: ReplicaHistory, plan: ScalingPlan) -> float | None:
    """Mean of :func:`autoscaled_series`: at least the replicas the plan would have held on average."""
    held = autoscaled_series(history, plan)
    return None if held is None else float(held.mean())


def with_means(plan: ScalingPlan, today: ScalingPlan, workload: Workload, history: ReplicaHistory, *,
               known: bool) -> ScalingPlan:
    """``plan`` with the replicas the autoscaler would have held on average: ``mean_replicas`` under ``today``
    (the same plan at today's shape's target) and ``mean_replicas_right_sized`` under ``plan`` itself where its
    shape's compute is ``known`` (on today's shape, the same figure)."""
    mean = autoscaled_replicas(history, today)
    if mean is None:
        return plan
    why = [f"at least {mean:.2f} replicas on average (today {workload.allocation.replicas}, on today's shape): the "
           f"window's request rate at its target {today.target_per_replica:.3g}, each replica started one cold start "
           f"ahead (a perfect forecast), held through the {scale_down_window_s(plan):g} s scale-down window"
           + (", to zero after the cooldown" if plan.scale_to_zero else "")
           + f"; bursts within a {history.step_s:g} s step are averaged away"]
    right = (mean if not plan.capacity_estimated else autoscaled_replicas(history, plan)) if known else None
    if right is not None and plan.capacity_estimated:
        why.append(f"on {plan.shape} at least {right:.2f} replicas on average at its target "
                   f"{plan.target_per_replica:g} req/s per replica")
    return replace(plan, mean_replicas=mean, mean_replicas_right_sized=right, reasons=(*plan.reasons, *why))
