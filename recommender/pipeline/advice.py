"""The last step of a plan: what its formats show beyond the numbers, made here so formatters and the exporter
only render (recommender.core.advice). For each recommendation: how to apply the recommended allocation, the
KEDA and HPA objects of its scaling plan (reading the plan's Prometheus address), the replicas that plan would
have held per step of the snapshot, and the SM share today's and the recommended allocation give.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from policies.autoscalerobjects import autoscaler_objects
from policies.compute import sm_share_held
from policies.replicas import autoscaled_series, history_from_snapshot
from policies.shares import how_to_apply
from recommender.core.advice import Advice, ReplicaSeries, ShareHeld
from recommender.core.catalogue import Catalogue
from recommender.core.inventory import Allocation, Sharing
from recommender.core.plan import Plan, Recommendation
from recommender.core.usage import Snapshot
from recommender.mechanisms.dra import how_to_apply_claim


def with_advice(plan: Plan, snapshot: Snapshot | None, catalogue: Catalogue) -> Plan:
    """``plan`` with every recommendation's :class:`Advice`; the replica series read ``snapshot`` (the one the
    formats are given; none without it)."""
    url = plan.autoscaler_prometheus.url
    return replace(plan, recommendations=tuple(replace(r, advice=advice(r, snapshot, catalogue, url))
                                               for r in plan.recommendations))


def advice(rec: Recommendation, snapshot: Snapshot | None, catalogue: Catalogue, server_address: str) -> Advice:
    """What the formats show of ``rec`` beyond its numbers (see :class:`Advice`)."""
    ref, p = rec.ref, rec.scaling
    return Advice(
        apply=_apply(rec),
        autoscaler=autoscaler_objects(p, ref.namespace, ref.name, ref.kind, server_address) if p else None,
        replicas=replica_series(rec, snapshot),
        share_today=_share(rec.workload.allocation, catalogue),
        share_recommended=_share(rec.recommended, catalogue) if rec.recommended is not None else None,
    )


def _apply(rec: Recommendation) -> dict[str, Any] | None:
    """How to apply the recommended allocation, and where: a DRA claim named after the workload, in its
    namespace; a job's pod template path when not spec.template."""
    if rec.recommended is None:
        return None
    out = how_to_apply(rec.recommended)
    if rec.recommended.sharing is Sharing.DRA:
        out.update(how_to_apply_claim(rec.recommended, rec.ref.name, rec.ref.namespace))
    if rec.workload.template_path:
        out["template"] = rec.workload.template_path
    return out


def replica_series(rec: Recommendation, snapshot: Snapshot | None) -> ReplicaSeries | None:
    """The replicas ``rec``'s scaling plan would have held per step and the demand as replicas at its target;
    None without a snapshot, a plan with a mean, or a request rate."""
    plan = rec.scaling
    if snapshot is None or plan is None or plan.mean_replicas is None or plan.mean_on_shape is None:
        return None
    history = history_from_snapshot(snapshot, rec.workload)
    held = autoscaled_series(history, plan)
    if held is None or history.request_rate_per_s is None:
        return None
    return ReplicaSeries(held, (history.request_rate_per_s / plan.target_per_replica).reindex(held.index))


def _share(alloc: Allocation, catalogue: Catalogue) -> ShareHeld:
    """The SM share of one GPU a replica of ``alloc`` holds (:func:`policies.compute.sm_share_held`)."""
    frac, caveat = sm_share_held(alloc, catalogue)
    return ShareHeld(frac, caveat)
