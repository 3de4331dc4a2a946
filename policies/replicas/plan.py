"""``scaling_plan``: replicas = demand to size for / (capacity at the TTFT objective x (1 - headroom of the
class)), composed from the estimators beside it (capacity, demand, headroom, scale-to-zero, cooldown, replica
counts) and rendered by policies/autoscalerobjects.py. Rates in req/s, times in seconds. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from policies.autoscalerobjects import HPA_MAX_WINDOW_S, QUEUED_S, base_scale_down_window_s
from policies.replicas.burst import BurstFloor, burst_floor
from policies.replicas.capacity import keep_lower_bound, per_replica_capacity
from policies.replicas.cooldown import cooldown_s
from policies.replicas.counts import replica_bounds, significant
from policies.replicas.demand import band_above_mean, demand_to_size, forecasts_to_act_on, rate_forecast
from policies.replicas.estimates import Absent, Capacity, Carried, Demand, NoScalingPlan, ReplicaBounds
from policies.replicas.headroom import error_budget_headroom
from policies.replicas.history import ReplicaHistory, history_span_s, idle_gaps_s, shape_note
from policies.replicas.hold import Hold, band_to_read, scale_down_hold
from policies.replicas.recorded import recorded_capacity
from policies.replicas.recurring import RecurringFloor, ahead_of, recurring_floor
from policies.replicas.simulate import with_means
from policies.replicas.zero import scale_to_zero
from policies.rightscale import ShapeScale, capacity_scale
from recommender.analysis.shape import ttft_objective_from
from recommender.core import usage as m
from recommender.core.annotations import TTFT_OBJECTIVE_ANNOTATION
from recommender.core.inventory import Workload
from recommender.core.plan import Classification, Forecast, ScalingPlan, WorkloadClass, WorkloadConstraints
from recommender.core.settings import ScalingSettings


@dataclass(frozen=True)
class _Inputs:
    """What every step of one plan reads: the workload, its history, class and TTFT objective (s), the seconds of
    history, whether a request-rate forecast is acted on and the least its band lies above its mean (req/s)."""

    workload: Workload
    history: ReplicaHistory
    cls: WorkloadClass
    objective_s: float
    span_s: float
    forecast: bool
    settings: ScalingSettings
    band_rps: float = 0.0


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
    carried = Carried(previous.measured_capacity, f"the previous plan's ({previous.capacity_source})") if previous \
        else recorded_capacity(workload)
    why += shape_note(workload, history, settings.min_capacity_steps)
    span_s = history_span_s(history)
    forecasts, fc_why = forecasts_to_act_on(forecasts, span_s, settings)
    why += [*fc_why, note]
    capacity = keep_lower_bound(per_replica_capacity(workload, history, objective_s, settings), carried)
    demand = demand_to_size(cls, forecasts, history.request_rate_per_s, settings.no_forecast_floor_window_s)
    if isinstance(capacity, Absent) or isinstance(demand, Absent):
        return NoScalingPlan(tuple(x.reason for x in (capacity, demand) if isinstance(x, Absent)))
    inputs = _Inputs(workload, history, cls, objective_s, span_s, rate_forecast(forecasts) is not None, settings,
                     band_above_mean(cls, forecasts) if settings.scale_down_hold_reads_band else 0.0)
    plan = _on_shape(inputs, capacity, demand, shape, why)
    today = _on_today(inputs, plan, demand)
    planned = plan if capacity.is_lower_bound else \
        with_means(plan, today, workload, history, known=shape is not None and shape.factor is not None)
    return replace(planned, on_today=replace(today, reasons=()) if plan.capacity_estimated else None)


def _on_shape(x: _Inputs, capacity: Capacity, demand: Demand, shape: ShapeScale | None, why: list[str]
              ) -> ScalingPlan:
    """The plan on the recommended ``shape`` (today's capacity scaled to it), its reasons after ``why``."""
    s, basis = x.settings, capacity.rps
    headroom = error_budget_headroom(x.cls, s.headroom_frac.get(x.cls.value, 0.0), x.workload, x.history,
                                     basis if capacity.read_from_history else None, x.objective_s, s)
    scale, scale_why = capacity_scale(shape, basis)
    cap = basis * scale
    target = significant(cap * (1.0 - headroom.frac))
    cold_s = s.cold_start_s(x.workload.cold_start_s)
    gaps = idle_gaps_s(x.history)
    zero = scale_to_zero(x.cls, gaps, cold_s, s, x.history, forecast=x.forecast)
    burst = _burst_floor(x, cap, target, zero.allowed)
    hold = _hold(x, cap, target, zero.allowed)
    recurring = _recurring(x, target, zero.allowed)
    bounds = _lift(replica_bounds(demand, target, zero.allowed, x.span_s, s, burst.replicas if burst else 0),
                   recurring, s.max_replicas)
    cooldown = cooldown_s(gaps, cold_s, zero.allowed, s)
    act = significant(1.0 / cold_s) if zero.allowed else 0.0
    waiting = significant(target * x.objective_s)
    why = [*why, *capacity.reasons, *scale_why, *demand.reasons, *headroom.reasons,
           f"target {target:g} req/s per replica = {cap:.3g} x (1 - {headroom.frac:.0%} headroom for {x.cls.value})",
           *([burst.reason] if burst else []), *([hold.reason] if hold and hold.reason else []),
           *([recurring.reason] if recurring and recurring.reason else []), *bounds.reasons,
           zero.reason, cooldown.reason,
           f"second trigger at {waiting:g} requests waiting per replica: what a replica starts within the "
           f"{x.objective_s:g} s objective at its target (it follows a queue at once, the rate over its window)"]
    why.append(f"third trigger on the objective being missed: while over {s.ttft_error_budget:.3g} of the "
               f"requests of the last {s.rate_window_s} s took over {x.objective_s:g} s to a first token and waited "
               f"over {QUEUED_S:g} s in the queue (a miss on its own prefill is no replica's), the replicas serving "
               "plus that share more, whatever the capacity above says")
    if zero.allowed:
        why.append(f"activation above {act:g} req/s: wake when the forecast expects a request within one "
                   f"cold start ({cold_s:g} s), before the queue builds")
    if capacity.is_lower_bound:
        why.append("no mean replica estimate: the capacity is only a lower bound")
    return ScalingPlan(metric=m.REQUEST_RATE, per_replica_capacity=cap, target_per_replica=target,
                       min_replicas=bounds.low, max_replicas=bounds.high, recommended_replicas=bounds.recommended,
                       activation_threshold=act, cooldown_s=cooldown.seconds, scale_to_zero=zero.allowed,
                       headroom_frac=headroom.frac, cold_start_s=x.workload.cold_start_s, reasons=tuple(why),
                       capacity_source=capacity.source.value, waiting_per_replica=waiting,
                       rate_window_s=s.rate_window_s, demand_source="forecast" if x.forecast else "observed",
                       basis_capacity=basis, capacity_scale=scale, shape=shape.shape if shape else None,
                       ttft_objective_s=x.objective_s, ttft_error_budget=s.ttft_error_budget,
                       scale_down_window_s=hold.seconds if hold and hold.reason else None)


def _on_today(x: _Inputs, plan: ScalingPlan, demand: Demand) -> ScalingPlan:
    """The same plan on today's shape: today's capacity at the same headroom, rounded as the plan's (at scale 1,
    the plan itself)."""
    basis = plan.measured_capacity
    at = significant(basis * (1.0 - plan.headroom_frac))
    burst = _burst_floor(x, basis, at, plan.scale_to_zero)
    n = _lift(replica_bounds(demand, at, plan.scale_to_zero, x.span_s, x.settings, burst.replicas if burst else 0),
              _recurring(x, at, plan.scale_to_zero), x.settings.max_replicas)
    return replace(plan, per_replica_capacity=basis, target_per_replica=at,
                   waiting_per_replica=significant(at * x.objective_s), recommended_replicas=n.recommended,
                   min_replicas=n.low, max_replicas=n.high, capacity_scale=1.0, shape=None)


def _burst_floor(x: _Inputs, capacity_rps: float, target_rps: float, to_zero: bool) -> BurstFloor | None:
    """The burst floor where ``burst_floor_budget_frac`` opts in and the class is latency-bound and stays up."""
    frac = x.settings.burst_floor_budget_frac
    if frac is None or to_zero or x.cls is WorkloadClass.BATCH:
        return None
    wake_s = x.settings.wake_s(x.workload.cold_start_s)
    return burst_floor(x.history, capacity_rps, target_rps, wake_s, frac * x.settings.ttft_error_budget)


def _hold(x: _Inputs, capacity_rps: float, target_rps: float, to_zero: bool) -> Hold | None:
    """The scale-down hold where ``scale_down_hold_budget_frac`` is set and the class is latency-bound and stays
    up (scale to zero has its cooldown instead); read against the forecast band the plan serves ahead where
    ``scale_down_hold_reads_band`` opts in and the history's misses after a scale-in do not contradict it."""
    frac = x.settings.scale_down_hold_budget_frac
    if frac is None or to_zero or x.cls is WorkloadClass.BATCH:
        return None
    base = base_scale_down_window_s(x.workload.cold_start_s, x.settings.default_cold_start_s)
    wake, allowance = x.settings.wake_s(x.workload.cold_start_s), frac * x.settings.ttft_error_budget
    band, why = band_to_read(x.history, x.band_rps, x.objective_s, wake, HPA_MAX_WINDOW_S, allowance)
    hold = scale_down_hold(x.history, capacity_rps, target_rps, wake, base, HPA_MAX_WINDOW_S, allowance, band)
    return replace(hold, reason=f"{hold.reason}; {why}") if hold and hold.reason and why else hold


def _recurring(x: _Inputs, target_rps: float, to_zero: bool) -> RecurringFloor | None:
    """The recurring-burst floor where ``recurring_floor_interval_s`` opts in and the class is latency-bound and
    stays up."""
    interval = x.settings.recurring_floor_interval_s
    if interval is None or to_zero or x.cls is WorkloadClass.BATCH:
        return None
    return recurring_floor(x.history, target_rps, ahead_of(interval, x.settings.wake_s(x.workload.cold_start_s)))


def _lift(bounds: ReplicaBounds, floor: RecurringFloor | None, cap: int) -> ReplicaBounds:
    """``bounds`` with min (and the recommendation and max with it) raised to a recurring-burst floor, at most
    ``cap`` (max_replicas): unlike the burst floor it is not bounded by the forecast's peak, which is what it
    corrects."""
    if floor is None or floor.replicas <= bounds.low:
        return bounds
    low = min(floor.replicas, cap)
    return replace(bounds, low=low, recommended=max(bounds.recommended, low), high=max(bounds.high, low))


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
