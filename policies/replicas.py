"""Replicas, scale-to-zero and the KEDA/HPA parameters, from demand and per-replica capacity.

``scaling_plan`` is the one entry point: replicas = demand to size for / (capacity at the TTFT
objective x (1 - headroom of the class)). Demand is the forecast's upper band by class (real-time
``hi_95``, near-real-time ``hi_80``, batch ``mean``), else the observed peak / p95 / mean; without a
forecast the floor is the peak of the last ``no_forecast_floor_window_s`` for real-time (bursts seen
recently stay covered until the daily pattern is known) and the quietest observed step for the others
(the HPA follows demand above it; in the replay a floor at the peak of all history held whole days of
idle replicas, and for real-time the quietest step let bursts in). Capacity is
measured at the knee history shows (the rate per replica from which the objective is more often missed
than not; replicas counted per step, as they served) unless a configured figure lies within the knee's
bracket; else configured, else the measured rate as a lower bound. Scale-to-zero only when idle gaps are
long against the cold start, and for the classes in ``ScalingSettings.scale_to_zero_classes`` (batch by
default) or, opted in, for a latency-bound class where its wakes fit ``wake_budget_frac`` of the TTFT error
budget: a request that arrives at zero waits a whole cold start, and the history tells how many would have.
maxReplicaCount is bounded by the peak only once ``max_bound_history_s`` of history exists (before that,
``max_replicas``): a max from a short history turns the first larger burst into a queue.
KEDA's cooldown is a ski-rental threshold: at least one cold start, long enough to ride
out the short gaps. Pure: no I/O.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
from sklearn.isotonic import IsotonicRegression

from policies.rightscale import ShapeScale, capacity_scale
from recommender.analysis.features import after_zero, last_window, split_at
from recommender.analysis.forecast import upper_band
from recommender.analysis.shape import ttft_objective_from
from recommender.core import usage as m
from recommender.core.annotations import CAPACITY_ANNOTATION, RECOMMENDATION_ANNOTATION, TTFT_OBJECTIVE_ANNOTATION
from recommender.core.inventory import Workload
from recommender.core.plan import (
    PLACEHOLDER_PROMETHEUS,
    Classification,
    Forecast,
    ScalingPlan,
    WorkloadClass,
    WorkloadConstraints,
)
from recommender.core.settings import ScalingSettings
from recommender.core.timestamps import parse_time
from recommender.core.usage import Snapshot

BAND_BY_CLASS = {WorkloadClass.REAL_TIME: "hi_95", WorkloadClass.NEAR_REAL_TIME: "hi_80", WorkloadClass.BATCH: "mean"}
OBSERVED_BY_CLASS = {WorkloadClass.REAL_TIME: 1.0, WorkloadClass.NEAR_REAL_TIME: 0.95, WorkloadClass.BATCH: -1.0}
RATE_TRIGGER_METRIC = "vllm:request_success_total"  # the KEDA triggers' queries read these (keda_parameters)
WAITING_TRIGGER_METRIC = "vllm:num_requests_waiting"
RUNNING_METRIC = "vllm:num_requests_running"
KEDA_DEFAULT_COOLDOWN_S = 300  # reference.md §10; only used when scaling to zero
HPA_MAX_WINDOW_S = 3600  # stabilizationWindowSeconds limit, reference.md §12
MIN_WINDOW_STEPS = 10  # steps a short error-budget window spans and needs a TTFT in: over fewer, one miss is >10%


@dataclass(frozen=True)
class ReplicaHistory:
    """The series the replica policy reads, one value per step (whole workload, pods summed).

    ``replicas`` is the ready replica count per step; None means the allocation's count throughout.
    """

    step_s: float
    request_rate_per_s: pd.Series | None = None
    ttft_p95_s: pd.Series | None = None
    requests_waiting: pd.Series | None = None
    replicas: pd.Series | None = None


@dataclass(frozen=True)
class NoScalingPlan:
    """Why no scaling plan could be made (one line each)."""

    reasons: tuple[str, ...]


def history_from_snapshot(snapshot: Snapshot, workload: Workload) -> ReplicaHistory:
    """The replica policy's inputs from a snapshot; the replica count is the pods that served at each step
    (a snapshot without it: the allocation's, held constant)."""
    ref = workload.ref
    return ReplicaHistory(snapshot.step_s, snapshot.series(m.REQUEST_RATE, ref), snapshot.series(m.TTFT_P95_S, ref),
                          snapshot.series(m.REQUESTS_WAITING, ref), snapshot.series(m.SERVING_REPLICAS, ref))


def this_shape(frame: pd.DataFrame, workload: Workload) -> pd.DataFrame:
    """The steps of a time-indexed frame since the replicas took their current shape (``Workload.shape_since``;
    all of them where it is unknown): per replica, the steps before were another shape's, so the capacity and
    the error budget read only these."""
    return split_at(frame, workload.shape_since)[1]


def _changed_within(workload: Workload, history: ReplicaHistory) -> bool:
    """Whether the history holds steps from before the replicas took their current shape."""
    rate = history.request_rate_per_s
    return rate is not None and len(this_shape(rate.to_frame(), workload)) < len(rate)


def _shape_note(workload: Workload, history: ReplicaHistory, min_steps: int) -> list[str]:
    """Why the capacity and error budget read part of the history, where they do."""
    since = workload.shape_since
    if since is None or not _changed_within(workload, history):
        return []
    return [f"capacity and error budget read from {since:%Y-%m-%d %H:%M} UTC on, when the replicas took their "
            f"current GPU shape (per replica, the steps before were another shape's), once {min_steps} steps "
            "there tell; across the change until then"]


def scaling_plan(workload: Workload, history: ReplicaHistory, classification: Classification | None,
                 forecasts: Sequence[Forecast], settings: ScalingSettings, previous: ScalingPlan | None = None,
                 constraints: WorkloadConstraints | None = None, shape: ShapeScale | None = None
                 ) -> ScalingPlan | NoScalingPlan:
    """Replica bounds and autoscaler parameters for one workload on its recommended ``shape`` (today's without
    one), or why there are none: the one place the threshold, min/max and replicas are made.

    ``previous`` is this workload's plan from the last cycle, where a loop keeps one: a capacity that is
    only a lower bound never falls below it (see :func:`keep_lower_bound`). Without one (the controller's
    first cycle after a restart) the capacity the controller recorded on the workload stands in for it.
    Capacity is read on today's shape and scaled to the recommended one (:func:`capacity_scale`)."""
    cls = classification.workload_class if classification else WorkloadClass.REAL_TIME
    why = [] if classification else ["no class: sized as real-time (the most headroom)"]
    objective_s, note = ttft_objective(workload, settings, constraints)
    carried = (previous.measured_capacity, f"the previous plan's ({previous.capacity_source})") if previous \
        else recorded_capacity(workload)
    why += _shape_note(workload, history, settings.min_capacity_steps)
    span_s = history_span_s(history)
    forecasts, fc_why = forecasts_to_act_on(forecasts, span_s, settings)
    why += fc_why
    capacity = keep_lower_bound(per_replica_capacity(workload, history, objective_s, settings), carried)
    demand = demand_to_size(cls, forecasts, history.request_rate_per_s, settings.no_forecast_floor_window_s)
    if isinstance(capacity, str) or isinstance(demand, str):
        return NoScalingPlan(tuple(x for x in (capacity, demand) if isinstance(x, str)))
    basis, source, cap_why = capacity
    peak, trough, observed_max, demand_why = demand
    headroom, budget_why = error_budget_headroom(cls, settings.headroom_frac.get(cls.value, 0.0), workload, history,
                                                 None if source == "configured" else basis, objective_s, settings)
    scale, scale_why = capacity_scale(shape, basis)
    cap = basis * scale
    target = significant(cap * (1.0 - headroom))
    cold_s = settings.cold_start_s(workload.cold_start_s)
    gaps = idle_gaps_s(history)
    acted = _rate_forecast(forecasts) is not None  # a request-rate forecast the plan sizes on
    to_zero, zero_why = scale_to_zero(cls, gaps, cold_s, settings, history, forecast=acted)
    recommended, low, high, bound_why = replica_bounds((peak, trough, observed_max), target, to_zero, span_s, settings)
    cooldown, cool_why = cooldown_s(gaps, cold_s, to_zero, settings)
    act = significant(1.0 / cold_s) if to_zero else 0.0
    waiting = significant(target * objective_s)
    why += [note, *cap_why, *scale_why, *demand_why, *budget_why,
            f"target {target:g} req/s per replica = {cap:.3g} x (1 - {headroom:.0%} headroom for {cls.value})",
            *bound_why, zero_why, cool_why,
            f"second trigger at {waiting:g} requests waiting per replica: what a replica starts within the "
            f"{objective_s:g} s objective at its target (it follows a queue at once, the rate over its window)"]
    if to_zero:
        why.append(f"activation above {act:g} req/s: wake when the forecast expects a request within one "
                   f"cold start ({cold_s:g} s), before the queue builds")
    plan = ScalingPlan(metric=m.REQUEST_RATE, per_replica_capacity=cap, target_per_replica=target,
                       min_replicas=low, max_replicas=high, recommended_replicas=recommended,
                       activation_threshold=act, cooldown_s=cooldown, scale_to_zero=to_zero, headroom_frac=headroom,
                       cold_start_s=workload.cold_start_s, reasons=tuple(why), capacity_source=source,
                       waiting_per_replica=waiting, rate_window_s=settings.rate_window_s,
                       demand_source="forecast" if acted else "observed", basis_capacity=basis,
                       capacity_scale=scale, shape=shape.shape if shape else None)
    if source == "lower bound":  # the target sits under the highest rate seen: every peak would need more
        plan = replace(plan, reasons=(*plan.reasons, "no mean replica estimate: the capacity is only a lower bound"))
    at = significant(basis * (1.0 - headroom))  # today's target, rounded as the plan's: the same plan at scale 1
    n, lo, hi, _ = replica_bounds((peak, trough, observed_max), at, to_zero, span_s, settings)
    today = replace(plan, per_replica_capacity=basis, target_per_replica=at, waiting_per_replica=significant(
        at * objective_s), recommended_replicas=n, min_replicas=lo, max_replicas=hi, capacity_scale=1.0, shape=None)
    planned = plan if source == "lower bound" else \
        with_means(plan, today, workload, history, known=shape is not None and shape.factor is not None)
    return replace(planned, on_today=replace(today, reasons=()) if plan.capacity_estimated else None)


def significant(value: float, digits: int = 4) -> float:
    """``value`` to ``digits`` significant digits: thresholds are set once here, so every format and the KEDA and
    HPA objects print the same number (``:g`` shows them whole)."""
    return float(f"{value:.{digits}g}")


def replica_bounds(demand: tuple[float, float, float], target: float, to_zero: bool, span_s: float,
                   settings: ScalingSettings) -> tuple[int, int, int, list[str]]:
    """Recommended (for the peak), min and max replicas at ``target`` req/s per replica from (peak, trough,
    observed max) demand in req/s, and why; max is bounded by the peak only after ``max_bound_history_s``."""
    peak, trough, observed_max = demand
    recommended = replicas_for(peak, target)
    low = 0 if to_zero else max(1, replicas_for(trough, target))
    bounded = span_s >= settings.max_bound_history_s
    high = math.ceil(replicas_for(max(peak, observed_max), target) * (1.0 + settings.max_burst_frac)) if bounded \
        else settings.max_replicas
    capped = []
    if recommended > settings.max_replicas:
        capped = [f"{recommended} replicas needed, capped at max_replicas={settings.max_replicas}: expect queueing"]
    recommended = min(max(recommended, low), settings.max_replicas)
    low, high = min(low, recommended), min(max(high, recommended), settings.max_replicas)
    why = f"{recommended} replicas for {peak:.3g} req/s; min {low}, max {high} " + (
        f"(the larger of forecast and observed peak, +{settings.max_burst_frac:.0%} for bursts)" if bounded
        else f"(the max_replicas ceiling: {span_s / 3600:.3g} h of history is under the "
             f"{settings.max_bound_history_s / 3600:.3g} h that bound bursts)")
    return recommended, low, high, [why, *capped]


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


def autoscaled_replicas(history: ReplicaHistory, plan: ScalingPlan) -> float | None:
    """Mean of :func:`autoscaled_series`: at least the replicas the plan would have held on average."""
    held = autoscaled_series(history, plan)
    return None if held is None else float(held.mean())


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


def history_span_s(history: ReplicaHistory) -> float:
    """Seconds of request-rate history with a value (gaps in the series do not count)."""
    rate = history.request_rate_per_s
    return 0.0 if rate is None else float(np.isfinite(rate.to_numpy(dtype="float64")).sum() * history.step_s)


def replicas_for(demand: float, target_per_replica: float) -> int:
    """ceil(demand / target), 0 for no demand; a tiny tolerance keeps 2.0000000001 at 2."""
    if demand <= 0:
        return 0
    return max(1, math.ceil(demand / target_per_replica - 1e-9))


def ttft_objective(workload: Workload, settings: ScalingSettings, constraints: WorkloadConstraints | None = None
                   ) -> tuple[float, str]:
    """The TTFT objective (seconds) from a policy's ``latencyObjectives``, else the annotation, else the
    settings' default, and where it came from."""
    if constraints is not None and constraints.ttft_objective_s is not None:
        return constraints.ttft_objective_s, (f"TTFT objective {constraints.ttft_objective_s:g} s from "
                                              f"latencyObjectives.ttftSeconds ({constraints.source})")
    value, notes = ttft_objective_from(workload.annotations)
    if value is not None:
        return value, f"TTFT objective {value:g} s from {TTFT_OBJECTIVE_ANNOTATION}"
    bad = "".join(f" ({n})" for n in notes)
    return settings.ttft_objective_s, f"TTFT objective {settings.ttft_objective_s:g} s (default){bad}"


def per_replica_capacity(workload: Workload, history: ReplicaHistory, objective_s: float,
                         settings: ScalingSettings) -> tuple[float, str, list[str]] | str:
    """Requests/s one replica serves at the objective, its source and reasons; a one-line reason when unknown.

    Measured where history shows the knee (:func:`locate_knee`): the highest per-replica rate at which a
    missed objective is not yet likely. A configured capacity inside the knee's bracket is kept: under
    autoscaling the replicas run at the target, under the capacity, and the few steps above it (a burst
    before new replicas are ready) bound the knee only loosely; a configured figure the history contradicts
    (misses below it, or the objective met above the bracket) gives way to the measurement. Without a knee
    the ``capacity_quantile`` of the rates that met the objective is a lower bound, used only when nothing
    is configured. Not measured with ``capacity_from_history`` off. Only the steps since the replicas took
    their current shape count, unless too few of them met the objective and nothing is configured: then, rather
    than no plan at all right after a change (the KEDA scaler would answer errors), all of them, and it says so.
    """
    configured, conf_src = _configured_capacity(workload, settings)
    steps = _step_outcomes(workload, history, objective_s) if settings.capacity_from_history else None
    good = np.array([]) if steps is None else steps.loc[~steps["missed"], "per"].to_numpy(dtype="float64")
    enough = good.size >= settings.min_capacity_steps
    knee = locate_knee(steps, settings.min_knee_steps) if steps is not None and enough else None
    if knee is not None:
        bracket = (f"the objective met up to {knee.below:.3g} req/s per replica and more often missed than not "
                   f"from {knee.above:.3g} ({knee.steps} steps)")
        if configured and knee.below <= configured <= knee.above:
            return configured, "configured", [f"capacity {configured:.3g} req/s per replica from {conf_src}, "
                                              f"consistent with history: {bracket}"]
        return knee.below, "measured", [f"capacity {knee.below:.3g} req/s per replica measured at the knee: "
                                        + bracket + (f" (configured {configured:.3g} disagrees)" if configured
                                                     else "")]
    if configured:
        return configured, "configured", [f"capacity {configured:.3g} req/s per replica from {conf_src}"]
    if enough:
        measured = float(np.quantile(good, settings.capacity_quantile))
        return measured, "lower bound", [
            f"capacity {measured:.3g} req/s per replica: p{settings.capacity_quantile * 100:g} of the rate per "
            f"replica over {good.size} steps that met the objective; no knee (no rate at which the objective was "
            f"more often missed than not), so this is a lower bound (set {CAPACITY_ANNOTATION} to size tighter)"]
    if _changed_within(workload, history):  # too soon after a change of shape: across it, flagged, rather than none
        across = per_replica_capacity(replace(workload, shape_since=None), history, objective_s, settings)
        if isinstance(across, str):
            return across
        cap, source, why = across
        return cap, source, [f"fewer than {settings.min_capacity_steps} steps met the objective since the replicas "
                             f"took their current shape at {workload.shape_since:%Y-%m-%d %H:%M} UTC: capacity read "
                             "across the change, from both shapes, until they do", *why]
    return (f"no per-replica capacity: fewer than {settings.min_capacity_steps} steps with request rate and TTFT "
            f"that met the objective, and no {CAPACITY_ANNOTATION} annotation")


@dataclass(frozen=True)
class Knee:
    """Where the objective starts to be missed, in requests/s per replica: ``below`` is the highest rate at
    which a miss is not yet likely, ``above`` the lowest at which it is (over ``steps`` steps)."""

    below: float
    above: float
    steps: int


def locate_knee(steps: pd.DataFrame, min_missed: int = 1) -> Knee | None:
    """The knee from steps' per-replica rate (``per``) and whether each missed (``missed``), or None.

    The chance of a miss is fitted as a non-decreasing function of the rate (isotonic regression): a miss at
    a low rate (a cold start, one slow request) is pooled with its neighbours instead of moving the knee, and
    so is one good step above the misses. The knee is where that chance passes one half. None when it never
    does, when fewer than ``min_missed`` steps missed from there on, or when it does from the lowest rate on
    (nothing met the objective below it).
    """
    frame = steps[steps["per"] > 0].sort_values("per", kind="stable")
    if frame.empty:
        return None
    per = frame["per"].to_numpy(dtype="float64")
    chance = IsotonicRegression(increasing=True).fit_transform(per, frame["missed"].to_numpy(dtype="float64"))
    likely = np.flatnonzero(chance > 0.5)
    if not likely.size or likely[0] == 0 or frame["missed"].iloc[likely[0]:].sum() < min_missed:
        return None
    return Knee(float(per[likely[0] - 1]), float(per[likely[0]]), int(per.size))


def keep_lower_bound(capacity: tuple[float, str, list[str]] | str, previous: tuple[float, str] | None
                     ) -> tuple[float, str, list[str]] | str:
    """A lower-bound capacity raised to the last cycle's (``previous``: requests/s per replica, where it came
    from) where that was higher.

    Without a knee the capacity is the rate the replicas served within the objective, and under our own
    autoscaling they serve at the previous plan's target, headroom below its capacity: read afresh each
    cycle, every plan would shrink the next one's target (the replay: 28 times the GPU-hours in 14 days).
    The previous capacity was a knee, a configured figure or an earlier lower bound, all evidence the
    history has not contradicted (misses above it would locate a knee, which takes precedence). It stops
    the fall; it cannot lift a low first reading, which only a knee or a configured figure replaces.
    """
    if isinstance(capacity, str) or previous is None:
        return capacity
    cap, source, why = capacity
    kept, came_from = previous
    if source != "lower bound" or kept <= cap:
        return capacity
    return kept, source, [*why, f"kept at {kept:.3g} req/s per replica, {came_from}: under our own "
                                f"autoscaling the replicas served at its target, so a lower bound read from "
                                f"them would shrink each cycle"]


def recorded_capacity(workload: Workload) -> tuple[float, str] | None:
    """The per-replica capacity the controller recorded in the workload's ``rightsizer.io/recommendation``
    (``replicaCapacity``): the last cycle's, which outlives a controller restart. None where absent or not
    a positive number (an older record, an edit by hand), or recorded for another shape than the replicas'
    now (its ``shapeSince`` is not the workload's)."""
    raw = workload.annotations.get(RECOMMENDATION_ANNOTATION)
    try:
        doc = json.loads(raw) if raw else None
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    value = positive_number(doc.get("replicaCapacity"))
    if value is None or parse_time(doc.get("shapeSince")) != workload.shape_since:
        return None  # no figure, or one measured on the replicas' shape before this one
    return value, f"recorded on the workload ({RECOMMENDATION_ANNOTATION}: {doc.get('capacitySource', '?')})"


def _configured_capacity(workload: Workload, settings: ScalingSettings) -> tuple[float | None, str]:
    value = positive_number(workload.annotations.get(CAPACITY_ANNOTATION))
    if value is not None:
        return value, CAPACITY_ANNOTATION
    return settings.replica_capacity_rps, "settings (scaling.replica_capacity_rps)"


def _per_replica_rate(workload: Workload, history: ReplicaHistory) -> pd.Series | None:
    """Request rate per replica at each step: the history's ready replicas, else the allocation's count."""
    rate = history.request_rate_per_s
    if rate is None:
        return None
    return rate / (history.replicas if history.replicas is not None else max(1, workload.allocation.replicas))


def _step_outcomes(workload: Workload, history: ReplicaHistory, objective_s: float) -> pd.DataFrame | None:
    """Per step with a request rate: the rate per replica (``per``) and whether the step missed the objective
    or queued (``missed``); None without rate or TTFT history."""
    rate, ttft = history.request_rate_per_s, history.ttft_p95_s
    if rate is None or ttft is None:
        return None
    frame = pd.DataFrame({"rate": rate, "ttft": ttft})
    waiting = history.requests_waiting
    frame["waiting"] = 0.0 if waiting is None else waiting
    frame["per"] = _per_replica_rate(workload, history)
    frame = this_shape(frame, workload)
    frame = frame[np.isfinite(frame["rate"]) & np.isfinite(frame["ttft"]) & np.isfinite(frame["per"])
                  & (frame["rate"] > 0)]
    frame["missed"] = (frame["ttft"] > objective_s) | (frame["waiting"].fillna(0) >= 1)
    return frame[["per", "missed"]]


def error_budget_headroom(cls: WorkloadClass, base: float, workload: Workload, history: ReplicaHistory,
                          capacity: float | None, objective_s: float, settings: ScalingSettings
                          ) -> tuple[float, list[str]]:
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
    Only the steps since the replicas took their current shape count, once ``min_capacity_steps`` of them
    have a TTFT; until then, all of them. The steps of a wake from zero (:func:`wake_steps`) do not count: the
    requests that arrived at zero waited a cold start, which no headroom serves (``wake_budget_frac`` bounds them).
    Batch has no latency objective to spend: its headroom is left alone.
    """
    ttft = history.ttft_p95_s
    if cls is WorkloadClass.BATCH or ttft is None or not len(ttft):
        return base, []
    frame = pd.DataFrame({"ttft": ttft})
    per = _per_replica_rate(workload, history)
    frame["per"] = np.nan if per is None else per
    own = this_shape(frame, workload)  # a new shape's first few steps alone would make a noisy share: across
    frame = own if np.isfinite(own["ttft"]).sum() >= settings.min_capacity_steps else frame
    missed = (frame["ttft"] > objective_s).where(np.isfinite(frame["ttft"]))  # 1, 0, or NaN: no TTFT
    wake_s = settings.wake_s(workload.cold_start_s)
    steps = wake_steps(history, wake_s)
    woke = np.zeros(len(frame), dtype=bool) if steps is None \
        else steps.reindex(frame.index, fill_value=False).to_numpy(dtype=bool)
    left_out = int((missed[woke] == 1).sum())
    missed = missed.mask(woke)
    wake_why = [f"{left_out} missed step(s) within {wake_s:g} s of a wake from zero left out of the error budget: "
                "the requests that arrive at zero wait a cold start, which no headroom serves"] if left_out else []
    known = missed * ~(frame["per"] > capacity) if capacity is not None else missed  # unknown rate: within capacity
    day = settings.error_budget_window_s
    spent = [(_share(known, day), f"of the last {day / 3600:g} h's steps", capacity is not None)]
    if settings.fast_budget_window_s is not None:
        fast = max(settings.fast_budget_window_s, MIN_WINDOW_STEPS * history.step_s)  # coarse steps: 10 of them
        hold = settings.fast_budget_hold_s
        spent.append((_worst_share(missed, fast, hold, settings.fast_budget_min_missed),
                      f"of the steps in the worst {fast / 3600:g} h of the last {hold / 3600:g} h", False))
    spent = [x for x in spent if math.isfinite(x[0])]
    if not spent:
        return base, wake_why
    share, where, within = max(spent)
    budget = settings.ttft_error_budget
    if share <= budget:
        return base, wake_why
    raised = max(base, min(settings.max_headroom_frac, base + settings.headroom_step_frac * math.log2(share / budget)))
    return raised, [*wake_why, f"headroom {base:.0%} raised to {raised:.0%}: {share:.1%} {where} had p95 TTFT over the "
                    f"{objective_s:g} s objective" + (" within the capacity read from history" if within else "")
                    + f", against an error budget of {budget:.1%} (+{settings.headroom_step_frac:.0%} per doubling, "
                    f"at most {settings.max_headroom_frac:.0%})"]


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


def demand_to_size(cls: WorkloadClass, forecasts: Sequence[Forecast], rate: pd.Series | None,
                   floor_window_s: float = math.inf) -> tuple[float, float, float, list[str]] | str:
    """(peak, trough, observed max) request rates and reasons: the forecast band by class, else observed.

    Without a forecast, real-time's trough (the floor) is the peak of the last ``floor_window_s`` of history.
    """
    observed = np.array([]) if rate is None else rate.to_numpy(dtype="float64")
    observed = observed[np.isfinite(observed)]
    observed_max = float(observed.max()) if observed.size else 0.0
    fc = _rate_forecast(forecasts)
    if fc is not None:
        column = upper_band(fc.frame, BAND_BY_CLASS[cls])
        band = fc.frame[column].clip(lower=0.0).to_numpy(dtype="float64")
        if np.isfinite(band).any():
            peak, trough = float(np.nanmax(band)), float(np.nanmin(band))
            return peak, trough, observed_max, [f"demand {peak:.3g} req/s: peak of the forecast's {column} "
                                                f"({fc.model}) for {cls.value}"]
    if not observed.size:
        return "no request-rate history and no request-rate forecast: no demand to size replicas for"
    q = OBSERVED_BY_CLASS[cls]
    peak = float(observed.mean()) if q < 0 else float(np.quantile(observed, q))
    what = "mean" if q < 0 else ("peak" if q >= 1 else f"p{q * 100:g}")
    if cls is WorkloadClass.REAL_TIME:  # no forecast yet: a burst would find a floor below the peak too late
        recent = peak if rate is None else _recent_peak(rate, floor_window_s, otherwise=peak)
        return peak, recent, observed_max, [f"demand {peak:.3g} req/s: observed {what} for {cls.value} (no forecast); "
                                            f"floor {recent:.3g} req/s: the peak of the last "
                                            f"{floor_window_s / 3600:g} h until a forecast exists"]
    trough = min(peak, float(observed.min()))  # the floor: the quietest step, the HPA follows demand above it
    return peak, trough, observed_max, [f"demand {peak:.3g} req/s: observed {what} for {cls.value} (no forecast); "
                                        f"floor {trough:.3g} req/s: the quietest step seen"]


def forecasts_to_act_on(forecasts: Sequence[Forecast], span_s: float, settings: ScalingSettings
                        ) -> tuple[Sequence[Forecast], list[str]]:
    """The forecasts a plan sizes on, and why none: a request-rate forecast on under
    ``min_forecast_history_s`` of history has its band widened for the season it cannot see yet, and
    replicas following it held far more than the observed floor does in the replay (REPLAY.md)."""
    if _rate_forecast(forecasts) is None or span_s >= settings.min_forecast_history_s:
        return forecasts, []
    return (), [f"request-rate forecast not acted on yet: {span_s / 3600:.3g} h of history, under the "
                f"{settings.min_forecast_history_s / 3600:.3g} h it needs (scaling.min_forecast_history_s; its band is "
                "widened until then): sized on the observed rate"]


def _rate_forecast(forecasts: Sequence[Forecast]) -> Forecast | None:
    """The first non-empty request-rate forecast, or None."""
    return next((f for f in forecasts if f.metric == m.REQUEST_RATE and not f.frame.empty), None)


def _recent_peak(rate: pd.Series, window_s: float, otherwise: float) -> float:
    """Largest finite value in the last ``window_s`` of the series (its index: timestamps); ``otherwise`` when
    nothing is known lately (a lost metric must not drop the floor)."""
    values = last_window(rate.to_frame(), window_s).to_numpy(dtype="float64").ravel()
    values = values[np.isfinite(values)]
    return float(values.max()) if values.size else otherwise


def idle_gaps_s(history: ReplicaHistory) -> np.ndarray:
    """Lengths (s) of runs of steps with no requests and nothing waiting; unknown steps break a run."""
    starts, ends = _idle_runs(history)
    return (ends - starts) * history.step_s


def _idle_runs(history: ReplicaHistory) -> tuple[np.ndarray, np.ndarray]:
    """First and one-past-last step index of each run of steps with no requests and nothing waiting."""
    rate = history.request_rate_per_s
    if rate is None:
        return np.array([], dtype=np.int64), np.array([], dtype=np.int64)
    values = rate.to_numpy(dtype="float64")
    idle = np.isfinite(values) & (values <= 0)
    if history.requests_waiting is not None:
        idle &= ~(history.requests_waiting.reindex(rate.index).fillna(0).to_numpy() > 0)
    edges = np.flatnonzero(np.diff(np.concatenate(([0], idle.astype(np.int8), [0]))))
    return edges[::2], edges[1::2]


def scale_to_zero(cls: WorkloadClass, gaps_s: np.ndarray, cold_start_s: float, settings: ScalingSettings,
                  history: ReplicaHistory, *, forecast: bool) -> tuple[bool, str]:
    """Whether to scale to zero, and why: most idle time must be in long gaps, and the class must allow it or,
    for a latency-bound class, its wakes must fit ``wake_budget_frac`` of the TTFT error budget (:func:`wake_cost`:
    each request that arrives at zero waits a cold start, which no headroom serves) and a request-rate
    ``forecast`` and ``wake_min_history_s`` of history must exist. Without a forecast nothing wakes the service
    ahead of a burst (the activation reads it; the external scaler keeps a workload without one active), and
    going to zero would drop the floor real-time keeps until one exists (the last hours' peak); on hours of
    history one or two gaps decide the wake cost. Together they had the replay's chunk-61 follow each burst
    of its first day a cold start late, and the knee read from those misses sized it low for a week.

    "Typical" gap = the time-weighted median: half of all idle time lies in gaps at least this long.
    """
    long_s = settings.scale_to_zero_idle_multiple * cold_start_s
    allowed = cls.value in settings.scale_to_zero_classes
    frac = settings.wake_budget_frac
    if not allowed and (frac is None or cls is WorkloadClass.BATCH):
        return False, f"no scale-to-zero: {cls.value} is not in scale_to_zero_classes (a request at zero waits " \
                      f"a {cold_start_s:g} s cold start)"
    if gaps_s.size == 0:
        return False, "no scale-to-zero: no idle gaps in the request history"
    typical = _time_weighted_median(gaps_s)
    gap_why = f"typical idle gap {typical:g} s vs {long_s:g} s ({settings.scale_to_zero_idle_multiple:g} cold " \
              f"starts of {cold_start_s:g} s)"
    if typical < long_s:
        return False, f"no scale-to-zero: {gap_why}"
    if allowed:
        return True, f"scale to zero: {gap_why}"
    assert frac is not None  # not allowed without it: returned above
    if not forecast:
        return False, (f"no scale-to-zero for {cls.value} yet: no request-rate forecast to wake it ahead of "
                       "demand (its wakes are weighed against the error budget once one exists)")
    span_s = history_span_s(history)
    if span_s < settings.wake_min_history_s:
        return False, (f"no scale-to-zero for {cls.value} yet: {span_s / 3600:.3g} h of request history, under "
                       f"the {settings.wake_min_history_s / 3600:.3g} h its wakes are weighed on "
                       "(scaling.wake_min_history_s)")
    wake_s = settings.wake_s(cold_start_s)
    cooldown = cooldown_s(gaps_s, cold_start_s, True, settings)[0]
    cost = wake_cost(history, cooldown, wake_s)
    budget = frac * settings.ttft_error_budget
    if cost is None or cost > budget:
        spent = "no requests to tell" if cost is None else f"{cost:.2%} of requests"
        return False, (f"no scale-to-zero for {cls.value}: its wakes would have cost {spent} (arrived within "
                       f"{wake_s:g} s of the end of an idle gap over the {cooldown} s cooldown), over "
                       f"{frac:g} x the {settings.ttft_error_budget:.1%} error budget")
    return True, (f"scale to zero: {gap_why}; its wakes would have cost {cost:.2%} of requests (arrived within "
                  f"{wake_s:g} s of the end of an idle gap over the {cooldown} s cooldown), within {frac:g} x the "
                  f"{settings.ttft_error_budget:.1%} error budget; needs something that holds requests at zero and "
                  "activates the workload (KEDA's HTTP add-on, a gateway metric)")


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
    arrived = np.where(np.isfinite(values), np.maximum(values, 0.0), 0.0) * history.step_s
    total = float(arrived.sum())
    if total <= 0:
        return None
    weights = np.clip(wake_s / history.step_s - np.arange(math.ceil(wake_s / history.step_s)), 0.0, 1.0)
    spent = 0.0
    for start, end in zip(*_idle_runs(history), strict=True):
        if (end - start) * history.step_s < cooldown_s or end >= values.size:
            continue
        part = arrived[end:end + weights.size]
        spent += float((part * weights[:part.size]).sum())
    return spent / total


def _time_weighted_median(gaps_s: np.ndarray) -> float:
    ordered = np.sort(gaps_s)
    share = np.cumsum(ordered) / ordered.sum()
    return float(ordered[np.searchsorted(share, 0.5)])


def cooldown_s(gaps_s: np.ndarray, cold_start_s: float, to_zero: bool, settings: ScalingSettings) -> tuple[int, str]:
    """KEDA cooldownPeriod: p90 of the short gaps, clamped to [one cold start, the long-gap length].

    Ski rental: holding an idle replica for one cold start costs what bringing it back costs, so never
    less; gaps shorter than the cooldown keep the replica and avoid a cold start.
    """
    if not to_zero:
        return KEDA_DEFAULT_COOLDOWN_S, f"cooldownPeriod {KEDA_DEFAULT_COOLDOWN_S} s (KEDA default; unused: min >= 1)"
    long_s = settings.scale_to_zero_idle_multiple * cold_start_s
    short = gaps_s[gaps_s < long_s]
    raw = float(np.quantile(short, 0.9)) if short.size else cold_start_s
    poll = settings.polling_interval_s
    value = int(math.ceil(min(max(raw, cold_start_s), long_s) / poll) * poll)
    return value, (f"cooldownPeriod {value} s: p90 of idle gaps under {long_s:g} s is {raw:g} s, kept within "
                   f"[{cold_start_s:g} s cold start, {long_s:g} s], rounded up to the {poll} s polling interval")


def keda_parameters(plan: ScalingPlan, matchers: str = 'namespace="NS"',
                    server_address: str = PLACEHOLDER_PROMETHEUS.url, polling_interval_s: int = 30
                    ) -> dict[str, object]:
    """A KEDA ScaledObject ``spec`` fragment (reference.md §10): a Prometheus trigger on request rate and,
    where the plan sets ``waiting_per_replica``, one on requests waiting (the HPA follows the larger), both
    summed over the series ``matchers`` select (the workload's pods).

    Trigger metadata values are strings, as KEDA expects; each query must return exactly one element.
    """
    query = arrival_rate_query(matchers, plan.rate_window_s)
    waiting_query = f"sum({WAITING_TRIGGER_METRIC}{{{matchers}}})"
    thresholds = trigger_thresholds(plan)
    triggers: list[dict[str, object]] = [{
        "type": "prometheus",
        "metricType": "AverageValue",
        "metadata": {"serverAddress": server_address, "query": query,
                     "threshold": thresholds[RATE_TRIGGER_METRIC],
                     "activationThreshold": f"{plan.activation_threshold:.6g}"},
    }]
    if WAITING_TRIGGER_METRIC in thresholds:
        triggers.append({"type": "prometheus", "metricType": "AverageValue",
                         "metadata": {"serverAddress": server_address, "query": waiting_query,
                                      "threshold": thresholds[WAITING_TRIGGER_METRIC]}})
    return {
        "pollingInterval": polling_interval_s,
        "cooldownPeriod": plan.cooldown_s,
        "minReplicaCount": plan.min_replicas,
        "maxReplicaCount": plan.max_replicas,
        "advanced": {"horizontalPodAutoscalerConfig": {"behavior": hpa_behavior(plan)}},
        "triggers": triggers,
    }


def arrival_rate_query(matchers: str, window_s: int) -> str:
    """PromQL for the requests/s arriving at the pods ``matchers`` select: finished + growth of running +
    growth of waiting (every request that arrives either finished, runs or waits).

    vLLM exports no arrival counter, and the finished rate alone stops at the capacity being served: an
    overloaded service would read as a busy one, and the HPA would add replicas only as the new ones finish
    more. The growth terms (``deriv`` per pod) carry the excess. Each term is 0 where its series are absent
    (a pod with one sample yet), so the query always returns one element; clamped at 0: a queue drained
    faster than the window's finished count reads negative, and KEDA has passed negative values on to the
    HPA (kedacore/keda#7880).
    """
    def term(expr: str) -> str:
        return f"(sum({expr}) or vector(0))"

    window = f"[{window_s}s]"
    return (f"clamp_min({term(f'rate({RATE_TRIGGER_METRIC}{{{matchers}}}{window})')} + "
            f"{term(f'deriv({RUNNING_METRIC}{{{matchers}}}{window})')} + "
            f"{term(f'deriv({WAITING_TRIGGER_METRIC}{{{matchers}}}{window})')}, 0)")


def trigger_thresholds(plan: ScalingPlan) -> dict[str, str]:
    """The plan's per-replica thresholds by the metric each Prometheus trigger reads, as KEDA's metadata strings
    (one place for the report's fragment and the actuator that keeps a live ScaledObject in step)."""
    out = {RATE_TRIGGER_METRIC: f"{plan.target_per_replica:.6g}"}
    if plan.waiting_per_replica is not None:
        out[WAITING_TRIGGER_METRIC] = f"{plan.waiting_per_replica:.6g}"
    return out


def scale_down_window_s(plan: ScalingPlan, default_cold_start_s: float = 180.0) -> int:
    """The HPA scale-down stabilisation window: at least the HPA default of 300 s and at least the cold
    start (releasing a replica needed again within a cold start costs more than keeping it), at most 3600 s."""
    cold = plan.cold_start_s or default_cold_start_s
    return int(min(HPA_MAX_WINDOW_S, max(300, math.ceil(cold))))


def hpa_behavior(plan: ScalingPlan, default_cold_start_s: float = 180.0) -> dict[str, object]:
    """HPA ``behavior`` (reference.md §12): scale up at once, scale down only after one cold start
    (:func:`scale_down_window_s`)."""
    window = scale_down_window_s(plan, default_cold_start_s)
    return {
        "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                    "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15},
                                 {"type": "Percent", "value": 100, "periodSeconds": 15}]},
        "scaleDown": {"stabilizationWindowSeconds": window, "selectPolicy": "Max",
                      "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]},
    }


def positive_number(raw: Any) -> float | None:
    """A positive finite number from an annotation or a trigger's metadata; None when absent or not one."""
    try:
        value = float(raw) if raw is not None else math.nan
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and value > 0 else None
