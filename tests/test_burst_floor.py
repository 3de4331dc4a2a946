"""The burst floor (policies/replicas/burst.py): a replica floor read from the request rate against what a
reactive autoscaler, one wake late, would have served; and its emission as min replicas in the plan and KEDA."""

from __future__ import annotations

import numpy as np
import pandas as pd

from policies.autoscalerobjects import keda_parameters
from policies.replicas import ReplicaHistory, scaling_plan
from policies.replicas.burst import burst_floor, floor_needed, weighted_floor
from recommender.core.annotations import CAPACITY_ANNOTATION
from recommender.core.inventory import Allocation, Sharing, Workload, WorkloadRef
from recommender.core.plan import Classification, ScalingPlan, WorkloadClass
from recommender.core.settings import ScalingSettings

STEP = 60.0


def history(values: list[float] | np.ndarray) -> ReplicaHistory:
    idx = pd.date_range("2024-01-01", periods=len(values), freq="60s", tz="UTC")
    return ReplicaHistory(STEP, pd.Series(np.asarray(values, dtype="float64"), index=idx))


def bursts(n_bursts: int, idle_steps: int = 120, burst: float = 40.0, steady: float = 0.0) -> np.ndarray:
    """``n_bursts`` one-step bursts of ``burst`` req/s, each after ``idle_steps`` at ``steady`` req/s."""
    return np.concatenate([np.r_[np.full(idle_steps, steady), burst] for _ in range(n_bursts)])


def test_rises_under_burn_the_bursts_a_late_autoscaler_misses() -> None:
    # bursts of 40 req/s from idle: a replica serves 10, so 4 replicas must already be up
    floor = burst_floor(history(bursts(5)), 10.0, 7.0, 90.0, 0.005)
    assert floor.replicas == 4
    assert floor.share_without is not None and floor.share_without > 0.9


def test_none_when_what_misses_is_within_the_budget() -> None:
    # the same bursts, now a small share of requests: a steady 5 req/s beside them carries the rest
    rate = bursts(2, idle_steps=2000, burst=40.0, steady=5.0)
    share = 80 / rate.sum()
    assert burst_floor(history(rate), 10.0, 7.0, 90.0, share * 1.01).replicas == 0
    assert burst_floor(history(rate), 10.0, 7.0, 90.0, share * 0.5).replicas == 4


def test_decays_as_the_bursts_leave_the_history() -> None:
    # the floor is read from the history it is given: bursts gone from the window, the floor goes with them
    recent = np.full(2000, 5.0)
    assert burst_floor(history(np.r_[bursts(5), recent]), 10.0, 7.0, 90.0, 0.005).replicas == 4
    assert burst_floor(history(recent), 10.0, 7.0, 90.0, 0.005).replicas == 0


def test_bounded_by_the_burst_it_serves() -> None:
    # never more than the replicas that serve the largest step at the objective
    rate = np.r_[bursts(5, burst=40.0), bursts(1, burst=95.0)]
    floor = burst_floor(history(rate), 10.0, 7.0, 90.0, 0.0)
    assert floor.replicas == 10


def test_a_ramp_the_autoscaler_follows_needs_no_floor() -> None:
    # a rise slow against the wake: the replicas sized a wake ago at the target serve it at capacity
    ramp = np.linspace(1.0, 60.0, 600)
    assert (floor_needed(ramp, 10.0, 7.0, 2) == 0).all()
    assert burst_floor(history(ramp), 10.0, 7.0, 90.0, 0.0).replicas == 0


def test_no_oscillation_on_an_on_off_miss_pattern() -> None:
    # the floor reads demand, which the floor does not change: replayed refit after refit over a history in
    # which misses come and go (bursts on alternate days), it never falls to zero and back, and it moves
    # monotonically as bursts enter the trailing window
    day = 1440
    days = [bursts(10, idle_steps=day // 10 - 1) if d % 2 == 0 else np.full(day, 0.5) for d in range(6)]
    rate = np.concatenate(days)
    floors = [burst_floor(history(rate[max(0, end - 2 * day):end]), 10.0, 7.0, 90.0, 0.005).replicas
              for end in range(day, rate.size + 1, day // 4)]
    assert set(floors) == {4}


def test_weighted_floor_is_the_smallest_within_the_allowance() -> None:
    need = np.array([0, 3, 5, 5, 2])
    weight = np.array([100.0, 1.0, 2.0, 2.0, 1.0])
    assert weighted_floor(need, weight, 0.0) == 5
    assert weighted_floor(need, weight, 4.0) == 3  # both 5s left over the objective: 4 requests
    assert weighted_floor(need, weight, 6.0) == 0


def workload() -> Workload:
    alloc = Allocation(Sharing.EXCLUSIVE, gpus=1, gpu_equivalents=1.0, replicas=1)
    return Workload(WorkloadRef("ns", "Deployment", "svc"), alloc, annotations={CAPACITY_ANNOTATION: "10"},
                    cold_start_s=60.0)


def plan(settings: ScalingSettings) -> ScalingPlan:
    rt = Classification(WorkloadClass.REAL_TIME, 1.0, (), "annotation")
    p = scaling_plan(workload(), history(np.r_[bursts(40), np.zeros(5)]), rt, (), settings)
    assert isinstance(p, ScalingPlan)
    return p


def test_plan_and_keda_carry_the_floor_as_min_replicas() -> None:
    base = ScalingSettings(max_bound_history_s=0, min_forecast_history_s=0, no_forecast_floor_window_s=60.0)
    off, on = plan(base), plan(base.model_copy(update={"burst_floor_budget_frac": 0.5}))
    assert off.min_replicas == 1
    assert on.min_replicas > off.min_replicas and on.min_replicas <= on.recommended_replicas
    assert any(r.startswith("burst floor") for r in on.reasons)
    spec = keda_parameters(on)
    assert spec["minReplicaCount"] == on.min_replicas
