"""A request-rate history at 60 s steps and the scaling plan a real-time, one-GPU workload gets from it: what the
replica policy's tests (the scale-down hold, the recurring floor) build on, and a flat forecast band."""

from __future__ import annotations

import numpy as np
import pandas as pd

from policies.replicas import ReplicaHistory, scaling_plan
from recommender.core import usage as m
from recommender.core.annotations import CAPACITY_ANNOTATION
from recommender.core.inventory import Allocation, Sharing, Workload, WorkloadRef
from recommender.core.plan import Classification, Forecast, ScalingPlan, WorkloadClass
from recommender.core.settings import ScalingSettings

STEP = 60.0  # s


def history(values: np.ndarray) -> ReplicaHistory:
    idx = pd.date_range("2024-01-01", periods=len(values), freq="60s", tz="UTC")
    return ReplicaHistory(STEP, pd.Series(np.asarray(values, dtype="float64"), index=idx))


def workload() -> Workload:
    alloc = Allocation(Sharing.EXCLUSIVE, gpus=1, gpu_equivalents=1.0, replicas=1)
    return Workload(WorkloadRef("ns", "Deployment", "svc"), alloc, annotations={CAPACITY_ANNOTATION: "10"},
                    cold_start_s=90.0)


def band(mean: float, hi_95: float, steps: int = 60) -> Forecast:
    """A flat request-rate forecast (req/s) of ``steps`` 60 s steps: ``mean``, its 95% band up to ``hi_95``."""
    idx = pd.date_range("2030-01-01", periods=steps, freq="60s", tz="UTC")
    return Forecast(m.REQUEST_RATE, "test", pd.DataFrame({"mean": mean, "hi_95": hi_95}, index=idx))


def plan(settings: ScalingSettings, rate: np.ndarray, forecasts: tuple[Forecast, ...] = ()) -> ScalingPlan:
    rt = Classification(WorkloadClass.REAL_TIME, 1.0, (), "annotation")
    p = scaling_plan(workload(), history(rate), rt, forecasts, settings)
    assert isinstance(p, ScalingPlan)
    return p
