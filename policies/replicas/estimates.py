"""What each replica estimator hands the plan: a typed estimate with its reasons, or a typed absence with why.

The scaling plan composes these (capacity, demand, headroom, scale-to-zero, cooldown, replica bounds) instead
of passing tuples between them; rates are requests/s (per replica where named so), times seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class CapacitySource(StrEnum):
    """Where a per-replica capacity came from (``ScalingPlan.capacity_source`` holds its value)."""

    MEASURED = "measured"  # at the knee history shows
    CONFIGURED = "configured"  # the annotation or settings, consistent with history or without a knee
    LOWER_BOUND = "lower bound"  # the rate served within the objective, no knee: the service may do more


@dataclass(frozen=True)
class Absent:
    """Why an estimate could not be made (one line)."""

    reason: str


@dataclass(frozen=True)
class NoScalingPlan:
    """Why no scaling plan could be made (one line each)."""

    reasons: tuple[str, ...]


@dataclass(frozen=True)
class Capacity:
    """Requests/s one replica serves at the TTFT objective, where that figure came from, and why."""

    rps: float
    source: CapacitySource
    reasons: tuple[str, ...]

    @property
    def read_from_history(self) -> bool:
        """Whether the figure was read from this history (measured or a lower bound), not configured."""
        return self.source is not CapacitySource.CONFIGURED

    @property
    def is_lower_bound(self) -> bool:
        """Whether the service may serve more than this: the target sits under the highest rate seen, so every
        peak would need more, and no mean replica count is estimated from it."""
        return self.source is CapacitySource.LOWER_BOUND


@dataclass(frozen=True)
class Carried:
    """A capacity from an earlier cycle (requests/s per replica) and where it came from, in words."""

    rps: float
    came_from: str


@dataclass(frozen=True)
class Demand:
    """Request rates (req/s) to size replicas for: the ``peak`` (recommended replicas), the ``trough`` (the
    floor, min replicas) and the highest rate observed (``observed_max``, with the peak bounds max), and why."""

    peak: float
    trough: float
    observed_max: float
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class Headroom:
    """Share of capacity held back below the target (0-1), and why it is above the class's where it is."""

    frac: float
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class ScaleToZero:
    """Whether the workload may scale to zero replicas, and why (one line)."""

    allowed: bool
    reason: str


@dataclass(frozen=True)
class Cooldown:
    """KEDA's ``cooldownPeriod`` in whole seconds, and why."""

    seconds: int
    reason: str


@dataclass(frozen=True)
class ReplicaBounds:
    """Replicas for the peak (``recommended``) and the autoscaler's ``low`` and ``high`` bounds, and why."""

    recommended: int
    low: int
    high: int
    reasons: tuple[str, ...]
