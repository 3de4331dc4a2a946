"""The controller's record read back: the per-replica capacity it wrote into a workload's
``rightsizer.io/recommendation`` annotation (so a lower bound outlives a restart), the positive-number parse
every annotation and trigger figure goes through, and the capacity's plausible range. Pure: no I/O.
"""

from __future__ import annotations

import json
import math
from typing import Any

from policies.replicas.estimates import Carried
from recommender.core.annotations import RECOMMENDATION_ANNOTATION
from recommender.core.inventory import Workload
from recommender.core.timestamps import parse_time

# Requests a second one replica serves at the objective, as a tenant may write it: outside these, no replica
# (one request in 11 days, a billion a second), and a demand divided by it would overflow to an infinite count.
CAPACITY_RPS_RANGE = (1e-6, 1e9)


def positive_number(raw: Any) -> float | None:
    """A positive finite number from an annotation or a trigger's metadata; None when absent or not one."""
    try:
        value = float(raw) if raw is not None else math.nan
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and value > 0 else None


def capacity_rps(raw: Any) -> float | None:
    """A per-replica capacity (req/s) from an annotation or the controller's record: a number within
    ``CAPACITY_RPS_RANGE``; None when absent or not one."""
    value = positive_number(raw)
    low, high = CAPACITY_RPS_RANGE
    return value if value is not None and low <= value <= high else None


def recorded_capacity(workload: Workload) -> Carried | None:
    """The per-replica capacity the controller recorded in the workload's ``rightsizer.io/recommendation``
    (``replicaCapacity``): the last cycle's, which outlives a controller restart. None where absent or not
    a positive number (an older record, an edit by hand), or recorded for another shape than the replicas'
    now (its ``shapeSince`` is not the workload's)."""
    raw = workload.annotations.get(RECOMMENDATION_ANNOTATION)
    try:
        doc = json.loads(raw) if raw else None
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    value = capacity_rps(doc.get("replicaCapacity"))
    if value is None or parse_time(doc.get("shapeSince")) != workload.shape_since:
        return None  # no figure, or one measured on the replicas' shape before this one
    return Carried(value, f"recorded on the workload ({RECOMMENDATION_ANNOTATION}: {doc.get('capacitySource', '?')})")
