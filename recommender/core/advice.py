"""What a recommendation's formats show beyond its numbers, made once by the pipeline (recommender/pipeline/
advice.py) so formatters and the exporter only render: the autoscaler objects a scaling plan renders to, how to
apply the recommended share, the replicas the plan would have held per step, and the SM share of one GPU each
shape gives. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class AutoscalerObjects:
    """A scaling plan as KEDA and an HPA take it: the ScaledObject ``spec`` fragment (Prometheus triggers on the
    workload's arrival rate and requests waiting) and an autoscaling/v2 HPA on this project's external metrics
    adapter, as JSON-ready mappings with the plan's numbers."""

    keda: Mapping[str, Any]
    hpa: Mapping[str, Any]


@dataclass(frozen=True)
class ReplicaSeries:
    """Per step of the window: the replicas an autoscaler would have held under the plan (``held``, whole pods)
    and the request rate as replicas at the plan's target (``demand``, unrounded), on the same index."""

    held: pd.Series
    demand: pd.Series


@dataclass(frozen=True)
class ShareHeld:
    """The share (0-1) of one GPU's SMs a replica's device or slice gives it, and a caveat where it is a guess."""

    frac: float
    caveat: str | None = None


@dataclass(frozen=True)
class Advice:
    """What the formats show of one recommendation beyond its numbers: how to apply the recommended allocation
    (``apply``: each mechanism's own terms), the autoscaler objects and replica series of its scaling plan, and
    the SM share today's and the recommended allocation give (None where there is none)."""

    apply: Mapping[str, Any] | None = None
    autoscaler: AutoscalerObjects | None = None
    replicas: ReplicaSeries | None = None
    share_today: ShareHeld | None = None
    share_recommended: ShareHeld | None = None
