"""A policy's replica bounds (``bounds.minReplicas`` / ``maxReplicas``) over a scaling plan: every replica
count the plan advises stays within them, so status, annotations, the served KEDA targets and Auto agree,
and the reasons say what a bound moved."""

from __future__ import annotations

from dataclasses import replace

from recommender.core.plan import ScalingPlan, WorkloadConstraints


def within_replica_bounds(plan: ScalingPlan, bounds: WorkloadConstraints | None) -> ScalingPlan:
    """Recommended and minimum replicas clamped to [min, max], the maximum to max (never under the minimum
    or 1); a minimum of 1 or more rules out scaling to zero. ``mean_replicas`` stays the unbounded estimate."""
    if bounds is None or (bounds.min_replicas is None and bounds.max_replicas is None):
        return plan
    lo = bounds.min_replicas or 0
    hi = bounds.max_replicas if bounds.max_replicas is not None else max(plan.max_replicas, lo)

    def clamp(n: int) -> int:
        return max(lo, min(hi, n))

    low = clamp(plan.min_replicas)
    new = {"recommended": clamp(plan.recommended_replicas), "min": low, "max": max(low, 1, clamp(plan.max_replicas))}
    old = {"recommended": plan.recommended_replicas, "min": plan.min_replicas, "max": plan.max_replicas}
    moved = [f"{k} {old[k]} → {v}" for k, v in new.items() if v != old[k]]
    zero = plan.scale_to_zero and lo == 0
    moved += ["no scale to zero"] if plan.scale_to_zero and not zero else []
    span = f"{lo}..{bounds.max_replicas if bounds.max_replicas is not None else 'any'}"
    why = (f"replicas {', '.join(moved)}: bounds.minReplicas/maxReplicas {span} ({bounds.source})" if moved
           else f"replicas within bounds.minReplicas/maxReplicas {span} ({bounds.source})")
    today = within_replica_bounds(plan.on_today, bounds) if plan.on_today is not None else None
    return replace(plan, recommended_replicas=new["recommended"], min_replicas=new["min"], max_replicas=new["max"],
                   scale_to_zero=zero, reasons=(*plan.reasons, why), on_today=today)
