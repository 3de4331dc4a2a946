"""Replica counts from demand (req/s) and a per-replica target (req/s): the count for the peak, and the min and
max an autoscaler keeps within. maxReplicaCount is bounded by the peak only once ``max_bound_history_s`` of
history exists (before that, ``max_replicas``): a max from a short history turns the first larger burst into a
queue. Pure: no I/O.
"""

from __future__ import annotations

import math

from policies.replicas.estimates import Demand, ReplicaBounds
from recommender.core.settings import ScalingSettings


def significant(value: float, digits: int = 4) -> float:
    """``value`` to ``digits`` significant digits: thresholds are set once here, so every format and the KEDA and
    HPA objects print the same number (``:g`` shows them whole)."""
    return float(f"{value:.{digits}g}")


def replicas_for(demand: float, target_per_replica: float) -> int:
    """ceil(demand / target), 0 for no demand; a tiny tolerance keeps 2.0000000001 at 2."""
    if demand <= 0:
        return 0
    return max(1, math.ceil(demand / target_per_replica - 1e-9))


def replica_bounds(demand: Demand, target: float, to_zero: bool, span_s: float,
                   settings: ScalingSettings, floor: int = 0) -> ReplicaBounds:
    """Recommended (for the peak), min and max replicas at ``target`` req/s per replica, and why; max is bounded
    by the larger of the peak and the observed max only after ``max_bound_history_s`` of history. ``floor``
    (a burst floor, policies/replicas/burst.py) raises min where the workload does not scale to zero, never
    above the replicas for the peak."""
    recommended = replicas_for(demand.peak, target)
    low = 0 if to_zero else max(1, replicas_for(demand.trough, target), min(floor, recommended))
    bounded = span_s >= settings.max_bound_history_s
    high = math.ceil(replicas_for(max(demand.peak, demand.observed_max), target) * (1.0 + settings.max_burst_frac)) \
        if bounded else settings.max_replicas
    capped = []
    if recommended > settings.max_replicas:
        capped = [f"{recommended} replicas needed, capped at max_replicas={settings.max_replicas}: expect queueing"]
    recommended = min(max(recommended, low), settings.max_replicas)
    low, high = min(low, recommended), min(max(high, recommended), settings.max_replicas)
    why = f"{recommended} replicas for {demand.peak:.3g} req/s; min {low}, max {high} " + (
        f"(the larger of forecast and observed peak, +{settings.max_burst_frac:.0%} for bursts)" if bounded
        else f"(the max_replicas ceiling: {span_s / 3600:.3g} h of history is under the "
             f"{settings.max_bound_history_s / 3600:.3g} h that bound bursts)")
    return ReplicaBounds(recommended, low, high, (why, *capped))
