"""Applies a :class:`Desired` state to one workload through its guardrails, records it, rolls it back.

Order of one apply: read → which autoscaler owns the replicas (where the policy allows replicas) → plan
(pure) → guardrails (pure) → where the change moves the pods to other nodes, whether a node can take one
(pure, over the nodes and pods listed) → log the dry-run diff → the patch of the HPA's or KEDA ScaledObject's
min/max if one owns the replicas → one guarded JSON patch on the workload that also writes the change record.
``spec.replicas`` is never written under an autoscaler, nor when the autoscalers cannot be read. A failed
second write undoes the first, so a workload is never left half-changed. Every failure comes back as an
:class:`Outcome` with one line; nothing here raises to the loop. Undoing a change is
:mod:`recommender.controller.rollback`; the request and outcome records are in :mod:`recommender.controller.outcome`.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from recommender.controller import dra
from recommender.controller import records as rec
from recommender.controller import rollback as undo
from recommender.controller.autoscaling import hpa_changes, scaledobject_changes
from recommender.controller.changes import Desired, plan_changes
from recommender.controller.changeset import ChangeSet, ObjectRef
from recommender.controller.guardrails import (
    Health,
    PodState,
    may_act,
    pod_counts_within,
    pod_state,
    step_keda,
    step_replicas,
    step_threshold,
    workload_pods,
)
from recommender.controller.kube import Conflict, Kube, KubeFailure, NotFound
from recommender.controller.outcome import Outcome, Request
from recommender.controller.patch import inverse, removed_parents, to_patch
from recommender.controller.placement import unplaceable
from recommender.controller.signing import Signer
from recommender.core.autoscalers import HPA, SCALED_OBJECT, Autoscaler, describe, owners

log = logging.getLogger("rightsizer.actuator")


class Actuator:
    """``signer`` signs and checks change records (:mod:`recommender.controller.signing`); without one
    nothing is written and no record is trusted (``no_signer`` says why). ``selector_keys``: the node-selector
    keys the controller manages (``mechanisms.exclusive_node_selector``)."""

    def __init__(self, kube: Kube, dry_run: bool = False, signer: Signer | None = None,
                 selector_keys: tuple[str, ...] = ()) -> None:
        self.kube = kube
        self.dry_run = dry_run
        self.signer = signer
        self.no_signer = "no signing key loaded"
        self.selector_keys = selector_keys
        self._refused: set[tuple[str, str]] = set()  # (workload, why) already sent as a Warning Event

    def apply(self, req: Request) -> Outcome:
        key = req.ref.key
        try:
            return self._apply(req)
        except Conflict as exc:
            return Outcome(key, "conflict", str(exc))
        except rec.RecordError as exc:
            return self.refuse(req.ref, req.obj, str(exc), req.now)
        except KubeFailure as exc:
            return Outcome(key, "failed", str(exc))

    def refuse(self, ref: ObjectRef, obj: dict[str, Any] | None, why: str, now: datetime) -> Outcome:
        """Nothing written; a Warning Event on the workload (once per reason in this process), one line back."""
        message = f"{why}; nothing changed (remove the annotation {rec.LAST_CHANGE} to let the controller act again)"
        if (ref.key, why) not in self._refused:
            self._refused.add((ref.key, why))
            rec.emit_event(self.kube, ref, "RightsizerRecordRefused", message, now, warning=True, uid=rec.uid_of(obj))
        return Outcome(ref.key, "refused", message, obj=obj)

    def read_record(self, obj: dict[str, Any]) -> rec.ChangeRecord | None:
        """The workload's record when the controller may act on it (raises RecordError otherwise)."""
        return rec.read_record(obj, self.signer, self.selector_keys)

    def _apply(self, req: Request) -> Outcome:
        ref, key = req.ref, req.ref.key
        obj = req.obj if req.obj is not None else self.kube.get(ref.kind, ref.namespace, ref.name)
        previous = self.read_record(obj)
        owned = self._owner(req)
        if isinstance(owned, Outcome):
            return replace(owned, obj=obj)
        desired, scaler, unknown = owned
        sets = _plan(obj, desired, scaler, req.limits.max_replica_change_per_step)
        switch = None
        if desired.claim is not None:  # a DRA share: a claim object of ours and the reference to it
            got = dra.claim_switch(self.kube, obj, desired.claim)
            if isinstance(got, str):
                desired = replace(desired, reasons=(*desired.reasons, got))
            else:
                switch, sets = got, dra.with_switch(sets, got)
        if all(s.empty for s in sets):
            if unknown:
                return Outcome(key, "blocked", f"not applied ({unknown})", obj=obj)
            skipped = "; ".join([*(x for s in sets for x in s.skipped), *desired.reasons])
            return Outcome(key, "no-change", "already as recommended" + (f" ({skipped})" if skipped else ""), obj=obj)
        hpa_notes = sets[0].skipped if scaler is not None and scaler.kind == HPA else ()
        notes = [*([unknown] if unknown else []), *hpa_notes, *desired.reasons]
        note = f" ({'; '.join(notes)})" if notes else ""
        past = previous.change_times() if previous else []
        verdict = may_act(req.limits, req.history_s, past, req.now, req.window_open)
        diff = "; ".join(s.diff() for s in sets if not s.empty) + note
        if switch is not None and not switch.exists:
            diff = f"create {switch.kind} {switch.name}; {diff}"
        if not verdict.allowed:
            return Outcome(key, "blocked", f"not applied ({'; '.join(verdict.reasons)}): {diff}", obj=obj)
        if desired.moves_to is not None:
            template = (obj.get("spec") or {}).get("template") or {}
            selector, gpus = desired.moves_to
            why = unplaceable(template, selector, gpus, self.kube.list("Node"), self.kube.list("Pod"))
            if why is not None:
                return Outcome(key, "blocked", f"not applied ({why}): {diff}", obj=obj)
        log.info("dry-run diff %s: %s", key, diff)
        if self.dry_run:
            return Outcome(key, "dry-run", diff)
        if self.signer is None:
            return Outcome(key, "failed", f"not applied ({self.no_signer}: a change is never written without its "
                           f"signed record): {diff}", obj=obj)
        baseline, marks = req.baseline, None
        state = self.pod_state(obj)
        if state is not None:
            ooms, gone = pod_counts_within(state, req.now - timedelta(seconds=req.baseline_s), req.now)
            baseline = replace(baseline or Health(), oom_kills=ooms, pod_disruptions=gone)
            marks = rec.PodMarks(terminations=dict(state.terminations), disrupted=sorted(state.disrupted))
        record = rec.ChangeRecord(
            workload=key, at=req.now, policy=req.policy, reason=req.reason,
            sets=[rec.RecordedSet.of(s, removed_parents(scaler.obj if scaler and s.target.kind == scaler.kind else obj,
                                                        s))
                  for s in sets if not s.empty], baseline=rec.health_dict(baseline),
            watch_until=req.now + timedelta(seconds=req.limits.watch_seconds),
            history=past[-rec.MAX_HISTORY:], pods=marks)
        created = dra.create(self.kube, switch)
        try:
            after = self.write(obj, sets, record)
        except KubeFailure:
            if created and switch is not None and (why := dra.remove(self.kube, switch)) is not None:
                log.error("could not delete %s %s after a failed write: %s", switch.kind, switch.name, why)
            raise
        rec.emit_event(self.kube, ref, "RightsizerApplied", diff, req.now, uid=rec.uid_of(obj))
        return Outcome(key, "applied", diff, record, obj=after if after.get("metadata") else None)

    def _owner(self, req: Request) -> tuple[Desired, Autoscaler | None, str | None] | Outcome:
        """What may be done to the replicas: ``desired`` without ``spec.replicas`` where an autoscaler owns them
        (its bounds instead), without either where that cannot be told (and why), or a blocked outcome where two
        autoscalers own them. Only asked where the policy allows replicas: otherwise none of this is touched."""
        desired = req.desired
        if desired.replicas is None and desired.keda_min is None:
            return desired, None, None
        found = self.autoscalers(req.ref)
        if isinstance(found, str):  # fail closed: nothing an autoscaler may own is written
            log.warning("%s: %s", req.ref.key, found)
            return replace(desired, replicas=None, keda_min=None, keda_max=None), None, found
        if len(found) > 1:
            why = f"{len(found)} autoscalers target {req.ref.key} ({describe(found)}) and fight over its replicas"
            log.warning("not applied: %s", why)
            return Outcome(req.ref.key, "blocked", f"not applied: {why}; leave one")
        return (replace(desired, replicas=None), found[0], None) if found else (desired, None, None)

    def write(self, obj: dict, sets: list[ChangeSet], record: rec.ChangeRecord) -> dict[str, Any]:
        """Other objects first (guarded), then the workload with its record; undo the others on failure. The
        workload as the server answered the write."""
        done: list[ChangeSet] = []
        try:
            for cs in sets[:-1]:
                if not cs.empty:
                    self._patch(cs, None)
                    done.append(cs)
            return self._patch(sets[-1], obj, record)
        except KubeFailure:
            for cs in reversed(done):
                try:
                    self._patch(inverse(cs), None)
                except KubeFailure as undo:
                    log.error("could not undo %s after a failed write: %s", cs.target.key, undo)
            raise

    def _patch(self, cs: ChangeSet, obj: dict | None, record: rec.ChangeRecord | None = None) -> dict[str, Any]:
        rv = None
        extra: list[dict] = []
        if obj is not None:
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if record is not None:
                assert self.signer is not None, "records are written only with a signing key"
                extra = rec.annotation_ops(obj, rec.record_annotations(obj, record, self.signer))
        target = cs.target
        return self.kube.patch(target.kind, target.namespace, target.name, to_patch(cs, rv, extra))

    def rollback(self, ref: ObjectRef, now: datetime, reason: str) -> Outcome:
        """Undo the last change to ``ref`` (:func:`recommender.controller.rollback.rollback`)."""
        return undo.rollback(self, ref, now, reason)

    def pod_state(self, obj: dict[str, Any]) -> PodState | None:
        """OOM kills and disruptions as the workload's pod statuses show them; None when pods cannot be
        read (the guardrails then have no pod evidence, which never blocks nor rolls back)."""
        ns = (obj.get("metadata") or {}).get("namespace")
        try:
            return pod_state(workload_pods(obj, self.kube.list("Pod", ns)))
        except KubeFailure as exc:
            log.warning("no pod evidence for %s/%s: %s", ns, (obj.get("metadata") or {}).get("name"), exc)
            return None

    def autoscalers(self, ref: ObjectRef) -> tuple[Autoscaler, ...] | str:
        """The HPAs and ScaledObjects that own this workload's replicas (one list of each in its namespace), or
        one line saying why that cannot be told (a list refused or failed). No ScaledObject resource (404) is
        KEDA not installed: none; no HPA resource is an API we cannot read, not an absence."""
        try:
            hpas = self.kube.list(HPA, ref.namespace)
            try:
                keda = self.kube.list(SCALED_OBJECT, ref.namespace)
            except NotFound:
                keda = []
        except KubeFailure as exc:
            return f"replicas left alone: cannot tell which autoscaler owns them ({exc})"
        return owners(ref.namespace, ref.kind, ref.name, hpas, keda)


def _plan(obj: dict[str, Any], desired: Desired, scaler: Autoscaler | None, step: int) -> list[ChangeSet]:
    """The autoscaler's set (where one owns the replicas and the policy allows them), then the workload's;
    replicas, an autoscaler's min/max and trigger thresholds each within one step of today's count."""
    current = int((obj.get("spec") or {}).get("replicas", 1))
    if desired.replicas is not None and scaler is None:
        desired = replace(desired, replicas=step_replicas(current, desired.replicas, step))
    sets = [plan_changes(obj, desired, replicas_owned_by_keda=scaler is not None)]
    if scaler is None or desired.keda_min is None or desired.keda_max is None:
        return sets
    lo, hi = step_keda(current, desired.keda_min, desired.keda_max, step)
    if scaler.kind == HPA:
        return [hpa_changes(scaler.obj, lo, hi), *sets]
    return [scaledobject_changes(scaler.obj, lo, hi, desired.keda_thresholds,
                                 lambda old, new: step_threshold(current, old, new, step)), *sets]
