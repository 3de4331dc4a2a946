"""Replica policy: the arithmetic in comments beside each expected number, then properties."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.autoscalerobjects import trigger_prometheus
from policies.replicas import (
    NoScalingPlan,
    ReplicaHistory,
    autoscaled_replicas,
    carried_misses,
    cooldown_s,
    history_from_snapshot,
    hpa_behavior,
    keda_parameters,
    locate_knee,
    rescued_steps,
    scaling_plan,
    wake_cost,
    wake_steps,
)
from policies.rightscale import ShapeScale, shape_scale
from recommender.core import usage as m
from recommender.core.annotations import CAPACITY_ANNOTATION, RECOMMENDATION_ANNOTATION, TTFT_OBJECTIVE_ANNOTATION
from recommender.core.inventory import Allocation, Sharing, Workload, WorkloadRef
from recommender.core.plan import Classification, Forecast, ScalingPlan, WorkloadClass
from recommender.core.settings import ScalingSettings
from recommender.core.usage import Snapshot
from recommender.mechanisms.mig import MigShare

RT, NRT, BATCH = WorkloadClass.REAL_TIME, WorkloadClass.NEAR_REAL_TIME, WorkloadClass.BATCH
# bounds and forecasts from any history; the short-history ceiling and the forecast's history have their own tests
S = ScalingSettings(max_bound_history_s=0, min_forecast_history_s=0)
# latency-bound classes may go to zero where wakes are cheap (on any length of history: the tests' are short)
WAKE = S.model_copy(update={"wake_budget_frac": 0.5, "wake_min_history_s": 0.0})
DAY_ONLY = S.model_copy(update={"fast_budget_window_s": None})  # the error budget's day alone, no last hour


def workload(replicas: int = 1, cold_start_s: float | None = None, annotations: dict[str, str] | None = None
             ) -> Workload:
    alloc = Allocation(Sharing.EXCLUSIVE, gpus=1, gpu_equivalents=1.0, replicas=replicas)
    ref = WorkloadRef("ns", "Deployment", "svc")
    return Workload(ref, alloc, annotations=annotations or {}, cold_start_s=cold_start_s)


def cls(c: WorkloadClass) -> Classification:
    return Classification(c, 1.0, ("test",), "annotation")


def series(values: list[float] | np.ndarray, step_s: float = 60.0) -> pd.Series:
    idx = pd.date_range("2024-01-01", periods=len(values), freq=pd.Timedelta(seconds=step_s), tz="UTC")
    return pd.Series(np.asarray(values, dtype="float64"), index=idx)


def forecast(**columns: list[float]) -> Forecast:
    idx = pd.date_range("2024-02-01", periods=len(next(iter(columns.values()))), freq="10min", tz="UTC")
    return Forecast(m.REQUEST_RATE, "test", pd.DataFrame(columns, index=idx))


def plan(w: Workload, h: ReplicaHistory, c: WorkloadClass | None, fcs: tuple[Forecast, ...] = (),
         s: ScalingSettings = S, prev: ScalingPlan | None = None) -> ScalingPlan:
    out = scaling_plan(w, h, cls(c) if c else None, fcs, s, prev)
    assert isinstance(out, ScalingPlan), out
    return out


def with_capacity(value: str = "10") -> Workload:
    return workload(annotations={CAPACITY_ANNOTATION: value})


FC = forecast(mean=[4.0, 9.0], lo_80=[2.0, 6.0], hi_80=[5.0, 20.0], lo_95=[1.0, 5.0], hi_95=[6.0, 35.0])


@pytest.mark.parametrize(
    ("klass", "recommended", "low", "high", "target"),
    [
        # real-time: hi_95 peak 35, target 10 x (1 - 0.30) = 7 → ceil(35/7) = 5; trough 6 → min ceil(6/7) = 1;
        # max: max(35, observed 20) = 35 → 5 x (1 + 2.0 burst) = 15
        (RT, 5, 1, 15, 7.0),
        # near-real-time: hi_80 peak 20, target 10 x 0.85 = 8.5 → ceil(2.35) = 3; trough 5 → 1;
        # max: max(20, 20) → 3 x 3 = 9
        (NRT, 3, 1, 9, 8.5),
        # batch: mean peak 9, target 10 → 1; trough 4 → min 1 (no long gaps: not to zero); max 20/10=2 → 6
        (BATCH, 1, 1, 6, 10.0),
    ],
)
def test_forecast_band_by_class(klass: WorkloadClass, recommended: int, low: int, high: int, target: float) -> None:
    p = plan(with_capacity(), ReplicaHistory(60.0, series([5.0, 20.0, 3.0])), klass, (FC,))
    assert (p.recommended_replicas, p.min_replicas, p.max_replicas) == (recommended, low, high)
    assert p.target_per_replica == pytest.approx(target)
    assert p.capacity_source == "configured" and not p.scale_to_zero


def test_short_history_leaves_max_at_the_ceiling() -> None:
    """Three minutes of history cannot bound a burst: max stays at max_replicas until the history is long enough."""
    h = ReplicaHistory(60.0, series([5.0, 20.0, 3.0]))
    short = plan(with_capacity(), h, RT, (FC,), S.model_copy(update={"max_bound_history_s": 181, "max_replicas": 40}))
    assert (short.recommended_replicas, short.min_replicas, short.max_replicas) == (5, 1, 40)
    assert any("max_replicas ceiling" in r for r in short.reasons)
    enough = plan(with_capacity(), h, RT, (FC,), S.model_copy(update={"max_bound_history_s": 180, "max_replicas": 40}))
    assert enough.max_replicas == 15
    tight = plan(with_capacity(), h, RT, (FC,), S.model_copy(update={"max_bound_history_s": 180,
                                                                      "max_burst_frac": 0.5}))
    assert tight.max_replicas == 8  # 5 x 1.5 = 7.5 → 8


def test_a_forecast_on_too_little_history_is_shown_not_acted_on() -> None:
    """Under two days its band is widened (up to x5) for a daily season it cannot see: following it held far
    more in the replay than sizing on the observed rate, so the plan sizes on the latter until then."""
    h = ReplicaHistory(60.0, series([5.0, 20.0, 3.0]))
    early = plan(with_capacity(), h, RT, (FC,), ScalingSettings(max_bound_history_s=0))  # 3 min, under the 48 h
    assert early.demand_source == "observed" and early.recommended_replicas == 3  # observed peak 20 / 7
    assert early.min_replicas == 3  # the floor until a forecast is acted on: the last hours' peak
    assert any(r.startswith("request-rate forecast not acted on yet: 0.05 h of history, under the 48 h")
               for r in early.reasons)
    later = plan(with_capacity(), h, RT, (FC,), ScalingSettings(max_bound_history_s=0, min_forecast_history_s=180))
    assert later.demand_source == "forecast" and later.recommended_replicas == 5  # the band's hi_95 35 / 7
    assert not any("not acted on" in r for r in later.reasons)
    assert plan(with_capacity(), h, RT, (), ScalingSettings()).demand_source == "observed"


@pytest.mark.parametrize(
    ("klass", "recommended"),
    [
        (RT, 3),  # observed peak 20 / 7 = 2.86 → 3
        (NRT, 3),  # observed p95 of [3, 5, 20]: position 1.9 → 5 + 0.9 x 15 = 18.5 / 8.5 = 2.18 → 3
        (BATCH, 1),  # observed mean 28/3 = 9.33 / 10 → 1
    ],
)
def test_observed_demand_without_forecast(klass: WorkloadClass, recommended: int) -> None:
    p = plan(with_capacity(), ReplicaHistory(60.0, series([5.0, 20.0, 3.0])), klass)
    assert p.recommended_replicas == recommended
    assert any("no forecast" in r for r in p.reasons)


def test_without_forecast_the_floor_is_the_quietest_step_except_for_real_time() -> None:
    h = ReplicaHistory(60.0, series([12.0, 20.0, 8.0, 9.0]))
    # near-real-time target 10 x 0.85 = 8.5: p95 18.8 → 3 replicas; the quietest step 8 → min ceil(0.94) = 1
    p = plan(with_capacity(), h, NRT)
    assert (p.recommended_replicas, p.min_replicas) == (3, 1)
    assert any("floor 8 req/s: the quietest step seen" in r for r in p.reasons)
    # real-time target 7: peak 20 → 3, and the floor is the peak of the last 6 h (all of it here) until a forecast
    rt = plan(with_capacity(), h, RT)
    assert (rt.recommended_replicas, rt.min_replicas) == (3, 3)
    assert any("floor 20 req/s: the peak of the last 6 h until a forecast exists" in r for r in rt.reasons)


def test_without_forecast_the_real_time_floor_forgets_peaks_older_than_its_window() -> None:
    # 10 h of minutes: a 20 req/s burst in the first hour, 9 req/s at most since; target 7
    rate = [20.0] * 60 + [9.0, 4.0] * 270
    h = ReplicaHistory(60.0, series(rate))
    six = plan(with_capacity(), h, RT)  # the last 6 h peak at 9 → ceil(9 / 7) = 2; the recommendation keeps 20 → 3
    assert (six.recommended_replicas, six.min_replicas) == (3, 2)
    eleven = plan(with_capacity(), h, RT, s=S.model_copy(update={"no_forecast_floor_window_s": 11 * 3600}))
    assert eleven.min_replicas == 3  # the window reaches the burst
    gap = ReplicaHistory(60.0, series([20.0] * 60 + [np.nan] * 540))  # the metric lost for the last 9 h
    assert plan(with_capacity(), gap, RT).min_replicas == 3  # nothing known lately: the peak of all history


def knee_history(with_knee: bool, good_steps: int = 40) -> ReplicaHistory:
    """2 replicas; good steps at 16 req/s (8 per replica, TTFT 1 s), knee steps at 24 req/s (TTFT 5 s, 3 waiting)."""
    rate = [16.0] * good_steps + ([24.0] * 10 if with_knee else [])
    ttft = [1.0] * good_steps + ([5.0] * 10 if with_knee else [])
    wait = [0.0] * good_steps + ([3.0] * 10 if with_knee else [])
    return ReplicaHistory(60.0, series(rate), series(ttft), series(wait))


def test_capacity_measured_at_the_knee_beats_configured() -> None:
    w = workload(replicas=2, annotations={CAPACITY_ANNOTATION: "50"})
    p = plan(w, knee_history(True), RT, s=DAY_ONLY)
    # good steps: 16 req/s / 2 replicas = 8 each → p95 = 8; target 8 x 0.7 = 5.6; peak 24 → ceil(4.29) = 5
    assert p.per_replica_capacity == pytest.approx(8.0) and p.capacity_source == "measured"
    assert p.recommended_replicas == 5
    assert p.headroom_frac == pytest.approx(0.30)  # its misses ran at 12 per replica, over capacity: the knee's
    burst = plan(w, knee_history(True), RT)  # within the last hour they are a burst's, which headroom absorbs:
    assert burst.per_replica_capacity == pytest.approx(8.0)  # 10 of 50 steps = 20%, +43 points, at most 60%
    assert burst.headroom_frac == pytest.approx(0.60) and burst.recommended_replicas == math.ceil(24 / 3.2)
    assert any("in the worst 1 h of the last 6 h" in r and "within the capacity" not in r for r in burst.reasons)


def test_capacity_stays_configured_when_history_is_not_to_measure_it() -> None:
    w = workload(replicas=2, annotations={CAPACITY_ANNOTATION: "50"})
    p = plan(w, knee_history(True), RT, s=S.model_copy(update={"capacity_from_history": False}))
    assert p.per_replica_capacity == 50.0 and p.capacity_source == "configured"  # the knee is not read


def test_capacity_configured_when_no_knee_else_lower_bound() -> None:
    w = workload(replicas=2, annotations={CAPACITY_ANNOTATION: "12"})
    assert plan(w, knee_history(False), RT).per_replica_capacity == 12.0  # the service never queued
    lower = plan(workload(replicas=2), knee_history(False), RT)
    assert lower.per_replica_capacity == pytest.approx(8.0) and lower.capacity_source == "lower bound"
    assert any("lower bound" in r for r in lower.reasons)


def test_a_lower_bound_never_falls_below_the_previous_plans_capacity() -> None:
    """Under our own autoscaling the replicas serve at the last target, 30% under its capacity: read afresh, the
    lower bound would take the next target 30% lower each cycle; carried from the previous plan it holds."""
    w, h = workload(replicas=2), knee_history(False)  # 8 per replica, never missed: lower bound 8
    first = plan(w, h, RT)
    again = plan(w, replace(h, request_rate_per_s=h.request_rate_per_s * 0.7), RT, prev=first)  # served at target
    assert again.per_replica_capacity == pytest.approx(8.0) and again.capacity_source == "lower bound"
    assert any("kept at 8 req/s per replica, the previous plan's (lower bound)" in r for r in again.reasons)
    fresh = plan(w, replace(h, request_rate_per_s=h.request_rate_per_s * 0.7), RT)
    assert fresh.per_replica_capacity == pytest.approx(5.6)  # what the ratchet would have read
    higher = plan(w, replace(h, request_rate_per_s=h.request_rate_per_s * 1.5), RT, prev=first)
    assert higher.per_replica_capacity == pytest.approx(12.0)  # served more: the lower bound rises
    knee = plan(w, knee_history(True), RT, prev=replace(first, per_replica_capacity=50.0))
    assert knee.per_replica_capacity == pytest.approx(8.0) and knee.capacity_source == "measured"  # a knee wins
    conf = plan(with_capacity("6"), h, RT, prev=first)
    assert conf.per_replica_capacity == 6.0  # a configured figure is not a lower bound: the user's word stands


@pytest.mark.parametrize(("recorded", "expect"), [
    ('{"replicaCapacity": 8.0, "capacitySource": "lower bound", "replicas": 2}', 8.0),
    ('{"replicaCapacity": 4.0, "capacitySource": "lower bound"}', 5.6),  # lower than read today: not kept
    ('{"replicas": 2}', 5.6),  # a record from before the capacity was recorded
    ('{"replicaCapacity": "NaN"}', 5.6),
    ('{"replicaCapacity": -3}', 5.6),
    ("not json {", 5.6),  # edited by hand
    ('["replicaCapacity", 8]', 5.6),
])
def test_after_a_restart_a_lower_bound_is_kept_at_the_capacity_recorded_on_the_workload(
        recorded: str, expect: float) -> None:
    """The controller's plan store lives in memory: on its first cycle after a restart there is no previous
    plan, and the capacity it recorded in the workload's recommendation annotation stands in for it."""
    h = knee_history(False)
    served_at_target = replace(h, request_rate_per_s=h.request_rate_per_s * 0.7)  # a lower bound of 5.6
    w = workload(replicas=2, annotations={RECOMMENDATION_ANNOTATION: recorded})
    p = plan(w, served_at_target, RT)
    assert p.per_replica_capacity == pytest.approx(expect) and p.capacity_source == "lower bound"
    kept = [r for r in p.reasons if r.startswith("kept at")]
    assert kept == ([f"kept at 8 req/s per replica, recorded on the workload ({RECOMMENDATION_ANNOTATION}: lower "
                     "bound): under our own autoscaling the replicas served at its target, so a lower bound read "
                     "from them would shrink each cycle"] if expect == 8.0 else [])
    previous = plan(w, replace(h, request_rate_per_s=h.request_rate_per_s * 1.25), RT)  # 10: the loop's own wins
    assert plan(w, served_at_target, RT, prev=previous).per_replica_capacity == pytest.approx(10.0)


def outcomes(groups: list[tuple[float, bool, int]]) -> pd.DataFrame:
    """Steps as (rate per replica, missed, how many)."""
    rows = [(per, missed) for per, missed, n in groups for _ in range(n)]
    return pd.DataFrame(rows, columns=["per", "missed"])


CLEAN = [(float(r), False, 5) for r in range(1, 9)] + [(float(r), True, 5) for r in range(9, 13)]


@pytest.mark.parametrize(("groups", "min_missed", "knee"), [
    (CLEAN, 5, (8.0, 9.0)),  # met up to 8 per replica, missed from 9
    ([*CLEAN, (2.0, True, 1)], 5, (8.0, 9.0)),  # a miss at a low rate (a cold start) is pooled away
    ([*CLEAN, (20.0, False, 1)], 5, (8.0, 9.0)),  # one good step above the misses does not move it
    ([*CLEAN, (8.0, True, 4)], 5, (8.0, 9.0)),  # at 8: 4 of 9 missed, under one half
    ([*CLEAN, (8.0, True, 6)], 5, (7.0, 8.0)),  # 6 of 11: over it
    ([(1.0, False, 40), (9.0, True, 3)], 5, None),  # three misses at the busiest steps locate nothing...
    ([(1.0, False, 40), (9.0, True, 3)], 3, (1.0, 9.0)),  # ...unless that is enough
    ([(1.0, True, 3), (2.0, False, 1), (3.0, True, 3)], 1, None),  # missed from the lowest rate on
    ([(float(r), False, 5) for r in range(1, 9)], 1, None),  # never missed: no knee, capacity unknown above 8
])
def test_the_knee_is_where_a_miss_becomes_more_likely_than_not(groups: list[tuple[float, bool, int]],
                                                                min_missed: int, knee: tuple[float, float] | None
                                                                ) -> None:
    found = locate_knee(outcomes(groups), min_missed)
    assert (found and (found.below, found.above)) == knee


def autoscaled(per_replica: list[float], ttft: list[float], replicas: list[int]) -> tuple[Workload, Snapshot]:
    """A service the HPA scaled: today 4 replicas, at each step ``replicas`` served ``per_replica`` each."""
    n = len(per_replica)
    idx = series([0.0] * n).index
    w = workload(replicas=4)
    key = w.ref.key
    usage = {m.REQUEST_RATE: pd.DataFrame({key: np.multiply(per_replica, replicas)}, index=idx),
             m.TTFT_P95_S: pd.DataFrame({key: ttft}, index=idx),
             m.SERVING_REPLICAS: pd.DataFrame({key: np.asarray(replicas, dtype="float64")}, index=idx)}
    return w, Snapshot((w,), usage, idx[0].to_pydatetime(), idx[-1].to_pydatetime(), 60.0)


def test_under_autoscaling_capacity_is_read_per_serving_replica_and_does_not_shrink_to_the_target() -> None:
    """Replicas at the target (7 per replica, 1-4 of them), bursts before new replicas were ready: met at 9,
    missed at 14 (5 steps of 635: within the 1% error budget). The knee lies between 9 and 14. A configured
    10 inside it is kept, so the next target is 7 again; measured alone it is 9, the highest rate met, not the
    7 the replicas usually ran at (a p95 of the good steps would read 7 and take the next target to 4.9, and
    so on)."""
    per = [7.0] * 600 + [9.0] * 30 + [14.0] * 5
    ttft = [1.0] * 630 + [5.0] * 5
    replicas = [1 + i % 4 for i in range(635)]
    w, snap = autoscaled(per, ttft, replicas)
    h = history_from_snapshot(snap, w)
    measured = plan(w, h, RT)
    assert measured.per_replica_capacity == pytest.approx(9.0) and measured.capacity_source == "measured"
    kept = plan(replace(w, annotations={CAPACITY_ANNOTATION: "10"}), h, RT, s=DAY_ONLY)
    assert kept.per_replica_capacity == 10.0 and kept.capacity_source == "configured"
    assert kept.target_per_replica == pytest.approx(7.0)  # 10 x (1 - 30%): where the replicas ran
    assert any("consistent with history" in r for r in kept.reasons)
    low = plan(replace(w, annotations={CAPACITY_ANNOTATION: "6"}), h, RT)  # history met the objective at 9
    assert low.per_replica_capacity == pytest.approx(9.0) and any("configured 6 disagrees" in r for r in low.reasons)
    today = plan(w, replace(h, replicas=None), RT)  # read against today's 4 replicas the misses mix with good
    assert today.capacity_source == "lower bound"  # steps (14 x 1/4 beside 7 x 2/4): no knee is left


def budget_history(ttft: list[float]) -> ReplicaHistory:
    """One replica at its configured 10 req/s every step, so measured capacity, where the misses make it
    count, is also 10: only the headroom moves."""
    return ReplicaHistory(60.0, series([10.0] * len(ttft)), series(ttft))


@pytest.mark.parametrize(("klass", "ttft", "headroom", "recommended"), [
    # 1 missed step of 100 = the 1% budget: the class's 30%; target 7 → ceil(35 / 7) = 5
    (RT, [3.0] + [1.0] * 99, 0.30, 5),
    # 4 of 100 = 4x the budget: two doublings, +2 x 10 points → 50%; target 5 → ceil(35 / 5) = 7
    (RT, [3.0] * 4 + [1.0] * 96, 0.50, 7),
    # 4 missed of 8 steps with a value (the rest unknown) = 50%: log2(50) x 10 points → capped at 60%;
    # target 4 → ceil(35 / 4) = 9
    (RT, [3.0] * 4 + [1.0] * 4 + [np.nan] * 92, 0.60, 9),
    # near-real-time from its 15%: 4x → 35%; target 6.5 → hi_80 peak 20 / 6.5 → 4
    (NRT, [3.0] * 4 + [1.0] * 96, 0.35, 4),
    # misses only before the last 24 h: forgotten
    (RT, [3.0] * 10 + [1.0] * 1440, 0.30, 5),
    # batch has no objective to spend: 0 headroom whatever TTFT did; mean peak 9 / 10 → 1
    (BATCH, [3.0] * 50 + [1.0] * 50, 0.0, 1),
])
def test_an_overspent_error_budget_raises_the_headroom(klass: WorkloadClass, ttft: list[float], headroom: float,
                                                        recommended: int) -> None:
    p = plan(with_capacity(), budget_history(ttft), klass, (FC,), DAY_ONLY)
    assert p.per_replica_capacity == pytest.approx(10.0)
    assert p.headroom_frac == pytest.approx(headroom)
    assert p.target_per_replica == pytest.approx(10.0 * (1 - headroom))
    assert p.recommended_replicas == recommended
    raised = [r for r in p.reasons if "error budget" in r]
    assert bool(raised) == (headroom > S.headroom_frac.get(klass.value, 0.0) + 1e-9)


def test_misses_above_a_configured_capacity_spend_the_budget_too() -> None:
    """Over a configured capacity a miss is a burst or a late scale-up, which headroom absorbs; only a measured
    capacity has already sized for its own knee (test_capacity_measured_at_the_knee_beats_configured)."""
    h = ReplicaHistory(60.0, series([20.0] * 100), series([3.0] * 4 + [1.0] * 96))  # 20 req/s on one replica
    p = plan(with_capacity(), h, RT, (FC,), DAY_ONLY.model_copy(update={"capacity_from_history": False}))
    assert p.capacity_source == "configured" and p.headroom_frac == pytest.approx(0.50)  # 4%: two doublings


@pytest.mark.parametrize(("calm_after", "headroom"), [
    (57, 0.30 + 0.1 * math.log2(3 / 60 / 0.01)),  # 3 of an hour's 60 steps: 5%, +23 points
    (300, 0.30 + 0.1 * math.log2(3 / 60 / 0.01)),  # 5 h later that hour is still the worst in the last 6 h
    (430, 0.30),  # 7 h later no hour ending in the last 6 h holds them, and 3 of 1441 steps in the day is in budget
])
def test_a_burst_of_misses_raises_headroom_for_hours(calm_after: int, headroom: float) -> None:
    """Over a day, a burst's few misses are within the budget until the day is spent; its worst hour sees them at
    once, and holds the headroom through the hours a burst episode lasts."""
    h = budget_history([1.0] * 1500 + [3.0] * 3 + [1.0] * calm_after)
    assert plan(with_capacity(), h, RT, (FC,)).headroom_frac == pytest.approx(headroom)
    assert plan(with_capacity(), h, RT, (FC,), DAY_ONLY).headroom_frac == pytest.approx(0.30)


@pytest.mark.parametrize(("misses", "min_missed", "headroom"), [
    (1, 2, 0.30),  # one stray minute: 1.7% of the hour, but a window needs two missed steps to count
    (1, 1, 0.30 + 0.1 * math.log2(1 / 60 / 0.01)),  # counted, it would add 7 points for 6 h
    (2, 2, 0.30 + 0.1 * math.log2(2 / 60 / 0.01)),
])
def test_a_stray_miss_does_not_raise_headroom(misses: int, min_missed: int, headroom: float) -> None:
    h = budget_history([1.0] * 1500 + [3.0] * misses + [1.0] * 57)
    s = S.model_copy(update={"fast_budget_min_missed": min_missed})
    p = plan(with_capacity(), h, RT, (FC,), s)
    assert p.headroom_frac == pytest.approx(headroom)
    assert any("worst 1 h" in r for r in p.reasons) == (headroom > 0.30)


def woken(misses_at: int, zero: bool) -> ReplicaHistory:
    """One replica serving 1,660 steps, but at zero for the 100 from step 1,400 (no requests, no TTFT) where
    ``zero``; three missed steps from ``misses_at``."""
    ttft = np.ones(1660)
    ttft[misses_at:misses_at + 3] = 3.0
    rate, replicas = np.full(1660, 10.0), np.ones(1660)
    if zero:
        ttft[1400:1500], rate[1400:1500], replicas[1400:1500] = np.nan, 0.0, 0.0
    return ReplicaHistory(60.0, series(rate), series(ttft), replicas=series(replicas))


@pytest.mark.parametrize(("misses_at", "zero", "headroom"), [
    (1500, True, 0.30),  # the wake's: a cold start's misses, left out of the budget
    (1502, True, 0.30),  # still within the poll and cold start (30 + 180 s: 4 steps and the one the run ends at)
    (1500, False, 0.30 + 0.1 * math.log2(3 / 60 / 0.01)),  # the same steps without a wake: they count
    (1600, True, 0.30 + 0.1 * math.log2(3 / 60 / 0.01)),  # 100 min after the wake: the service's own misses
])
def test_a_wakes_misses_do_not_raise_headroom(misses_at: int, zero: bool, headroom: float) -> None:
    """A request that arrives at zero waits a cold start: no headroom serves it, so raising headroom for six hours
    for a wake's misses buys nothing (wake_budget_frac is what bounds them)."""
    p = plan(with_capacity(), woken(misses_at, zero), RT, (FC,))
    assert p.headroom_frac == pytest.approx(headroom)
    assert any("left out of the error budget" in r for r in p.reasons) == (headroom == 0.30)


def test_rescued_steps_are_those_met_on_more_replicas_than_a_recent_miss_at_its_rate() -> None:
    missed = series([0, 1, 0, 0, 0, 0, 0, np.nan, 1, 0, 0, 0])
    replicas = series([2, 2, 2, 3, 3, 2, 3, 3, 3, 3, 4, 4])
    rate = series([5, 8, 9, 8, 9, 9, 9, 9, 6, 9, 9, 5])
    got = rescued_steps(missed, replicas, rate, 4)
    # step 2: as many replicas as the miss had; 3-4: one more, at the miss's rate or above; 5: back to 2;
    # 6: the miss at 1 is 5 steps back; 7: no TTFT; 9: as many as the miss at 8; 10: one more;
    # 11: one more, but under the 6 req/s the replicas missed at
    np.testing.assert_array_equal(got.to_numpy(), [0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1, 0])
    assert not rescued_steps(missed, replicas, rate, 0).any()
    assert not rescued_steps(missed * 0, replicas, rate, 4).any()  # no miss, nothing rescued


def rescued(extra_replicas: bool) -> ReplicaHistory:
    """One replica at 10 req/s for 1,500 steps, two missed steps, then 20 calm ones; where ``extra_replicas``, a
    second replica serves the 5 steps after the misses (what the objective trigger adds)."""
    ttft, replicas = np.ones(1522), np.ones(1522)
    ttft[1500:1502] = 3.0
    if extra_replicas:
        replicas[1502:1507] = 2.0
    return ReplicaHistory(60.0, series(np.full(1522, 10.0)), series(ttft), replicas=series(replicas))


RESCUE = S.model_copy(update={"count_rescued_steps": True})


@pytest.mark.parametrize(("extra_replicas", "count", "headroom"), [
    (False, True, 0.30 + 0.1 * math.log2(2 / 60 / 0.01)),  # 2 missed of the last hour's 60 steps
    (True, True, 0.30 + 0.1 * math.log2(7 / 60 / 0.01)),  # and the 5 the added replica served: 7 of 60
    (True, False, 0.30 + 0.1 * math.log2(2 / 60 / 0.01)),  # the default: only the misses
])
def test_steps_the_fast_loop_rescued_count_as_missed(extra_replicas: bool, count: bool, headroom: float) -> None:
    """The objective trigger adds replicas on a miss and the objective is met again: those steps are the fast
    loop's, so with count_rescued_steps the error budget counts them as missed, else headroom relaxes as the
    trigger works."""
    s = S.model_copy(update={"max_headroom_frac": 0.9, "count_rescued_steps": count})
    p = plan(with_capacity(), rescued(extra_replicas), RT, (FC,), s)
    assert p.headroom_frac == pytest.approx(headroom)
    assert any("replicas added for the miss" in r for r in p.reasons) == (extra_replicas and count)


def test_the_knee_is_not_read_from_rescued_steps() -> None:
    """Misses at 10 req/s per replica, good steps at 4; after each miss a second replica serves 10 req/s (5 per
    replica) within the objective. Those 5s met it on the replicas added for the miss: the knee stays at 4."""
    rate, ttft, replicas = [], [], []
    for _ in range(40):
        rate += [4.0, 10.0, 10.0, 10.0]
        ttft += [1.0, 3.0, 1.0, 1.0]
        replicas += [1.0, 1.0, 2.0, 2.0]
    h = ReplicaHistory(60.0, series(rate), series(ttft), replicas=series(replicas))
    p = plan(workload(), h, RT, (FC,), RESCUE)
    assert p.capacity_source == "measured" and p.per_replica_capacity == pytest.approx(4.0)
    fast = plan(workload(cold_start_s=1.0), h, RT, (FC,), RESCUE.model_copy(update={"rate_window_s": 1}))
    assert fast.per_replica_capacity == pytest.approx(5.0)  # no rescue span: the 5s read as capacity
    assert plan(workload(), h, RT, (FC,)).per_replica_capacity == pytest.approx(5.0)  # the default: they count


def test_carried_misses_are_those_under_a_heavier_miss_of_the_same_run() -> None:
    missed = series([0, 1, 1, 1, 0, 1, 1, 1, 1])
    per = series([1, 5, 3, 6, 2, 4, np.nan, 4.5, 4.2])
    # 2: under the 5 before it; 3: above it; 4 ends the run; 5 starts another; 6: no rate, not judged; 7: above
    # 4 (the run goes on through the step with no rate); 8: under 4.5
    np.testing.assert_array_equal(carried_misses(missed.astype(bool), per).to_numpy(), [0, 0, 1, 0, 0, 0, 0, 0, 1])
    assert not carried_misses(missed.astype(bool), series([1, 1, 2, 3, 1, 1, 1, 2, 3])).any()  # rising runs


def drained(runs: int) -> ReplicaHistory:
    """Two replicas, 200 good steps at 4 and 5 req/s each; ``runs`` times, a step at 12 each (a jump) that missed,
    then two steps at 5.5 each on three replicas that missed while they drained its queue."""
    rate, ttft, replicas = [8.0, 10.0] * 100, [1.0] * 200, [2.0] * 200
    for _ in range(runs):
        rate += [24.0, 16.5, 16.5, 8.0, 8.0]
        ttft += [5.0, 4.0, 3.0, 1.0, 1.0]
        replicas += [2.0, 3.0, 3.0, 2.0, 2.0]
    return ReplicaHistory(60.0, series(rate), series(ttft), replicas=series(replicas))


def test_the_knee_is_not_read_from_a_jumps_backlog() -> None:
    """Misses at 5.5 req/s a replica that come right after a miss at 12 are the 12's queue draining: the configured
    8 req/s, between the 5 the replicas met the objective at and the 12 they missed at, stays."""
    w = workload(annotations={CAPACITY_ANNOTATION: "8"})
    p = plan(w, drained(6), RT, (FC,), DAY_ONLY)
    assert p.capacity_source == "configured" and p.per_replica_capacity == pytest.approx(8.0)
    assert any("consistent with history" in r and "from 12" in r for r in p.reasons)
    # the knee needs min_knee_steps (5) misses at or above it: four jumps alone leave the configured figure too
    assert plan(w, drained(4), RT, (FC,), DAY_ONLY).per_replica_capacity == pytest.approx(8.0)
    # a miss at 5.5 that starts its own run is the rate's: the replicas missed at 5.5 and met it at 5
    rate, ttft, replicas = [8.0, 10.0] * 100 + [16.5] * 6, [1.0] * 200 + [3.0] * 6, [2.0] * 200 + [3.0] * 6
    own = plan(w, ReplicaHistory(60.0, series(rate), series(ttft), replicas=series(replicas)), RT, (FC,), DAY_ONLY)
    assert own.capacity_source == "measured" and own.per_replica_capacity == pytest.approx(5.0)


def test_wake_steps_follow_each_run_at_zero() -> None:
    h = ReplicaHistory(60.0, series([1.0] * 12), replicas=series([1, 0, 0, 1, 2, 2, np.nan, 0, np.nan, 2, 2, 2]))
    got = wake_steps(h, 90.0)  # 2 steps after the run's end, and the end
    assert got is not None
    np.testing.assert_array_equal(got.to_numpy(), [0, 0, 0, 1, 1, 1, 0, 0, 1, 1, 1, 0])  # NaN is not zero
    assert wake_steps(ReplicaHistory(60.0, series([1.0] * 3)), 90.0) is None


def test_on_coarse_steps_the_worst_window_spans_ten_of_them() -> None:
    """A 14-day report reads 600 s steps: an hour holds 6, too few to count, so the window widens to 10 steps."""
    ttft = [1.0] * 200 + [3.0] * 2 + [1.0] * 8
    h = ReplicaHistory(600.0, series([10.0] * len(ttft), 600.0), series(ttft, 600.0))
    p = plan(with_capacity(), h, RT, (FC,), S.model_copy(update={"ttft_error_budget": 0.05}))
    assert p.headroom_frac == pytest.approx(0.50)  # 2 of 10 steps = 20%, 4x the 5% budget (of 6 it would be 33%)
    assert any("worst 1.66667 h of the last 6 h" in r for r in p.reasons)


def test_the_error_budget_is_a_setting() -> None:
    h = budget_history([3.0] * 4 + [1.0] * 96)  # 4% of steps missed
    loose = plan(with_capacity(), h, RT, (FC,), DAY_ONLY.model_copy(update={"ttft_error_budget": 0.05}))
    assert loose.headroom_frac == pytest.approx(0.30)
    fixed = plan(with_capacity(), h, RT, (FC,), DAY_ONLY.model_copy(update={"headroom_step_frac": 0.0}))
    assert fixed.headroom_frac == pytest.approx(0.30)
    old = budget_history([3.0] * 30 + [1.0] * 1440)  # 30 misses, all but one older than a day
    assert plan(with_capacity(), old, RT, (FC,)).headroom_frac == pytest.approx(0.30)  # 1 of 1441: within budget
    week = plan(with_capacity(), old, RT, (FC,), S.model_copy(update={"error_budget_window_s": 7 * 86_400}))
    assert week.headroom_frac == pytest.approx(0.30 + 0.1 * np.log2(30 / 1470 / 0.01))  # 2.04%: +10.3 points


def test_no_capacity_and_no_demand_say_why() -> None:
    out = scaling_plan(workload(replicas=2), knee_history(False, good_steps=5), cls(RT), (), S)
    assert isinstance(out, NoScalingPlan) and "no per-replica capacity" in out.reasons[0]
    out = scaling_plan(with_capacity(), ReplicaHistory(60.0), cls(RT), (), S)
    assert isinstance(out, NoScalingPlan) and "no request-rate history" in out.reasons[0]


def test_bad_annotations_are_ignored_with_a_reason() -> None:
    w = workload(annotations={CAPACITY_ANNOTATION: "fast", TTFT_OBJECTIVE_ANNOTATION: "-1"})
    p = plan(w, ReplicaHistory(60.0, series([1.0])), RT, s=ScalingSettings(replica_capacity_rps=4.0))
    assert p.per_replica_capacity == 4.0  # falls back to settings
    assert any("is not a positive number" in r for r in p.reasons)


def bursts(step_s: float, busy: int, idle: int, cycles: int, level: float = 5.0) -> pd.Series:
    return series(([level] * busy + [0.0] * idle) * cycles, step_s)


def test_batch_with_long_gaps_scales_to_zero_with_derived_keda_parameters() -> None:
    # busy 1 h, idle 5 h (18,000 s ≥ 10 x 180 s): to zero; no short gaps → cooldown = cold start 180 s
    p = plan(with_capacity(), ReplicaHistory(60.0, bursts(60.0, 60, 300, 4)), BATCH)
    assert p.scale_to_zero and p.min_replicas == 0 and p.recommended_replicas == 1
    assert p.cooldown_s == 180 and p.activation_threshold == 0.005556  # 1/180 to 4 significant digits
    spec = keda_parameters(p)
    meta = spec["triggers"][0]["metadata"]  # type: ignore[index]
    assert (spec["minReplicaCount"], spec["maxReplicaCount"], spec["cooldownPeriod"]) == (0, p.max_replicas, 180)
    assert float(meta["threshold"]) == pytest.approx(p.target_per_replica)
    assert float(meta["activationThreshold"]) == 0.005556  # 1/180 to 4 significant digits


@pytest.mark.parametrize(("klass", "annotations", "waiting"), [
    (RT, {}, 14.0),  # target 10 x (1 - 0.30) = 7 req/s x the 2 s default objective = 14 requests
    (RT, {TTFT_OBJECTIVE_ANNOTATION: "0.5"}, 3.5),  # 7 x 0.5 s
    (BATCH, {TTFT_OBJECTIVE_ANNOTATION: "30"}, 300.0),  # no headroom: 10 x 30 s
])
def test_second_trigger_on_requests_waiting_drains_within_the_objective(
        klass: WorkloadClass, annotations: dict[str, str], waiting: float) -> None:
    w = workload(annotations={CAPACITY_ANNOTATION: "10", **annotations})
    p = plan(w, ReplicaHistory(60.0, series([5.0] * 120)), klass)
    assert p.waiting_per_replica == pytest.approx(waiting)
    rate, queue, missed = keda_parameters(p, 'pod=~"x-.*"')["triggers"]  # type: ignore[misc]
    assert "vllm:time_to_first_token_seconds_bucket" in missed["metadata"]["query"]  # type: ignore[has-type]
    assert rate["metadata"]["query"] == (  # arrivals: finished + the growth of running and waiting
        'clamp_min((sum(rate(vllm:request_success_total{pod=~"x-.*"}[120s])) or vector(0)) + '
        '(sum(deriv(vllm:num_requests_running{pod=~"x-.*"}[120s])) or vector(0)) + '
        '(sum(deriv(vllm:num_requests_waiting{pod=~"x-.*"}[120s])) or vector(0)), 0)')
    assert queue["metadata"]["query"] == 'sum(vllm:num_requests_waiting{pod=~"x-.*"})'
    assert (rate["metricType"], queue["metricType"]) == ("AverageValue", "AverageValue")
    assert float(queue["metadata"]["threshold"]) == pytest.approx(waiting)
    assert "activationThreshold" not in queue["metadata"]  # waking from zero is the rate trigger's call
    assert any(f"{waiting:.3g} requests waiting per replica" in r for r in p.reasons)
    # a plan without it or an objective (older plans, hand-made ones) keeps the one trigger
    older = replace(p, waiting_per_replica=None, ttft_objective_s=None)
    assert len(keda_parameters(older)["triggers"]) == 1  # type: ignore[arg-type]


def test_real_time_and_short_gaps_do_not_scale_to_zero() -> None:
    long_gaps = ReplicaHistory(60.0, bursts(60.0, 60, 300, 4))
    assert not plan(with_capacity(), long_gaps, RT).scale_to_zero  # by default real-time never goes to zero
    # opted in: 3 wakes of 3.5 steps (30 s poll + the default 180 s cold start) of 240 busy steps = 4.38%, over
    # 0.5 x 1%
    p = plan(with_capacity(), long_gaps, RT, (FC,), s=WAKE)
    assert not p.scale_to_zero and p.min_replicas == 1
    assert any("wakes would have cost 4.38% of requests" in r for r in p.reasons)
    short_gaps = ReplicaHistory(60.0, bursts(60.0, 1, 1, 100))  # 60 s gaps < 1,800 s
    p = plan(with_capacity(), short_gaps, BATCH)
    assert not p.scale_to_zero and p.min_replicas == 1 and p.activation_threshold == 0.0


def test_real_time_scales_to_zero_where_its_wakes_fit_the_error_budget() -> None:
    # busy 10 h at 5 req/s, idle 5 h; each wake after a gap costs 210 s (poll + cold start) of requests
    cheap = ReplicaHistory(60.0, bursts(60.0, 600, 300, 3))
    p = plan(with_capacity(), cheap, RT, (FC,), s=WAKE)  # 2 wakes x 210 s / 3 x 36,000 s = 0.39% <= 0.5 x 1%
    assert p.scale_to_zero and p.min_replicas == 0 and p.activation_threshold > 0
    assert any("wakes would have cost 0.39% of requests" in r and "HTTP add-on" in r for r in p.reasons)
    assert keda_parameters(p)["minReplicaCount"] == 0
    for settings_ in (S, S.model_copy(update={"wake_budget_frac": 0.25})):  # off (the default); 0.39% > 0.25 x 1%
        off = plan(with_capacity(), cheap, RT, (FC,), s=settings_)
        assert not off.scale_to_zero and off.min_replicas >= 1
    # near-real-time spends the same budget; batch needs none (it is in scale_to_zero_classes)
    assert plan(with_capacity(), cheap, NRT, (FC,), s=WAKE).scale_to_zero
    assert plan(with_capacity(), cheap, BATCH, s=WAKE).scale_to_zero  # no forecast needed where the class allows it
    no_batch = S.model_copy(update={"scale_to_zero_classes": ()})
    assert not plan(with_capacity(), cheap, BATCH, s=no_batch).scale_to_zero


def test_no_wake_budget_scale_to_zero_before_a_forecast_and_two_days() -> None:
    # the same cheap wakes, but no forecast yet: nothing would wake real-time ahead of a burst, and going to zero
    # would drop the floor it keeps until a forecast exists (the peak of the last hours)
    cheap = ReplicaHistory(60.0, bursts(60.0, 600, 300, 3))
    for c in (RT, NRT):
        early = plan(with_capacity(), cheap, c, s=WAKE)
        assert not early.scale_to_zero and early.min_replicas >= 1
        assert any("no request-rate forecast to wake it" in r for r in early.reasons)
    empty = forecast(mean=[], lo_80=[], hi_80=[], lo_95=[], hi_95=[])  # an empty frame is no forecast
    assert not plan(with_capacity(), cheap, RT, (empty,), s=WAKE).scale_to_zero
    # with a forecast, the 45 h of history are under the default 48 h over which wakes are weighed
    short = plan(with_capacity(), cheap, RT, (FC,), s=S.model_copy(update={"wake_budget_frac": 0.5}))
    assert not short.scale_to_zero and any("45 h of request history, under the 48 h" in r for r in short.reasons)
    longer = ReplicaHistory(60.0, bursts(60.0, 600, 300, 4))  # 60 h, 3 wakes: 3 x 210 s / 4 x 36,000 s = 0.44%
    assert plan(with_capacity(), longer, RT, (FC,), s=S.model_copy(update={"wake_budget_frac": 0.5})).scale_to_zero


def test_wake_cost_counts_the_requests_after_gaps_longer_than_the_cooldown() -> None:
    # steps of 60 s: a 10-step gap (600 s), a 2-step gap (120 s), a gap that runs to the end (no wake yet)
    values = [2.0] * 5 + [0.0] * 10 + [4.0, 4.0, 4.0, 2.0] + [0.0] * 2 + [6.0, 2.0] + [0.0] * 20
    h = ReplicaHistory(60.0, series(values))
    total = sum(values) * 60  # 1,920 requests
    # 150 s after the long gap: two whole steps of 4 req/s and half the third: 2.5 x 240 = 600 requests
    assert wake_cost(h, 300.0, 150.0) == pytest.approx(600 / total)
    # a 60 s cooldown lets the short gap scale to zero too: its wake adds 360 + 120 (+ half of an idle step)
    assert wake_cost(h, 60.0, 150.0) == pytest.approx(1080 / total)
    assert wake_cost(h, 900.0, 150.0) == 0.0  # no gap is that long but the last, which has no wake
    assert wake_cost(ReplicaHistory(60.0, series([0.0] * 10)), 60.0, 150.0) is None  # no requests to tell
    assert wake_cost(ReplicaHistory(60.0), 60.0, 150.0) is None
    unknown = ReplicaHistory(60.0, series([np.nan] * 3 + values))  # unknown steps are no requests, no gap
    assert wake_cost(unknown, 300.0, 150.0) == pytest.approx(600 / total)
    # a queue mid-gap is no idle step (as in idle_gaps_s): the 600 s gap splits into 300 s and 240 s runs
    queue = series([1.0 if i == 10 else 0.0 for i in range(len(values))])
    assert wake_cost(h, 400.0, 150.0) == pytest.approx(600 / total)
    assert wake_cost(ReplicaHistory(60.0, series(values), requests_waiting=queue), 400.0, 150.0) == 0.0


def test_measured_cold_start_moves_the_scale_to_zero_line() -> None:
    h = ReplicaHistory(60.0, bursts(60.0, 60, 300, 4))  # 18,000 s gaps
    slow = workload(cold_start_s=2000.0, annotations={CAPACITY_ANNOTATION: "10"})
    assert not plan(slow, h, BATCH).scale_to_zero  # 18,000 < 10 x 2,000


def test_cooldown_is_p90_of_short_gaps_clamped() -> None:
    # short gaps (< 1,800): [60, 120, 600, 900] → p90 at position 2.7 = 600 + 0.7 x 300 = 810 → 810 (x30)
    assert cooldown_s(np.array([60.0, 120, 600, 900, 36000]), 180.0, True, S).seconds == 810
    # only tiny gaps: p90 = 60 → raised to one cold start, 180
    assert cooldown_s(np.array([60.0, 60, 36000]), 180.0, True, S).seconds == 180


@pytest.mark.parametrize(("cold", "window"), [(600.0, 600), (None, 300), (7200.0, 3600), (100.0, 300)])
def test_hpa_scale_down_window_follows_the_cold_start(cold: float | None, window: int) -> None:
    w = workload(cold_start_s=cold, annotations={CAPACITY_ANNOTATION: "10"})
    p = plan(w, ReplicaHistory(60.0, series([1.0])), RT)
    assert hpa_behavior(p)["scaleDown"]["stabilizationWindowSeconds"] == window  # type: ignore[index]


rates = st.lists(st.floats(0, 500, allow_nan=False), min_size=1, max_size=60)
classes = st.sampled_from([RT, NRT, BATCH])


@settings(max_examples=60, deadline=None)
@given(rates, st.floats(0.1, 100), classes, st.floats(1.0, 10.0))
def test_bounds_hold_and_more_demand_never_fewer_replicas(values: list[float], cap: float, c: WorkloadClass,
                                                          factor: float) -> None:
    w = with_capacity(repr(cap))
    low = plan(w, ReplicaHistory(60.0, series(values)), c)
    high = plan(w, ReplicaHistory(60.0, series([v * factor for v in values])), c)
    for p in (low, high):
        assert p.min_replicas <= p.recommended_replicas <= p.max_replicas <= S.max_replicas
    assert high.recommended_replicas >= low.recommended_replicas
    if c is RT:  # by default never to zero
        assert low.min_replicas >= 1 and low.recommended_replicas >= 1 and not low.scale_to_zero


@settings(max_examples=30, deadline=None)
@given(st.integers(31, 500), st.sampled_from([10.0, 60.0]))
def test_zero_demand_batch_with_long_gaps_is_zero(steps: int, step_s: float) -> None:
    p = plan(with_capacity(), ReplicaHistory(step_s, series([0.0] * steps, step_s)), BATCH)
    # one gap of steps x step_s ≥ 1,800 s (31 x 60) → zero; a 10 s step needs 180 steps
    expected_zero = steps * step_s >= 1800
    assert p.scale_to_zero == expected_zero
    assert p.recommended_replicas == (0 if expected_zero else 1)


# --- replicas the plan would have held over the window ---------------------------------------------------

def _fixed(**kw: object) -> ScalingPlan:
    base = ScalingPlan(metric=m.REQUEST_RATE, per_replica_capacity=10.0, target_per_replica=7.0, min_replicas=1,
                       max_replicas=10, recommended_replicas=3, activation_threshold=0.0, cooldown_s=300,
                       scale_to_zero=False, headroom_frac=0.3, cold_start_s=None)
    return replace(base, **kw)  # type: ignore[arg-type]


def test_mean_replicas_follow_demand_and_hold_through_the_scale_down_window() -> None:
    # 60 s steps, window 300 s = 5 steps: one step at 20 req/s (3 replicas) holds 3 for 5 steps, then 1
    rate = series([1.0] * 10 + [20.0] + [1.0] * 9)
    held = [1] * 10 + [3] * 5 + [1] * 5
    assert autoscaled_replicas(ReplicaHistory(60.0, rate), _fixed()) == pytest.approx(np.mean(held))
    # at 600 s steps the window is under one step: no hold
    assert autoscaled_replicas(ReplicaHistory(600.0, series([1.0, 20.0, 1.0], 600.0)), _fixed()) == \
        pytest.approx(5 / 3)


def test_mean_replicas_start_one_cold_start_ahead() -> None:
    # 120 s cold start at 60 s steps: the 3 replicas for step 10 start at step 8; held to step 14
    rate = series([1.0] * 10 + [20.0] + [1.0] * 9)
    held = [1] * 8 + [3] * 7 + [1] * 5
    assert autoscaled_replicas(ReplicaHistory(60.0, rate), _fixed(cold_start_s=120.0)) == pytest.approx(np.mean(held))


def test_mean_replicas_stay_under_the_max_and_leave_the_forecast_trough_out() -> None:
    rate = series([0.0] * 5 + [1000.0] * 5)  # 1 while idle (the plan's min 2 is today's trough), max 4
    assert autoscaled_replicas(ReplicaHistory(60.0, rate), _fixed(min_replicas=2, max_replicas=4)) == \
        pytest.approx((5 * 1 + 5 * 4) / 10)


def test_mean_replicas_reach_zero_only_after_the_cooldown() -> None:
    # 10 busy steps at 1 replica, 20 idle: the first 4 idle steps (240 s < 300 s cooldown) keep 1, then 0
    rate = series([5.0] * 10 + [0.0] * 20)
    p = _fixed(min_replicas=0, scale_to_zero=True)
    assert autoscaled_replicas(ReplicaHistory(60.0, rate), p) == pytest.approx((10 + 4) / 30)
    assert autoscaled_replicas(ReplicaHistory(60.0, rate), replace(p, scale_to_zero=False, min_replicas=1)) == 1.0


def test_mean_replicas_hold_over_gaps_and_need_a_rate() -> None:
    rate = series([20.0, np.nan, np.nan, 1.0, 1.0, 1.0, 1.0, 1.0])  # the gap holds 3; 5 steps of window after
    assert autoscaled_replicas(ReplicaHistory(600.0, rate), _fixed()) == pytest.approx((3 * 3 + 5) / 8)
    assert autoscaled_replicas(ReplicaHistory(60.0, None), _fixed()) is None
    assert autoscaled_replicas(ReplicaHistory(60.0, series([np.nan] * 4)), _fixed()) is None


def test_the_plan_carries_its_mean_unless_capacity_is_only_a_lower_bound() -> None:
    # configured capacity 10 → target 7: 2 replicas for 10 steps, 4 more in the window, then 1 (the real-time
    # floor without a forecast is the last 6 h's peak, 3 req/s: 1 replica)
    rate = series([14.0] * 10 + [3.0] * 400)
    p = plan(with_capacity(), ReplicaHistory(60.0, rate), RT)
    assert p.min_replicas == 1 and p.mean_replicas == pytest.approx((14 * 2 + 396) / 410)
    assert any("at least" in r and "replicas on average" in r for r in p.reasons)
    bound = plan(workload(replicas=2), knee_history(False), RT)  # no annotation, never queued: a lower bound
    assert bound.capacity_source == "lower bound" and bound.mean_replicas is None
    assert any("no mean replica estimate" in r for r in bound.reasons)


SINCE = pd.Timestamp("2024-01-01 00:50", tz="UTC")  # step 50 of series(): the replicas' shape changed there


def test_capacity_is_read_only_on_the_replicas_current_shape() -> None:
    """Steps before a change of shape were another replica's: a knee a slice showed is not a whole GPU's."""
    per = [4.0] * 30 + [6.0] * 20 + [5.0] * 40  # one replica: a slice met 4 and missed 6; now 5 is met
    ttft = [1.0] * 30 + [5.0] * 20 + [1.0] * 40
    h = ReplicaHistory(60.0, series(per), series(ttft))
    w = workload(annotations={CAPACITY_ANNOTATION: "9"})
    mixed = plan(w, h, RT)
    assert mixed.capacity_source == "measured" and mixed.per_replica_capacity == pytest.approx(5.0)
    w = replace(w, shape_since=SINCE.to_pydatetime())
    own = plan(w, h, RT)
    assert own.capacity_source == "configured" and own.per_replica_capacity == 9.0
    assert any(r.startswith("capacity and error budget read from 2024-01-01 00:50 UTC on") for r in own.reasons)
    assert not any("read from" in r for r in mixed.reasons)
    late = pd.Timestamp("2024-01-01 01:25", tz="UTC").to_pydatetime()  # 5 steps since: too few, nothing configured
    short = plan(replace(workload(), shape_since=late), h, RT)  # rather than no plan: across the change, flagged
    assert short.capacity_source == "measured" and short.per_replica_capacity == pytest.approx(5.0)
    assert any(r.startswith("fewer than 30 steps met the objective since the replicas took their current shape at "
                            "2024-01-01 01:25 UTC: capacity read across the change") for r in short.reasons)
    few = knee_history(False, good_steps=5)  # too few on either side of the change: no plan, and why
    none = scaling_plan(replace(workload(), shape_since=pd.Timestamp("2024-01-01 00:02", tz="UTC").to_pydatetime()),
                        few, cls(RT), (), S)
    assert isinstance(none, NoScalingPlan) and none.reasons[0].startswith("no per-replica capacity: fewer than 30")


def test_misses_on_the_shape_before_do_not_spend_the_error_budget() -> None:
    h = budget_history([1.0] * 40 + [3.0] * 10 + [1.0] * 100)  # 10 misses in the last day, all before step 50
    assert plan(with_capacity(), h, RT, (FC,)).headroom_frac > 0.30
    since = replace(with_capacity(), shape_since=SINCE.to_pydatetime())
    assert plan(since, h, RT, (FC,)).headroom_frac == pytest.approx(0.30)
    naive = replace(since, shape_since=SINCE.tz_localize(None).to_pydatetime())  # a time without a zone is UTC
    assert plan(naive, h, RT, (FC,)).headroom_frac == pytest.approx(0.30)
    just = replace(since, shape_since=pd.Timestamp("2024-01-01 02:20", tz="UTC").to_pydatetime())  # 10 steps ago
    assert plan(just, h, RT, (FC,)).headroom_frac > 0.30  # too few steps since to judge on: read across it


@pytest.mark.parametrize(("recorded_since", "expect"), [
    (', "shapeSince": "2024-01-01T00:50:00+00:00"', 8.0),  # recorded on this shape
    (', "shapeSince": "2024-01-01T00:50:00Z"', 8.0),
    ("", 5.6),  # recorded before the shape changed (or before the record carried it)
    (', "shapeSince": "2023-12-30T10:00:00Z"', 5.6),  # another, earlier shape
])
def test_a_recorded_capacity_stands_only_for_the_shape_it_was_measured_on(recorded_since: str, expect: float
                                                                          ) -> None:
    h = knee_history(False, good_steps=90)  # 40 steps from the change on: enough to read a lower bound
    served_at_target = replace(h, request_rate_per_s=h.request_rate_per_s * 0.7)  # a lower bound of 5.6
    text = '{"replicaCapacity": 8.0, "capacitySource": "lower bound"' + recorded_since + "}"
    w = replace(workload(replicas=2, annotations={RECOMMENDATION_ANNOTATION: text}),
                shape_since=SINCE.to_pydatetime())
    assert plan(w, served_at_target, RT).per_replica_capacity == pytest.approx(expect)


# -- on the recommended shape: one plan, its capacity scaled from today's ------------------------------------------

def _on(shape: ShapeScale | None, h: ReplicaHistory | None = None) -> ScalingPlan:
    out = scaling_plan(with_capacity(), h or ReplicaHistory(60.0, series([5.0, 20.0, 3.0])), cls(RT), (FC,), S,
                       shape=shape)
    assert isinstance(out, ScalingPlan), out
    return out


def test_a_smaller_slice_scales_capacity_and_every_bound() -> None:
    # capacity 10 x 3/7 = 4.29 on the slice; target 4.29 x (1 - 0.30) = 3.0; hi_95 peak 35 → ceil(35/3) = 12;
    # trough 6 → 2; max: 35 → 12 x (1 + 2.0) = 36; waiting 3 x the 2 s objective = 6
    p = _on(ShapeScale("mig 3g.40gb", 3 / 7))
    assert p.per_replica_capacity == pytest.approx(10 * 3 / 7) and p.basis_capacity == 10.0
    assert p.target_per_replica == 3.0 and p.waiting_per_replica == 6.0
    assert (p.recommended_replicas, p.min_replicas, p.max_replicas) == (12, 2, 36)
    assert p.capacity_estimated and p.shape == "mig 3g.40gb" and p.measured_capacity == 10.0
    assert any(r.startswith("capacity 4.29 req/s per replica on mig 3g.40gb, estimated") for r in p.reasons)
    assert keda_parameters(p)["triggers"][0]["metadata"]["threshold"] == "3"  # type: ignore[index]


@pytest.mark.parametrize(("factor", "note"), [(2.0, "not assumed to grow"), (None, "is unknown"), (1.0, None)])
def test_a_larger_or_unknown_shape_keeps_todays_capacity(factor: float | None, note: str | None) -> None:
    p = _on(ShapeScale("1× A100-80GB", factor))
    today = _on(None)
    assert (p.target_per_replica, p.recommended_replicas, p.max_replicas) == \
        (today.target_per_replica, today.recommended_replicas, today.max_replicas)
    assert not p.capacity_estimated
    assert any(note in r for r in p.reasons) if note else p.reasons == today.reasons


def test_means_on_today_and_on_the_recommended_shape() -> None:
    # 20 req/s for 10 steps: today's target 7 → 3 replicas; on 3/7 of the compute, target 3 → 7 replicas
    h = ReplicaHistory(600.0, series([20.0] * 10, 600.0))
    p = _on(ShapeScale("mig 3g.40gb", 3 / 7), h)
    assert (p.mean_replicas, p.mean_replicas_right_sized) == (pytest.approx(3.0), pytest.approx(7.0))
    same = _on(ShapeScale("1× A100-80GB", 1.0), h)
    assert same.mean_replicas_right_sized == same.mean_replicas == pytest.approx(3.0)
    assert _on(None, h).mean_replicas_right_sized is None  # no recommendation: no right-sized figure
    assert _on(ShapeScale("mig 5g.60gb", None), h).mean_replicas_right_sized is None


def test_the_previous_plans_capacity_carries_todays_figure_not_the_estimate() -> None:
    """A plan on a smaller slice must not hand its scaled figure to the next cycle as today's: scaled again, it
    would shrink every cycle while the replicas still run on today's shape."""
    first = _on(ShapeScale("mig 3g.40gb", 3 / 7))
    w = workload()  # nothing configured: capacity a lower bound from history, raised to the carried one
    h = knee_history(False)
    again = scaling_plan(w, h, cls(RT), (), S, first, shape=ShapeScale("mig 3g.40gb", 3 / 7))
    assert isinstance(again, ScalingPlan) and again.basis_capacity is not None
    assert again.basis_capacity >= first.measured_capacity - 1e-9 or again.capacity_source != "lower bound"
    assert again.per_replica_capacity == pytest.approx(again.basis_capacity * 3 / 7)


def test_shape_scale_from_the_catalogue() -> None:
    from recommender.core.catalogue import load_catalogue
    from tests import planfixture as pf
    rec = next(r for r in pf.recommendations() if r.recommended is not None)
    whole = Allocation(Sharing.EXCLUSIVE, gpus=1, gpu_equivalents=1.0, replicas=2, gpu_model="A100-80GB")
    sliced = replace(whole, sharing=Sharing.MIG, gpus=0, share=MigShare("3g.40gb", 1), gpu_equivalents=0.5)
    rec = replace(rec, workload=replace(rec.workload, allocation=whole), recommended=sliced)
    assert shape_scale(rec, load_catalogue()) == ShapeScale("mig 3g.40gb", pytest.approx(3 / 7))
    assert shape_scale(replace(rec, recommended=replace(sliced, share=MigShare("5g.60gb", 1))), load_catalogue()) == \
        ShapeScale("mig 5g.60gb", None)
    assert shape_scale(replace(rec, recommended=None), load_catalogue()) is None
    assert shape_scale(replace(rec, recommended=replace(sliced, replicas=0)), load_catalogue()) is None


@pytest.mark.parametrize(("keda", "url", "kw", "want", "warned"), [
    (None, None, {}, "http://prometheus.invalid:9090", False),
    (None, "http://prom:9090/", {}, "http://prom:9090", False),
    ("http://in-cluster:9090", "http://localhost:9090", {"bearer_token": "t"}, "http://in-cluster:9090", False),
    (None, "https://u:p@prom:9090/select/0/prometheus?tenant=x", {}, "https://prom:9090/select/0/prometheus", True),
    (None, "https://prom:9090", {"bearer_token": "t"}, "https://prom:9090", True),
])
def test_trigger_prometheus(keda: str | None, url: str | None, kw: dict[str, str], want: str, warned: bool) -> None:
    from recommender.core.settings import PrometheusSettings
    address, warnings = trigger_prometheus(keda, PrometheusSettings(url=url, **kw))  # type: ignore[arg-type]
    assert address.url == want and address.needs_auth is warned and bool(warnings) is warned
    assert all("TriggerAuthentication" in w and ":p@" not in w for w in warnings)
