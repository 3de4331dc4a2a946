"""What the controller did, written where people and ``rightsizer rollback`` find it.

A :class:`ChangeRecord` (every change with its previous value, the health before it, earlier change
times for the rate limits) lives in the workload's ``rightsizer.io/last-change`` annotation, written in
the same JSON patch as the change itself, so a change is never applied without its record. Whoever may
edit the workload may edit that annotation too, so the record is trusted only with its HMAC
(``rightsizer.io/last-change-signature``, :mod:`recommender.controller.signing`) and only while every
change in it is one the controller manages (:mod:`recommender.controller.managed`). Events and the
policy's status say the same to ``kubectl describe``.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from recommender.controller.changeset import Change, ChangeSet, ObjectRef
from recommender.controller.guardrails import Health
from recommender.controller.kube import Kube, KubeFailure
from recommender.controller.managed import unmanaged
from recommender.controller.patch import esc
from recommender.controller.signing import Signer, subject_of
from recommender.core.annotations import LAST_CHANGE, RECOMMENDATION_ANNOTATION, SIGNATURE
from recommender.core.resources import RESOURCES, owner_kind

MAX_RECORD_CHARS = 64 * 1024  # a record is a few KiB; anything larger was not written by us
RECOMMENDATION = RECOMMENDATION_ANNOTATION
COMPONENT = "gpu-rightsizer"
MAX_HISTORY = 20  # change times kept for the per-window limit
EVENTS_FOR_CLUSTER_SCOPED = "default"  # where client-go's recorder puts Events about Nodes
_seq = itertools.count()


class RecordedSet(BaseModel):
    kind: str
    namespace: str
    name: str
    changes: list[tuple[str, str, Any, Any]]  # (path, what, old, new)
    # (parent path, its value as the change left it) for each entry the change removed: an undo that
    # adds the entry back tests these first (JSON patch cannot test that a key is absent)
    after: list[tuple[str, Any]] = []

    @classmethod
    def of(cls, cs: ChangeSet, after: list[tuple[str, Any]] | None = None) -> RecordedSet:
        return cls(kind=cs.target.kind, namespace=cs.target.namespace, name=cs.target.name,
                   changes=[(c.path, c.what, c.old, c.new) for c in cs.changes], after=after or [])

    @property
    def target(self) -> ObjectRef:
        return ObjectRef(self.kind, self.namespace, self.name)

    def change_set(self) -> ChangeSet:
        return ChangeSet(self.target, tuple(Change(p, w, o, n) for p, w, o, n in self.changes))


class PodMarks(BaseModel):
    """What the workload's pods showed when the change was made, so later OOM kills and disruptions
    are counted from then on (guardrails.pod_counts_since)."""

    terminations: dict[str, int] = {}  # "pod/container" → restarts (+1 while terminated)
    disrupted: list[str] = []  # pods already preempted or evicted


class ChangeRecord(BaseModel):
    """One applied change (possibly on two objects: the workload and its KEDA ScaledObject)."""

    model_config = ConfigDict(frozen=True)

    workload: str  # WorkloadRef key
    at: datetime
    policy: str | None = None
    reason: str = ""
    sets: list[RecordedSet]
    status: str = "applied"  # applied | rolled-back
    baseline: dict[str, Any] | None = None  # Health before the change
    watch_until: datetime | None = None
    history: list[datetime] = []  # times of earlier changes, oldest first
    pods: PodMarks | None = None  # None: the pods could not be read; no pod evidence for this change

    def change_times(self) -> list[datetime]:
        return [*self.history, self.at]

    def baseline_health(self) -> Health | None:
        return Health(**self.baseline) if self.baseline is not None else None

    def diff(self) -> str:
        return "; ".join(s.change_set().diff() for s in self.sets if s.changes) or "no change"


class RecordError(ValueError):
    """The annotation exists but is not a record the controller may act on (edited, forged, unsigned)."""


def read_record(obj: dict[str, Any], signer: Signer | None, selector_keys: Collection[str] = ()
                ) -> ChangeRecord | None:
    """The workload's change record when the controller wrote it, None when there is none; RecordError
    (one line) when there is one the controller must not act on: too large, unsigned, signed with another
    key or for another object, not a record, naming another workload, or changing a field it does not
    manage. ``signer`` None: no key to check with, so no record is trusted."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    text = annotations.get(LAST_CHANGE)
    if text is None:
        return None
    why = _untrusted(obj, str(text), annotations.get(SIGNATURE), signer)
    if why is None:
        try:
            record = ChangeRecord.model_validate_json(text)
        except ValidationError as exc:
            raise RecordError(f"annotation {LAST_CHANGE} is not a change record: {exc.errors()[0]['msg']}") from None
        why = _foreign(record, obj, selector_keys)
        if why is None:
            return record
    raise RecordError(f"annotation {LAST_CHANGE} is not acted on: {why}")


def _untrusted(obj: dict[str, Any], text: str, signature: Any, signer: Signer | None) -> str | None:
    if len(text) > MAX_RECORD_CHARS:
        return f"it is {len(text)} characters, over the {MAX_RECORD_CHARS} a record can be"
    if signer is None:
        return "no signing key to check it with"
    return signer.verify(subject_of(obj), text, signature if isinstance(signature, str) else None)


def _foreign(record: ChangeRecord, obj: dict[str, Any], selector_keys: Collection[str]) -> str | None:
    """Why a signed record still must not be acted on: it names another object, or a field not ours."""
    meta = obj.get("metadata") or {}
    here = ObjectRef(owner_kind(str(obj.get("apiVersion") or ""), str(obj.get("kind"))), str(meta.get("namespace", "")),
                     str(meta.get("name", "")))
    if record.workload != here.key:
        return f"it records a change of {record.workload}, not of {here.key}"
    for s in record.sets:
        if s.target != here and (s.namespace != here.namespace or s.kind not in AUTOSCALER_KINDS):
            return f"it names {s.target.key}: only the workload and its autoscaler in its namespace are ever changed"
        why = unmanaged(s.kind, s.change_set().changes, obj if s.target == here else {}, selector_keys)
        if why is not None:
            return why
    return None


AUTOSCALER_KINDS = frozenset({"ScaledObject", "HorizontalPodAutoscaler"})


def record_annotations(obj: dict[str, Any], record: ChangeRecord, signer: Signer) -> dict[str, str]:
    """The record annotation and its signature, bound to ``obj``'s identity."""
    text = record_json(record)
    return {LAST_CHANGE: text, SIGNATURE: signer.sign(subject_of(obj), text)}


def annotation_ops(obj: dict[str, Any], values: Mapping[str, str]) -> list[dict[str, Any]]:
    """JSON-patch ops that set annotations (``add`` replaces an existing key)."""
    if (obj.get("metadata") or {}).get("annotations") is None:
        return [{"op": "add", "path": "/metadata/annotations", "value": dict(values)}]
    return [{"op": "add", "path": f"/metadata/annotations/{esc(key)}", "value": value}
            for key, value in values.items()]


def record_json(record: ChangeRecord) -> str:
    return record.model_dump_json(exclude_none=True)


def health_dict(h: Health | None) -> dict[str, Any] | None:
    return None if h is None else {"ttft_p95_s": h.ttft_p95_s, "requests_waiting": h.requests_waiting,
                                   "preemptions_per_s": h.preemptions_per_s, "oom_kills": h.oom_kills,
                                   "pod_disruptions": h.pod_disruptions}


def condition(kind: str, ok: bool, reason: str, message: str, now: datetime) -> dict[str, Any]:
    """A status condition as Kubernetes conventions spell it."""
    return {"type": kind, "status": "True" if ok else "False", "reason": reason, "message": message,
            "lastTransitionTime": ts(now)}


def emit_event(kube: Kube, ref: ObjectRef, reason: str, message: str, now: datetime, warning: bool = False,
               api_version: str = "apps/v1", uid: str | None = None) -> str | None:
    """A core/v1 Event on ``ref``; returns the error line instead of raising (an Event is never vital).

    ``kubectl describe`` finds Events by involvedObject name, namespace and uid, so the uid is set where
    known. A cluster-scoped object (a Node: ``ref.namespace`` empty) gets its Events in ``default`` with
    no namespace and the uid set to its name, exactly as the kubelet's.
    """
    name = f"{ref.name}.{int(now.timestamp() * 1e6):x}{next(_seq):04x}"
    resource = RESOURCES.get(ref.kind) if "." in ref.kind else None  # ``Job.batch.volcano.sh``: Job of its group
    involved = {"apiVersion": resource.api_version if resource else api_version,
                "kind": resource.kind if resource else ref.kind, "name": ref.name}
    if ref.namespace:
        involved["namespace"] = ref.namespace
    if uid or not ref.namespace:
        involved["uid"] = uid or ref.name
    body = {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": ref.namespace or EVENTS_FOR_CLUSTER_SCOPED},
            "involvedObject": involved,
            "reason": reason, "message": message[:1000], "type": "Warning" if warning else "Normal",
            "source": {"component": COMPONENT}, "reportingComponent": COMPONENT,
            "firstTimestamp": ts(now), "lastTimestamp": ts(now), "count": 1}
    try:
        kube.create("Event", ref.namespace or EVENTS_FOR_CLUSTER_SCOPED, body)
    except KubeFailure as exc:
        return str(exc)
    return None


def write_policy_status(kube: Kube, namespace: str, name: str, status: dict[str, Any]) -> None:
    """Merge-patch the policy's status subresource (raises KubeFailure)."""
    kube.patch("GPURightsizingPolicy", namespace, name, {"status": status}, subresource="status", merge=True)


def uid_of(obj: dict[str, Any] | None) -> str | None:
    return ((obj or {}).get("metadata") or {}).get("uid")


def ts(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")
