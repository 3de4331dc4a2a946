"""Requests/s one replica serves at the TTFT objective: measured at the knee history shows (the rate per replica
from which the objective is more often missed than not; replicas counted per step, as they served) unless a
configured figure lies within the knee's bracket; else configured; else the rate served within the objective
as a lower bound, which never falls below the last cycle's (:func:`keep_lower_bound`). Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from policies.replicas.estimates import Absent, Capacity, CapacitySource, Carried
from policies.replicas.history import ReplicaHistory, changed_within, rescue_s, step_outcomes
from policies.replicas.recorded import CAPACITY_RPS_RANGE, capacity_rps
from recommender.core.annotations import CAPACITY_ANNOTATION, quoted
from recommender.core.inventory import Workload
from recommender.core.settings import ScalingSettings


@dataclass(frozen=True)
class Knee:
    """Where the objective starts to be missed, in requests/s per replica: ``below`` is the highest rate at
    which a miss is not yet likely, ``above`` the lowest at which it is (over ``steps`` steps)."""

    below: float
    above: float
    steps: int


def per_replica_capacity(workload: Workload, history: ReplicaHistory, objective_s: float,
                         settings: ScalingSettings) -> Capacity | Absent:
    """Requests/s one replica serves at the objective, its source and reasons; why not where unknown.

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
    configured, conf_src = configured_capacity(workload, settings)
    rescue = rescue_s(settings, workload.cold_start_s) if settings.count_rescued_steps else 0.0
    steps = step_outcomes(workload, history, objective_s, rescue) if settings.capacity_from_history else None
    good = np.array([]) if steps is None else steps.loc[~steps["missed"], "per"].to_numpy(dtype="float64")
    enough = good.size >= settings.min_capacity_steps
    knee = locate_knee(steps, settings.min_knee_steps) if steps is not None and enough else None
    if knee is not None:
        return _at_knee(knee, configured, conf_src)
    if configured:
        return Capacity(configured, CapacitySource.CONFIGURED,
                        (f"capacity {configured:.3g} req/s per replica from {conf_src}",))
    if enough:
        return _lower_bound(good, settings.capacity_quantile)
    if changed_within(workload, history):  # too soon after a change of shape: across it, flagged, rather than none
        return _across_change(workload, history, objective_s, settings)
    raw = workload.annotations.get(CAPACITY_ANNOTATION)
    low, high = CAPACITY_RPS_RANGE
    annotated = (f"{CAPACITY_ANNOTATION}={quoted(raw)} is not a number of requests/s from {low:g} to {high:g}"
                 if raw else f"no {CAPACITY_ANNOTATION} annotation")
    return Absent(f"no per-replica capacity: fewer than {settings.min_capacity_steps} steps with request rate and "
                  f"TTFT that met the objective, and {annotated}")


def _at_knee(knee: Knee, configured: float | None, conf_src: str) -> Capacity:
    """The configured figure where it lies within the knee's bracket, else the knee's."""
    bracket = (f"the objective met up to {knee.below:.3g} req/s per replica and more often missed than not "
               f"from {knee.above:.3g} ({knee.steps} steps)")
    if configured and knee.below <= configured <= knee.above:
        return Capacity(configured, CapacitySource.CONFIGURED, (
            f"capacity {configured:.3g} req/s per replica from {conf_src}, consistent with history: {bracket}",))
    return Capacity(knee.below, CapacitySource.MEASURED, (
        f"capacity {knee.below:.3g} req/s per replica measured at the knee: " + bracket
        + (f" (configured {configured:.3g} disagrees)" if configured else ""),))


def _lower_bound(good: np.ndarray, quantile: float) -> Capacity:
    """The ``quantile`` of the per-replica rates that met the objective: a lower bound without a knee."""
    measured = float(np.quantile(good, quantile))
    return Capacity(measured, CapacitySource.LOWER_BOUND, (
        f"capacity {measured:.3g} req/s per replica: p{quantile * 100:g} of the rate per "
        f"replica over {good.size} steps that met the objective; no knee (no rate at which the objective was "
        f"more often missed than not), so this is a lower bound (set {CAPACITY_ANNOTATION} to size tighter)",))


def _across_change(workload: Workload, history: ReplicaHistory, objective_s: float, settings: ScalingSettings
                   ) -> Capacity | Absent:
    """The capacity read from both shapes' steps, flagged, until enough of the new shape's met the objective."""
    across = per_replica_capacity(replace(workload, shape_since=None), history, objective_s, settings)
    if isinstance(across, Absent):
        return across
    return replace(across, reasons=(
        f"fewer than {settings.min_capacity_steps} steps met the objective since the replicas took their current "
        f"shape at {workload.shape_since:%Y-%m-%d %H:%M} UTC: capacity read across the change, from both shapes, "
        "until they do", *across.reasons))


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
    from sklearn.isotonic import IsotonicRegression  # here: scikit-learn takes ~1 s to import

    per = frame["per"].to_numpy(dtype="float64")
    chance = IsotonicRegression(increasing=True).fit_transform(per, frame["missed"].to_numpy(dtype="float64"))
    likely = np.flatnonzero(chance > 0.5)
    if not likely.size or likely[0] == 0 or frame["missed"].iloc[likely[0]:].sum() < min_missed:
        return None
    return Knee(float(per[likely[0] - 1]), float(per[likely[0]]), int(per.size))


def keep_lower_bound(capacity: Capacity | Absent, previous: Carried | None) -> Capacity | Absent:
    """A lower-bound capacity raised to the last cycle's (``previous``) where that was higher.

    Without a knee the capacity is the rate the replicas served within the objective, and under our own
    autoscaling they serve at the previous plan's target, headroom below its capacity: read afresh each
    cycle, every plan would shrink the next one's target (benchmarks/REPLAY.md, "Capacity at the knee").
    The previous capacity was a knee, a configured figure or an earlier lower bound, all evidence the
    history has not contradicted (misses above it would locate a knee, which takes precedence). It stops
    the fall; it cannot lift a low first reading, which only a knee or a configured figure replaces.
    """
    if isinstance(capacity, Absent) or previous is None:
        return capacity
    if capacity.source is not CapacitySource.LOWER_BOUND or previous.rps <= capacity.rps:
        return capacity
    return Capacity(previous.rps, capacity.source, (
        *capacity.reasons, f"kept at {previous.rps:.3g} req/s per replica, {previous.came_from}: under our own "
                           f"autoscaling the replicas served at its target, so a lower bound read from "
                           f"them would shrink each cycle"))


def configured_capacity(workload: Workload, settings: ScalingSettings) -> tuple[float | None, str]:
    """The configured capacity (req/s per replica) and where from: the annotation, else the settings' (or None)."""
    value = capacity_rps(workload.annotations.get(CAPACITY_ANNOTATION))
    if value is not None:
        return value, CAPACITY_ANNOTATION
    return settings.replica_capacity_rps, "settings (scaling.replica_capacity_rps)"
