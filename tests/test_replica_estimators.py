"""The replica policy's estimators one by one: each returns a typed estimate with its reasons or a typed absence
with why (policies/replicas/estimates.py), and the plan composes them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from policies.replicas import (
    Absent,
    Capacity,
    CapacitySource,
    Carried,
    Demand,
    ReplicaHistory,
    cooldown_s,
    demand_to_size,
    keep_lower_bound,
    per_replica_capacity,
    replica_bounds,
)
from recommender.core.annotations import CAPACITY_ANNOTATION
from recommender.core.inventory import Allocation, Sharing, Workload, WorkloadRef
from recommender.core.plan import WorkloadClass
from recommender.core.settings import ScalingSettings

S = ScalingSettings(max_bound_history_s=0, min_forecast_history_s=0)


def workload(annotations: dict[str, str] | None = None) -> Workload:
    alloc = Allocation(Sharing.EXCLUSIVE, gpus=1, gpu_equivalents=1.0, replicas=1)
    return Workload(WorkloadRef("ns", "Deployment", "svc"), alloc, annotations=annotations or {})


def rate(values: list[float]) -> pd.Series:
    idx = pd.date_range("2024-01-01", periods=len(values), freq="60s", tz="UTC")
    return pd.Series(np.asarray(values, dtype="float64"), index=idx)


def test_capacity_without_history_or_configuration_is_absent_with_why() -> None:
    got = per_replica_capacity(workload(), ReplicaHistory(60.0), 1.0, S)
    assert isinstance(got, Absent) and got.reason.startswith("no per-replica capacity")


def test_a_configured_capacity_without_a_knee_is_configured() -> None:
    got = per_replica_capacity(workload({CAPACITY_ANNOTATION: "7"}), ReplicaHistory(60.0), 1.0, S)
    assert isinstance(got, Capacity) and (got.rps, got.source) == (7.0, CapacitySource.CONFIGURED)
    assert not got.read_from_history and not got.is_lower_bound


@pytest.mark.parametrize(("source", "previous", "want"), [
    (CapacitySource.LOWER_BOUND, 5.0, 5.0),  # a lower bound never falls below the last cycle's
    (CapacitySource.LOWER_BOUND, 2.0, 3.0),  # ... and a higher reading stands
    (CapacitySource.MEASURED, 5.0, 3.0),  # a knee is not held up by an earlier figure
])
def test_keep_lower_bound(source: CapacitySource, previous: float, want: float) -> None:
    got = keep_lower_bound(Capacity(3.0, source, ("read",)), Carried(previous, "the previous plan's"))
    assert isinstance(got, Capacity) and got.rps == want and got.source is source


def test_demand_without_rate_or_forecast_is_absent() -> None:
    got = demand_to_size(WorkloadClass.BATCH, (), None)
    assert isinstance(got, Absent) and "no demand" in got.reason


def test_batch_demand_is_the_mean_with_the_quietest_step_as_floor() -> None:
    got = demand_to_size(WorkloadClass.BATCH, (), rate([1.0, 2.0, 6.0]))
    assert isinstance(got, Demand) and (got.peak, got.trough, got.observed_max) == (3.0, 1.0, 6.0)


def test_replica_bounds_from_demand_and_target() -> None:
    # peak 9 req/s at 2 per replica: ceil(4.5) = 5; floor 1 req/s: 1; max ceil(10 / 2) x (1 + 2.0) = 15
    got = replica_bounds(Demand(9.0, 1.0, 10.0, ()), 2.0, False, 0.0, S)
    assert (got.recommended, got.low, got.high) == (5, 1, 15)


def test_cooldown_unused_without_scale_to_zero() -> None:
    got = cooldown_s(np.array([60.0]), 180.0, False, S)
    assert got.seconds == 300 and "unused" in got.reason
