"""Pure: what a replica plan changes on the autoscaler that owns the replicas instead of ``spec.replicas`` — a
KEDA ScaledObject's bounds and the thresholds of its Prometheus triggers that read the plan's metrics, or a
HorizontalPodAutoscaler's bounds — as :class:`~recommender.controller.changeset.ChangeSet` records, guarded like
every other change.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from policies.replicas import positive_number
from recommender.controller.builder import Builder
from recommender.controller.changeset import ChangeSet, ObjectRef
from recommender.core.autoscalers import HPA

# deriv(<selector>[<range>]): a gauge's growth, which the report's rate query adds to the finished rate
_DERIV = re.compile(r'deriv\(\s*[A-Za-z_:][\w:]*\s*(\{(?:[^}"]|"(?:[^"\\]|\\.)*")*\})?\s*\[[^\]]*\]\s*\)')


def scaledobject_changes(so: Mapping[str, Any], min_replicas: int, max_replicas: int,
                         thresholds: Sequence[tuple[str, str]] = (),
                         bound: Callable[[float, float], float] | None = None) -> ChangeSet:
    """KEDA owns the replica count: change its ScaledObject's min/max instead of ``spec.replicas``, and the
    ``threshold`` of each Prometheus trigger whose query reads one of ``thresholds``' metrics (the report's
    rate and waiting triggers), so the per-replica targets follow the plan instead of drifting in YAML. A
    gauge read only through ``deriv()`` does not count: the rate query adds the queue's growth to the
    finished rate (:func:`policies.replicas.arrival_rate_query`), and that makes it no waiting trigger.

    Other triggers (external, metrics-api, a query of the user's own, a ``Value`` target) are left alone; a
    threshold change is guarded by its trigger's query, so a reordered trigger list fails the patch instead
    of hitting another.
    ``bound(old, new)`` limits a numeric change (the actuator's step: :func:`guardrails.step_threshold`).
    """
    meta, spec = so.get("metadata") or {}, so.get("spec") or {}
    b = Builder(so)
    b.set_key("/spec", spec, "minReplicaCount", "keda minReplicaCount", min_replicas)
    b.set_key("/spec", spec, "maxReplicaCount", "keda maxReplicaCount", max(max_replicas, min_replicas, 1))
    for i, trigger in enumerate((spec.get("triggers") or []) if thresholds else []):
        tmeta = trigger.get("metadata") or {}
        query = str(tmeta.get("query", ""))
        if trigger.get("type") != "prometheus":
            continue
        levels = _DERIV.sub("", query)
        hits = [(metric, value) for metric, value in thresholds if metric in levels]
        if len(hits) != 1:
            if hits:
                b.skipped.append(f"keda trigger {i}: its query reads {' and '.join(m for m, _ in hits)}: "
                                 "threshold left alone")
            continue
        metric, value = hits[0]
        if trigger.get("metricType", "AverageValue") != "AverageValue":  # KEDA's default is AverageValue
            b.skipped.append(f"keda trigger {i}: metricType {trigger['metricType']}, not a per-replica threshold")
            continue
        old = positive_number(tmeta.get("threshold"))  # None: absent or not a number, simply replaced
        if bound is not None and old is not None:
            value = f"{bound(old, float(value)):.6g}"
        if old is not None and math.isclose(old, float(value), rel_tol=1e-6):
            continue  # "7.0" already says 7: no change for formatting alone
        base = f"/spec/triggers/{i}/metadata"
        b.guards[f"{base}/query"] = query
        b.set_key(base, tmeta, "threshold", f"keda threshold ({metric})", value)
    return b.build(ObjectRef("ScaledObject", str(meta.get("namespace", "")), str(meta.get("name", ""))))


def hpa_changes(hpa: Mapping[str, Any], min_replicas: int, max_replicas: int) -> ChangeSet:
    """A HorizontalPodAutoscaler owns the replica count: change its ``minReplicas``/``maxReplicas`` instead of
    ``spec.replicas``. ``minReplicas`` stays at least 1 (0 needs the alpha ``HPAScaleToZero`` gate and an
    Object/External metric, reference.md §12) unless the HPA is at 0 already; an absent one is 1 (the API's
    default) and is not written as such. Guarded by its scaleTargetRef too: a retargeted HPA fails the patch.
    """
    meta, spec = hpa.get("metadata") or {}, hpa.get("spec") or {}
    b = Builder(hpa)
    have = spec.get("minReplicas")
    lo = max(min_replicas, 0 if have == 0 else 1)
    if lo > min_replicas:
        b.skipped.append(f"hpa minReplicas {lo}, not {min_replicas}: an HPA scales to zero only where the "
                         "cluster enables HPAScaleToZero")
    if not (have is None and lo == 1):
        b.set_key("/spec", spec, "minReplicas", "hpa minReplicas", lo)
    b.set_key("/spec", spec, "maxReplicas", "hpa maxReplicas", max(max_replicas, lo, 1))
    if b.changes:
        b.guards["/spec/scaleTargetRef"] = spec.get("scaleTargetRef")
    return b.build(ObjectRef(HPA, str(meta.get("namespace", "")), str(meta.get("name", ""))))
