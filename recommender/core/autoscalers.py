"""Which autoscaler owns a workload's replica count: HorizontalPodAutoscalers (autoscaling/v2) and KEDA
ScaledObjects (keda.sh/v1alpha1) whose ``spec.scaleTargetRef`` names it.

KEDA scales through an HPA of its own (``keda-hpa-<scaledobject>`` unless renamed, the ScaledObject its
owner): that HPA is the ScaledObject's, not a second autoscaler. Two owners left after that fight each other
over ``spec.replicas``, and nothing should add a third. Pure: objects as the API lists them in, owners out; the
collector (for the report) and the controller (before it writes replicas) both ask here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

HPA = "HorizontalPodAutoscaler"
SCALED_OBJECT = "ScaledObject"
KEDA_GROUP = "keda.sh"
WORKLOAD_GROUP = "apps"  # the scaleTargetRef group of a Deployment or StatefulSet
OTHER_GROUPS = {"LeaderWorkerSet": "leaderworkerset.x-k8s.io"}  # scalable workloads outside apps
Target = tuple[str, str, str]  # (namespace, kind, name) a scaleTargetRef names


@dataclass(frozen=True)
class Autoscaler:
    """One object that owns replicas: its kind, name and the object as read (for its min/max)."""

    kind: str  # HPA or SCALED_OBJECT
    name: str
    obj: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def label(self) -> str:
        """``HorizontalPodAutoscaler/llama``: how the report and the controller's messages name it."""
        return f"{self.kind}/{self.name}"


def targets(obj: Mapping[str, Any], namespace: str, kind: str, name: str) -> bool:
    """Whether ``obj``'s scaleTargetRef names this workload: same namespace, kind (KEDA's default Deployment)
    and name, and an ``apps`` apiVersion where one is given. Anything malformed targets nothing."""
    meta, spec = obj.get("metadata"), obj.get("spec")
    if not isinstance(meta, Mapping) or not isinstance(spec, Mapping):
        return False
    ref = spec.get("scaleTargetRef")
    if not isinstance(ref, Mapping) or meta.get("namespace", namespace) != namespace:
        return False
    want = OTHER_GROUPS.get(kind, WORKLOAD_GROUP)
    group = str(ref.get("apiVersion") or want).split("/")[0]
    return ref.get("name") == name and ref.get("kind", "Deployment") == kind and group == want


def owners(namespace: str, kind: str, name: str, hpas: Iterable[Mapping[str, Any]],
           scaled_objects: Iterable[Mapping[str, Any]]) -> tuple[Autoscaler, ...]:
    """Every autoscaler of one workload, ScaledObjects first; an HPA a listed ScaledObject of this workload
    owns is that ScaledObject's. Empty: nothing but the controller (and people) set its replicas."""
    found = [Autoscaler(SCALED_OBJECT, _name(so), so) for so in scaled_objects if targets(so, namespace, kind, name)]
    keda = {a.name for a in found}
    for hpa in hpas:
        if targets(hpa, namespace, kind, name) and keda_owner(hpa) not in keda:
            found.append(Autoscaler(HPA, _name(hpa), hpa))
    return tuple(found)


def by_target(hpas: Sequence[Mapping[str, Any]],
              scaled_objects: Sequence[Mapping[str, Any]]) -> dict[Target, tuple[Autoscaler, ...]]:
    """:func:`owners` of every workload some autoscaler names, from one list of each: what the report shows
    without asking per workload. Targets that do not exist are simply never looked up."""
    groups: dict[Target, tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]] = {}
    for i, items in enumerate((hpas, scaled_objects)):
        for obj in items:
            if (key := _target(obj)) is not None:
                groups.setdefault(key, ([], []))[i].append(obj)
    found = {key: owners(*key, h, k) for key, (h, k) in groups.items()}
    return {key: o for key, o in found.items() if o}


def keda_owner(hpa: Mapping[str, Any]) -> str | None:
    """The ScaledObject named as an owner of this HPA (KEDA's own HPA), or None."""
    refs = (hpa.get("metadata") or {}).get("ownerReferences") or []
    return next((str(r.get("name")) for r in refs if isinstance(r, Mapping) and r.get("kind") == SCALED_OBJECT
                 and str(r.get("apiVersion", "")).split("/")[0] == KEDA_GROUP), None)


def describe(found: Sequence[Autoscaler]) -> str | None:
    """``ScaledObject/llama`` (or several, comma-separated: a conflict), None when there is none."""
    return ", ".join(a.label for a in found) or None


def _target(obj: Mapping[str, Any]) -> Target | None:
    meta, spec = obj.get("metadata"), obj.get("spec")
    ref = spec.get("scaleTargetRef") if isinstance(spec, Mapping) else None
    if not isinstance(meta, Mapping) or not isinstance(ref, Mapping):
        return None
    return str(meta.get("namespace", "")), str(ref.get("kind", "Deployment")), str(ref.get("name", ""))


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))
