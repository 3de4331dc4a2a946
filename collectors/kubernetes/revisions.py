"""Since when a controller's replicas have the shape they have now: the revisions a Deployment (its
ReplicaSets) or a StatefulSet or LeaderWorkerSet (its ControllerRevisions) keeps, one per template rolled out,
read back into the pod template each ran, and the newest run of revisions with today's GPU resources and serving
arguments. Pure: it reads listed objects, never the API.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from collectors.kubernetes.parse import ParsedSpec
from collectors.kubernetes.templates import leader_worker_set, template_spec
from recommender.core.inventory import Allocation
from recommender.core.timestamps import parse_time

REVISION_ANNOTATION = "deployment.kubernetes.io/revision"


@dataclass(frozen=True)
class Revision:
    """One template a controller rolled out: its revision number, when it was created, what it ran."""

    number: int
    created: datetime
    spec: ParsedSpec


def revision_of(kind: str, obj: Mapping[str, Any]) -> Revision | None:
    """The revision a ReplicaSet (a Deployment's: ``deployment.kubernetes.io/revision``) or a ControllerRevision
    records: a StatefulSet's or a LeaderWorkerSet's ``revision``, its ``data`` the patch that restores
    ``spec.template`` (``spec.leaderWorkerTemplate``). None for other kinds and owners, or where the number, the
    creation time or the template cannot be read."""
    owner = controller_ref(obj)
    owned_by = owner.get("kind") if owner is not None else None
    meta = obj.get("metadata") or {}
    data = obj.get("data")
    patched = data.get("spec") if isinstance(data, Mapping) else None
    patched = patched if isinstance(patched, Mapping) else {}
    if (kind, owned_by) == ("ReplicaSet", "Deployment"):
        number = _revision((meta.get("annotations") or {}).get(REVISION_ANNOTATION))
        template = (obj.get("spec") or {}).get("template")
    elif (kind, owned_by) in (("ControllerRevision", "StatefulSet"), ("ControllerRevision", "LeaderWorkerSet")):
        number = _revision(obj.get("revision"))
        template = patched.get("template" if owned_by == "StatefulSet" else "leaderWorkerTemplate")
    else:
        return None
    created = created_at(obj)
    if number is None or created is None or not isinstance(template, Mapping):
        return None  # a record we cannot read would count as another shape
    spec = leader_worker_set({"leaderWorkerTemplate": template}) if owned_by == "LeaderWorkerSet" \
        else template_spec(template, 1)
    return Revision(number, created, spec)


def shape_since(current: ParsedSpec, revisions: Sequence[Revision]) -> datetime | None:
    """When a controller's pods took the shape its template has now: GPU resources and serving arguments
    (:func:`replica_shape`), from the revisions it keeps, one per template it has rolled out (a Deployment's
    ReplicaSets, a StatefulSet's or a LeaderWorkerSet's ControllerRevisions).

    Newest revision first, the revisions with the current shape run back to the first one of that run,
    created when its rollout began (the old pods served until the new ones were ready; a StatefulSet updated
    ``OnDelete`` changes its pods only as they are deleted, later: :func:`replaced_since`). A rollback reuses an
    old revision's record under a new number with its old creation time, so no revision of another shape may
    be newer: the start is the later of the two. None where every revision kept (``revisionHistoryLimit``)
    has the current shape, or none can be read: the shape is older than what the API remembers.
    """
    shape = replica_shape(current)
    dated = sorted(((r.number, r.created, replica_shape(r.spec) == shape) for r in revisions),
                   key=lambda d: d[0], reverse=True)
    others = [created for _, created, same in dated if not same]
    if not others:
        return None
    run = list(itertools.takewhile(lambda d: d[2], dated))
    return max(min((created for _, created, _ in run), default=max(others)), max(others))


def replaced_since(kind: str, obj: Mapping[str, Any] | None, since: datetime | None,
                   pods: Sequence[Mapping[str, Any]]) -> tuple[datetime | None, list[str]]:
    """``since`` for a StatefulSet updated ``OnDelete``, whose pods take a new template only as they are deleted:
    no earlier than its newest pod's creation, when the pool last changed (homogeneous if every old pod is gone,
    a steady mix if not). A pod recreated for another reason moves it too: the price of not knowing. Other
    controllers roll their pods out on their own, at the revision's time."""
    strategy = (((obj or {}).get("spec") or {}).get("updateStrategy") or {}).get("type")
    if since is None or kind != "StatefulSet" or strategy != "OnDelete":
        return since, []
    newest = max((t for p in pods if (t := created_at(p)) is not None), default=since)
    if newest <= since:
        return since, []
    return newest, [f"updated OnDelete: its pods take a new template only as they are deleted; capacity is read "
                    f"from its newest pod's start ({newest:%Y-%m-%d %H:%M} UTC), not the revision's "
                    f"({since:%Y-%m-%d %H:%M} UTC)"]


def replica_shape(parsed: ParsedSpec) -> Allocation:
    """What one replica holds and serves with, from a pod template: a change in it changes how many requests a
    replica serves within the objective (the replica count aside)."""
    return replace(parsed.allocation, replicas=0)


def created_at(obj: Mapping[str, Any]) -> datetime | None:
    """An object's ``creationTimestamp``, in UTC (the API writes UTC; one without a zone is read as UTC, so it
    compares with the others)."""
    created = parse_time((obj.get("metadata") or {}).get("creationTimestamp"))
    return created.replace(tzinfo=UTC) if created is not None and created.tzinfo is None else created


def _revision(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def controller_ref(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return next((r for r in refs if r.get("controller")), refs[0] if refs else None)
