"""What the controller did, written where people and ``rightsizer rollback`` find it.

A :class:`ChangeRecord` (every change with its previous value, the health before it, earlier change
times for the rate limits) lives in the workload's ``rightsizer.io/last-change`` annotation, written in
the same JSON patch as the change itself, so a change is never applied without its record. Events and
the policy's status say the same to ``kubectl describe``.
"""

from __future__ import annotations

import itertools
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from recommender.controller.changes import Change, ChangeSet, ObjectRef
from recommender.controller.guardrails import Health
from recommender.controller.kube import Kube, KubeFailure
from recommender.shape import RECOMMENDATION_ANNOTATION

LAST_CHANGE = "rightsizer.io/last-change"
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

    @classmethod
    def of(cls, cs: ChangeSet) -> RecordedSet:
        return cls(kind=cs.target.kind, namespace=cs.target.namespace, name=cs.target.name,
                   changes=[(c.path, c.what, c.old, c.new) for c in cs.changes])

    def change_set(self) -> ChangeSet:
        return ChangeSet(ObjectRef(self.kind, self.namespace, self.name),
                         tuple(Change(p, w, o, n) for p, w, o, n in self.changes))


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
    """The annotation exists but cannot be read (edited by hand?)."""


def read_record(obj: dict[str, Any]) -> ChangeRecord | None:
    text = ((obj.get("metadata") or {}).get("annotations") or {}).get(LAST_CHANGE)
    if text is None:
        return None
    try:
        return ChangeRecord.model_validate_json(text)
    except ValidationError as exc:
        raise RecordError(f"annotation {LAST_CHANGE} is not a change record: {exc.errors()[0]['msg']}") from None


def annotation_ops(obj: dict[str, Any], key: str, value: str) -> list[dict[str, Any]]:
    """JSON-patch ops that set one annotation (``add`` replaces an existing key)."""
    if (obj.get("metadata") or {}).get("annotations") is None:
        return [{"op": "add", "path": "/metadata/annotations", "value": {key: value}}]
    return [{"op": "add", "path": "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1"),
             "value": value}]


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
    involved = {"apiVersion": api_version, "kind": ref.kind, "name": ref.name}
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
