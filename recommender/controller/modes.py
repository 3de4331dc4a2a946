"""What Recommend and Auto do to one workload: the recommendation annotation and Event, or the regression
check of the last change, then the apply through the :class:`~recommender.controller.actuator.Actuator`.

:func:`summary` is what a policy's status and the workload's annotation show of one recommendation; its
replica capacity outlives a controller restart there (``policies.replicas.recorded_capacity`` reads it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from recommender.controller import records as rec
from recommender.controller.actuator import Actuator
from recommender.controller.changes import desired_from
from recommender.controller.changeset import ObjectRef
from recommender.controller.guardrails import health_from, pod_counts_since, regressions
from recommender.controller.kube import KINDS, Kube, KubeFailure
from recommender.controller.outcome import Outcome, Request
from recommender.controller.policy import Policy
from recommender.core.plan import Recommendation
from recommender.core.resources import VOLCANO_JOB
from recommender.core.usage import Snapshot
from recommender.mechanisms import for_sharing

BASELINE_S = 3600.0  # health before a change: the last hour of the snapshot


class WorkloadModes:
    """Recommend and Auto on one workload at a time. ``shown``: workload key → the last recommendation shown
    (what a read-only install compares with, and the memory of annotation opt-ins, which have no status)."""

    def __init__(self, kube: Kube, actuator: Actuator, exclusive_nodes: Mapping[str, str]) -> None:
        self.kube, self.actuator, self.exclusive_nodes = kube, actuator, exclusive_nodes
        self.shown: dict[str, Any] = {}

    def recommend(self, r: Recommendation, now: datetime, shown: Mapping[str, Any] | None) -> Outcome:
        """Annotation + Event when the recommendation changed; the workload's spec is never touched.

        Unchanged means equal to the workload's annotation or, where that cannot be read or written
        (the read-only install), to ``shown``: what the last cycle recommended (policy status, or memory
        for annotation opt-ins). Without that second check a read-only install repeats the Event forever.
        """
        ref = ObjectRef(r.ref.kind, r.ref.namespace, r.ref.name)
        current = json.loads(json.dumps(summary(r), sort_keys=True))  # as it reads back from the API
        note, obj = "", None
        try:
            obj = self.kube.get(ref.kind, ref.namespace, ref.name)
            if not self.annotate(ref, obj, current):
                self.shown[ref.key] = current
                return Outcome(ref.key, "no-change", "recommendation unchanged")
        except KubeFailure as exc:
            if exc.status != 403:
                return Outcome(ref.key, "failed", str(exc))
            if shown == current:
                self.shown[ref.key] = current
                return Outcome(ref.key, "no-change", "recommendation unchanged (annotation not writable)")
            # the read-only install (deploy/overlays/recommend) may not patch workloads: status and Event only
            note = " (annotation skipped: no patch permission on the workload)"
        self.shown[ref.key] = current
        message = ("; ".join(r.reasons[:3]) or "recommendation updated") + note
        rec.emit_event(self.kube, ref, "RightsizerRecommendation", message, now, uid=rec.uid_of(obj))
        return Outcome(ref.key, "recommended", message)

    def annotate(self, ref: ObjectRef, obj: Mapping[str, Any], summary: Mapping[str, Any]) -> bool:
        """Write the workload's recommendation annotation where it differs from ``summary``; whether it did."""
        text = json.dumps(summary, sort_keys=True)
        if ((obj.get("metadata") or {}).get("annotations") or {}).get(rec.RECOMMENDATION) == text:
            return False
        body = {"metadata": {"annotations": {rec.RECOMMENDATION: text}}}
        self.kube.patch(ref.kind, ref.namespace, ref.name, body, merge=True)
        return True

    def auto(self, policy: Policy, r: Recommendation, snap: Snapshot, now: datetime) -> Outcome:
        assert policy.spec is not None
        spec, ref = policy.spec, ObjectRef(r.ref.kind, r.ref.namespace, r.ref.name)
        if ref.kind not in KINDS:  # a kind it never writes (Kubeflow's jobs, ...): not even read
            why = report_only(r) or f"not applied: the controller does not write {ref.kind}"
            return Outcome(ref.key, "blocked", why)
        try:  # read once: the regression check, the apply and the recommendation annotation all start from it
            obj = self.kube.get(ref.kind, ref.namespace, ref.name)
        except KubeFailure as exc:
            return Outcome(ref.key, "failed", str(exc))
        try:
            record = self.actuator.read_record(obj)
        except rec.RecordError as exc:  # forged, edited or unsigned: act on nothing of this workload
            return self.actuator.refuse(ref, obj, str(exc), now)
        back = self.regression(spec.latency_objectives.ttft_seconds, ref, obj, record, snap, now)
        if back is not None:
            return back
        if r.provisional:  # whatever changeLimits.minHistorySeconds says: shown in status, never applied
            return Outcome(ref.key, "blocked", f"not applied (provisional: {r.history_s / 3600:.1f} h of history, "
                           "under the policy.min_history_s of the recommender's settings)", obj=obj)
        held_back = report_only(r)
        if held_back is not None:
            return Outcome(ref.key, "blocked", held_back, obj=obj)
        desired = desired_from(r, spec.allowed_mechanisms, spec.bounds.min_replicas, spec.bounds.max_replicas,
                               self.exclusive_nodes)
        baseline = health_from(snap, r.ref.key, now - timedelta(seconds=BASELINE_S), now)
        outcome = self.actuator.apply(Request(ref, desired, now, spec.change_limits, r.history_s,
                                              spec.in_window(now), policy.key, "; ".join(r.reasons[:2]), baseline,
                                              BASELINE_S, obj))
        if self.actuator.dry_run or not outcome.ok:
            return outcome
        try:  # the recommendation too, as Recommend writes it: its capacity must outlive a controller restart
            self.annotate(ref, outcome.obj or self.kube.get(ref.kind, ref.namespace, ref.name), summary(r))
        except KubeFailure as exc:
            return replace(outcome, message=f"{outcome.message} (recommendation not recorded: {exc})")
        return outcome

    def regression(self, objective_s: float | None, ref: ObjectRef, obj: dict[str, Any],
                    record: rec.ChangeRecord | None, snap: Snapshot, now: datetime) -> Outcome | None:
        """Roll the last change back when health after it is worse than the baseline recorded with it:
        metrics from the snapshot, OOM kills and preemptions/evictions from the pods' statuses."""
        if record is None or record.status != "applied" or record.watch_until is None or now > record.watch_until:
            return None
        before = record.baseline_health()
        after = health_from(snap, ref.key, record.at, now)
        state = self.actuator.pod_state(obj) if record.pods is not None else None
        if state is not None and record.pods is not None:
            ooms, gone = pod_counts_since(record.pods.terminations, record.pods.disrupted, state)
            after = replace(after, oom_kills=ooms, pod_disruptions=gone)
        why = regressions(before, after, ttft_objective_s=objective_s) if before is not None else ()
        return self.actuator.rollback(ref, now, "regression after the change: " + "; ".join(why)) if why else None


def report_only(r: Recommendation) -> str | None:
    """Why Auto leaves ``r`` alone whatever the policy allows, or None: a report-only mechanism's share (Run:ai:
    its scheduler owns the fraction), or a pod template the controller does not write (a job's task or replica
    spec, not ``spec.template``)."""
    alloc = r.recommended
    mechanism = for_sharing(alloc.sharing) if alloc is not None else None
    if alloc is not None and getattr(mechanism, "report_only", False):
        return f"not applied: {alloc.sharing.value} is report-only (recommended, never written)"
    if r.ref.kind == VOLCANO_JOB:  # its tasks' templates: only the vGPU resources (changes.desired_from)
        return None
    if r.workload.template_path is not None:
        return (f"not applied: the pod template sits at {r.workload.template_path}, which the controller does not "
                f"write ({r.ref.kind}: its operator owns the replica specs; recommended, never written)")
    return None


def summary(r: Recommendation) -> dict[str, Any]:
    """What a policy's status and the workload annotation show of one recommendation."""
    a = r.recommended
    out: dict[str, Any] = {"workload": r.ref.key, "actionable": r.actionable, "confidence": round(r.confidence, 3),
                           "reasons": list(r.reasons[:4])}
    if r.provisional:
        out["provisional"] = True
    if a is not None:
        out |= {"sharing": a.sharing.value, "gpuEquivalents": round(a.gpu_equivalents, 4)}
        if a.mig_profile:
            out["migProfile"] = a.mig_profile
        if a.vllm is not None and a.vllm.gpu_memory_utilization is not None:
            out["gpuMemoryUtilization"] = a.vllm.gpu_memory_utilization
    if r.scaling is not None:  # the capacity outlives a restart here (policies.replicas.recorded_capacity)
        out |= {"replicas": r.scaling.recommended_replicas,
                "replicaCapacity": round(r.scaling.measured_capacity, 4),  # today's shape's, not the estimate
                "capacitySource": r.scaling.capacity_source}
        if r.workload.shape_since is not None:  # the shape it was measured on (recorded_capacity checks it)
            out["shapeSince"] = r.workload.shape_since.isoformat()
    return out
