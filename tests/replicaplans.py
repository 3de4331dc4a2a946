"""A request-rate history at 60 s steps and the scaling plan a real-time, one-GPU workload gets from it: what the
replica policy's tests (the scale-down hold, the recurring floor) build on."""

from __future__ import annotations

import numpy as np
import pandas as pd

from policies.replicas import ReplicaHistory, scaling_plan
from recommender.core.annotations import CAPACITY_ANNOTATION
from recommender.core.inventory import Allocation, Sharing, Workload, WorkloadRef
from recommender.core.plan import Classification, ScalingPlan, WorkloadClass
from recommender.core.settings import ScalingSettings

STEP = 60.0  # s


def history(values: np.ndarray) -> ReplicaHistory:
    idx = pd.date_range("2024-01-01", periods=len(values), freq="60s", tz="UTC")
    return ReplicaHistory(STEP, pd.Series(np.asarray(values, dtype="float64"), index=idx))


def workload() -> Workload:
    alloc = Allocation(Sharing.EXCLUSIVE, gpus=1, gpu_equivalents=1.0, replicas=1)
    return Workload(WorkloadRef("ns", "Deployment", "svc"), alloc, annotations={CAPACITY_ANNOTATION: "10"},
                    cold_start_s=90.0)


def plan(settings: ScalingSettings, rate: np.ndarray) -> ScalingPlan:
    rt = Classification(WorkloadClass.REAL_TIME, 1.0, (), "annotation")
    p = scaling_plan(workload(), history(rate), rt, (), settings)
    assert isinstance(p, ScalingPlan)
    return p
