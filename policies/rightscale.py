"""The recommended shape a scaling plan is sized for, and how today's capacity per replica carries to it.

Capacity is read on the shape the replicas run today; the plan is made for the recommended one. A smaller
compute share scales it down in proportion (an estimate, marked so, until that shape's own steps measure it);
a larger one keeps today's figure. Pure: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from policies.compute import compute_held
from recommender.core.catalogue import Catalogue
from recommender.core.inventory import Allocation, Sharing
from recommender.core.plan import Recommendation


@dataclass(frozen=True)
class ShapeScale:
    """The recommended shape a scaling plan is sized for (``shape``, e.g. "mig 4g.40gb") and the compute one
    replica holds there over today's (``factor``; None where either side's is unknown)."""

    shape: str
    factor: float | None


def shape_scale(rec: Recommendation, catalogue: Catalogue) -> ShapeScale | None:
    """The recommended shape of ``rec`` and its compute per replica over today's (:func:`compute_held`); None
    without a recommendation or where it runs no replicas (idle all window: nothing to scale)."""
    after, today = rec.recommended, rec.workload.allocation
    if after is None or after.replicas == 0:
        return None
    held, there = compute_held(today, catalogue), compute_held(after, catalogue)
    return ShapeScale(shape_text(after), there / held if held and there else None)


def shape_text(a: Allocation) -> str:
    """One replica's shape in a few words: ``mig 4g.40gb``, ``1× H100-80GB``, ``mps 60%``, ``ts 0.25 GPU``."""
    match a.sharing:
        case Sharing.MIG:
            return f"{a.mig_count}× mig {a.mig_profile}" if a.mig_count > 1 else f"mig {a.mig_profile}"
        case Sharing.EXCLUSIVE:
            return f"{a.gpus}× {a.gpu_model or 'GPU'}"
        case Sharing.MPS:
            return f"mps {a.mps_active_thread_pct or 100:g}%"
    return f"{a.sharing.value} {a.gpu_equivalents:.3g} GPU"


def capacity_scale(shape: ShapeScale | None, basis: float) -> tuple[float, list[str]]:
    """What today's capacity per replica (``basis``, req/s) is multiplied by on the recommended shape, and why.

    A smaller compute share scales it down in proportion (prefill's throughput follows compute; decode,
    bound by memory bandwidth, loses no more): an estimate, marked so, until the shape's own steps measure it
    (the plan reads only those once the replicas run there). A larger share keeps today's figure: throughput is
    not promised to grow with compute it may not use, so the autoscaler adds replicas rather than queue."""
    if shape is None or (shape.factor is not None and math.isclose(shape.factor, 1.0)):
        return 1.0, []
    if shape.factor is None:
        return 1.0, [f"replicas and thresholds for today's shape: the compute one replica holds on {shape.shape} "
                     "is unknown, so today's capacity cannot be scaled to it"]
    if shape.factor > 1.0:
        return 1.0, [f"capacity on {shape.shape} taken as today's {basis:.3g} req/s per replica although a replica "
                     f"holds {shape.factor:.3g} x the compute there: not assumed to grow with it (measured once it "
                     "runs there)"]
    return shape.factor, [f"capacity {basis * shape.factor:.3g} req/s per replica on {shape.shape}, estimated (not "
                          f"measured: it has not run there): today's {basis:.3g} x {shape.factor:.3g}, the compute "
                          "one replica holds there against today's (throughput assumed to follow compute)"]
