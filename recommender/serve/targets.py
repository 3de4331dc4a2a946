"""Plan → what KEDA and the HPA should see for one workload: a metric value, a target, active or not.

Pure functions over the plan and its age. The servers (gRPC, metrics-api, external metrics API) all
answer from :func:`target_for`, so every door gives the same number.

Time: forecasts live on the plan's clock. "Now" on that clock is ``plan.generated_at`` plus the
seconds since the plan was published, so a plan made from a past window (``--demo``, ``--end``) is
read as if it had just been made.

Safety: a plan older than ``fallback_after_s``, or one whose forecast has run out, never lets a
workload scale to zero: the value keeps at least max(recommended, min, 1) replicas and it is active.

Only a forecast the plan acted on is served (``ScalingPlan.demand_source``): on too little history the plan
sizes on the observed rate, and its recommended replicas are the value, not the widened band.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

import numpy as np
import pandas as pd

from recommender.analysis.forecast import upper_band
from recommender.core.inventory import WorkloadRef
from recommender.core.plan import Forecast, Plan, Recommendation, ScalingPlan
from recommender.serve.settings import ServeSettings

DESIRED_REPLICAS = "desired_replicas"  # external metrics API: value = replicas, HPA target AverageValue 1


class PlanState(StrEnum):
    """How far a plan may be trusted, by its age."""

    FRESH = "fresh"
    STALE = "stale"  # older than stale_after_s: served, with a warning and a staleness metric
    FALLBACK = "fallback"  # older than fallback_after_s: safe values only


class ErrorKind(StrEnum):
    """Why no target could be given; each server maps it to its own status code."""

    NOT_FOUND = "not found"  # no such workload, or no such metric
    INVALID = "invalid"  # the request itself is malformed
    NO_SCALING = "no scaling plan"  # the workload is known but the plan gives it no ScalingPlan
    UNAVAILABLE = "unavailable"  # no plan published yet


class TargetError(Exception):
    """A request the plan cannot answer; ``str()`` is the one-line message for the client."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class WorkloadTarget:
    """One workload's scaling signal. ``value`` is in ``metric`` units, summed over the workload:
    with an ``AverageValue`` target of ``target_per_replica`` the HPA asks ceil(value / target) replicas."""

    ref: WorkloadRef
    metric: str
    value: float
    target_per_replica: float
    active: bool
    demand: float | None  # forecast demand over the look-ahead (band), None without a usable forecast
    min_replicas: int
    max_replicas: int
    recommended_replicas: int
    activation_threshold: float
    state: PlanState
    reason: str

    @property
    def desired_replicas(self) -> float:
        return self.value / self.target_per_replica


def plan_state(age_s: float, settings: ServeSettings) -> PlanState:
    if age_s > settings.fallback_after_s:
        return PlanState.FALLBACK
    return PlanState.STALE if age_s > settings.stale_after_s else PlanState.FRESH


def parse_workload(text: str) -> tuple[str | None, str]:
    """``Deployment/llama`` → ("Deployment", "llama"); ``llama`` → (None, "llama")."""
    parts = text.strip().split("/")
    if len(parts) == 1 and parts[0]:
        return None, parts[0]
    if len(parts) == 2 and all(parts):
        return parts[0], parts[1]
    raise TargetError(ErrorKind.INVALID, f"workload {text!r} is not 'Kind/name' or 'name'")


def find_recommendation(plan: Plan, namespace: str, workload: str) -> Recommendation:
    """The one recommendation for ``workload`` (``Kind/name`` or ``name``) in ``namespace``."""
    if not namespace:
        raise TargetError(ErrorKind.INVALID, "namespace is empty")
    kind, name = parse_workload(workload)
    found = [r for r in plan.recommendations if r.ref.namespace == namespace and r.ref.name == name
             and (kind is None or r.ref.kind.lower() == kind.lower())]
    if not found:
        raise TargetError(ErrorKind.NOT_FOUND, f"no workload {workload!r} in namespace {namespace!r} in the plan")
    if len(found) > 1:
        kinds = ", ".join(sorted(r.ref.kind for r in found))
        raise TargetError(ErrorKind.INVALID, f"{workload!r} in {namespace!r} is ambiguous ({kinds}): use Kind/name")
    return found[0]


def scaling_of(rec: Recommendation) -> ScalingPlan:
    """The recommendation's ScalingPlan, checked enough that dividing by its target is safe."""
    s = rec.scaling
    if s is None:
        why = "; ".join(rec.reasons[:1]) or "no reason given"
        raise TargetError(ErrorKind.NO_SCALING, f"the plan has no scaling plan for {rec.ref} ({why})")
    if not (math.isfinite(s.target_per_replica) and s.target_per_replica > 0):
        raise TargetError(ErrorKind.NO_SCALING, f"the scaling plan of {rec.ref} has no positive target per replica")
    return s


def target_for(plan: Plan, rec: Recommendation, age_s: float, settings: ServeSettings) -> WorkloadTarget:
    """The value, target and activity KEDA/the HPA should see for ``rec`` now (see the module doc)."""
    s = scaling_of(rec)
    state = plan_state(age_s, settings)
    floor = max(s.recommended_replicas, s.min_replicas, 1) * s.target_per_replica
    if state is PlanState.FALLBACK:
        why = f"plan is {age_s:.0f} s old (> {settings.fallback_after_s:.0f} s): safe value, never zero"
        return _target(rec, s, state, floor, True, None, why)
    forecast = next((f for f in rec.forecasts if f.metric == s.metric), None) \
        if s.demand_source == "forecast" else None  # a forecast the plan did not act on, the scaler does not either
    now = pd.Timestamp(plan.generated_at + timedelta(seconds=age_s))
    horizon_s = max(s.cold_start_s or 0.0, settings.min_horizon_s)
    demand = None if forecast is None else demand_ahead(forecast, now, horizon_s, settings.band)
    if forecast is not None and demand is None:  # run out (the plan's horizon is behind us) or no finite value
        return _target(rec, s, state, floor, True, None, f"no usable forecast of {s.metric} for now: safe value")
    if demand is None:
        value = max(s.recommended_replicas, s.min_replicas) * s.target_per_replica
        yet = "" if s.demand_source == "forecast" else " acted on yet (too little history)"
        why = f"no forecast of {s.metric}{yet}: the plan's {s.recommended_replicas} recommended replicas"
        return _target(rec, s, state, value, s.recommended_replicas > 0 or not s.scale_to_zero, None, why)
    value = max(demand, s.min_replicas * s.target_per_replica)
    active = demand > s.activation_threshold or not s.scale_to_zero
    why = f"forecast {settings.band} of {s.metric} over the next {horizon_s:.0f} s: {demand:.4g}"
    return _target(rec, s, state, value, active, demand, why)


def _target(rec: Recommendation, s: ScalingPlan, state: PlanState, value: float, active: bool,
            demand: float | None, reason: str) -> WorkloadTarget:
    return WorkloadTarget(rec.ref, s.metric, value, s.target_per_replica, active, demand, s.min_replicas,
                          s.max_replicas, s.recommended_replicas, s.activation_threshold, state, reason)


def demand_ahead(forecast: Forecast, now: pd.Timestamp, horizon_s: float, band: str) -> float | None:
    """Highest of the current mean and the ``band`` over [now, now + horizon]; None once it has run out.

    A row stands for the step that starts at its index; the row holding ``now`` counts (before the
    first row, the first row does). Non-finite values, and a frame we cannot read, count as no forecast.
    """
    frame = forecast.frame
    rows = forecast_rows(frame, now, horizon_s)
    if rows is None or "mean" not in frame.columns:
        return None
    window = frame.iloc[rows[0]:rows[1]]
    values = pd.concat([window[upper_band(frame, band)], window["mean"].iloc[:1]]).to_numpy(dtype=float)
    finite = values[np.isfinite(values)]
    return float(max(finite.max(), 0.0)) if finite.size else None


def forecast_rows(frame: pd.DataFrame, now: pd.Timestamp, horizon_s: float = 0.0) -> tuple[int, int] | None:
    """Positions [first, last) of the rows from the one holding ``now`` to ``now + horizon_s``; None when
    the forecast is empty, has run out, or its index is not a time index."""
    if frame.empty or not isinstance(frame.index, pd.DatetimeIndex):
        return None
    index = frame.index.as_unit("ns")  # any stored resolution; now carries nanoseconds
    now = now.tz_localize("UTC") if now.tz is None else now
    now = now.tz_convert(index.tz) if index.tz is not None else now.tz_convert(None)
    step = index[1] - index[0] if len(index) > 1 else pd.Timedelta(seconds=horizon_s)
    if now >= index[-1] + step:
        return None
    first = max(0, int(index.searchsorted(now, side="right")) - 1)
    last = int(index.searchsorted(now + pd.Timedelta(seconds=horizon_s), side="right"))
    return first, max(last, first + 1)


def all_targets(plan: Plan, age_s: float, settings: ServeSettings) -> list[WorkloadTarget]:
    """Targets for every workload the plan gives a usable ScalingPlan (for /metrics and discovery)."""
    out = []
    for rec in plan.recommendations:
        try:
            out.append(target_for(plan, rec, age_s, settings))
        except TargetError:
            continue
    return out
