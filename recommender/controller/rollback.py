"""Undoing the last change the controller made to a workload, from its signed change record.

Every previous value is restored, on the workload and on the autoscaler the record names, only when the
controller signed the record, only fields it manages, each op guarded by the value it wrote; anything else
is refused (a Warning Event, nothing written). Replicas an autoscaler owns now are left to it.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from recommender.controller import records as rec
from recommender.controller.changeset import REPLICAS, ChangeSet, ObjectRef, without_replicas
from recommender.controller.kube import Conflict, Kube, KubeFailure
from recommender.controller.outcome import Outcome
from recommender.controller.patch import inverse
from recommender.core.autoscalers import describe, targets

if TYPE_CHECKING:
    from recommender.controller.actuator import Actuator


def rollback(act: Actuator, ref: ObjectRef, now: datetime, reason: str) -> Outcome:
    """Restore every previous value of the last change, on the workload and the autoscaler the record
    names, only when the controller signed the record, only fields it manages, each op guarded by the
    value it wrote; refuses (Warning Event, nothing written) anything else."""
    obj: dict[str, Any] | None = None
    try:
        obj = act.kube.get(ref.kind, ref.namespace, ref.name)
        record = act.read_record(obj)
        if record is None or record.status != "applied":
            why = "no change recorded" if record is None else f"the last change is already {record.status}"
            return Outcome(ref.key, "failed", f"nothing to roll back on {ref.key}: {why}")
        sets, left = _unowned_replicas(act, ref, [s.change_set() for s in record.sets])
        undo = [inverse(cs, s.after) for cs, s in zip(sets, record.sets, strict=True)]
        foreign = _not_its_autoscaler(act.kube, ref, [s.target for s in undo if s.target != ref])
        if foreign is not None:
            return act.refuse(ref, obj, f"annotation {rec.LAST_CHANGE} is not acted on: {foreign}", now)
        own = [s for s in undo if s.target == ref] or [ChangeSet(ref)]
        reason += left
        done = record.model_copy(update={"status": "rolled-back", "reason": f"rolled back: {reason}"})
        if act.dry_run:
            return Outcome(ref.key, "dry-run", "rollback: " + "; ".join(s.diff() for s in undo))
        if act.signer is None:
            return Outcome(ref.key, "failed", f"not rolled back: {act.no_signer}")
        act.write(obj, [s for s in undo if s.target != ref] + [own[0]], done)
    except Conflict as exc:
        return Outcome(ref.key, "conflict", f"not rolled back: {exc}")
    except rec.RecordError as exc:
        return act.refuse(ref, obj, str(exc), now)
    except KubeFailure as exc:
        return Outcome(ref.key, "failed", str(exc))
    undone = "; ".join(s.diff() for s in undo if not s.empty)
    rec.emit_event(act.kube, ref, "RightsizerRolledBack", f"{reason}; {undone}", now, warning=True,
                   uid=rec.uid_of(obj))
    return Outcome(ref.key, "rolled-back", f"{reason}; {undone}", done)


def _not_its_autoscaler(kube: Kube, ref: ObjectRef, others: list[ObjectRef]) -> str | None:
    """Why one of ``others`` (objects a record names beside the workload) is not, now, the autoscaler of
    ``ref``: a record may only ever reach the ScaledObject or HPA whose scaleTargetRef names the workload
    (the rule :func:`recommender.core.autoscalers.targets` keeps for the report and the apply alike)."""
    for o in others:
        if not targets(kube.get(o.kind, o.namespace, o.name), ref.namespace, ref.kind, ref.name):
            return f"{o.key} does not scale {ref.key}"
    return None


def _unowned_replicas(act: Actuator, ref: ObjectRef, sets: list[ChangeSet]) -> tuple[list[ChangeSet], str]:
    """A rollback's sets less the workload's replicas where an autoscaler owns them now (it sets them itself,
    and the guard on the value we wrote would fail the whole rollback), and what was left out. The rest is
    undone: the autoscaler resizes for the restored shape, so no half-state remains. Raises
    :class:`KubeFailure` when that cannot be told: the replicas belong with the rest then."""
    if not any(c.path == REPLICAS for s in sets if s.target == ref for c in s.changes):
        return sets, ""
    found = act.autoscalers(ref)
    if isinstance(found, str):
        raise KubeFailure(f"not rolled back: {found}; the change includes replicas, retried next cycle")
    if not found:
        return sets, ""
    return [without_replicas(s) if s.target == ref else s for s in sets], \
        f" (replicas left to {describe(found)}, which owns them now)"
