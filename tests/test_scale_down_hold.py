"""The scale-down hold (policies/replicas/hold.py): the HPA's scale-down window lengthened where the request rate
shows load returning after short gaps, read against what an autoscaler holding that long, one wake late, would
have served (with the forecast band the plan serves ahead, where it acts on one); and its emission as the plan's
window and the HPA/KEDA behaviour."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from policies.autoscalerobjects import hpa_behavior, keda_parameters, scale_down_window_s
from policies.replicas import ReplicaHistory, scaling_plan
from policies.replicas.demand import band_above_mean
from policies.replicas.hold import band_to_read, held_misses, missed_after_scale_in, scale_down_hold
from recommender.core.plan import Classification, ScalingPlan, WorkloadClass
from recommender.core.settings import ScalingSettings
from tests.replicaplans import band, history, plan, workload

WAKE_S = 150.0  # a poll and a cold start: 3 steps late


def on_off(on: int, off: int, cycles: int, rate: float = 100.0) -> np.ndarray:
    """``cycles`` windows of ``on`` steps at ``rate`` req/s, each followed by ``off`` idle steps."""
    return np.tile(np.r_[np.full(on, rate), np.zeros(off)], cycles)


def test_holds_through_the_gaps_the_load_returns_after() -> None:
    hold = scale_down_hold(history(on_off(10, 10, 72)), 8.0, 3.0, WAKE_S, 300, 3600, 0.005)
    assert hold is not None and hold.reason
    assert hold.shares[300] > 0.2  # every window's first steps find the replicas gone
    assert hold.shares[hold.seconds] <= 0.005
    assert 600 <= hold.seconds < 3600  # the gap, not the most the HPA allows
    shorter = [w for w in hold.shares if w < hold.seconds]
    assert all(hold.shares[w] > 0.005 for w in shorter)  # the shortest that serves them


def test_no_hold_where_the_gaps_outlast_what_the_hpa_may_hold() -> None:
    hold = scale_down_hold(history(on_off(10, 300, 8)), 8.0, 3.0, WAKE_S, 300, 3600, 0.005)
    assert hold is not None and hold.seconds == 300 and not hold.reason
    assert hold.shares[300] == hold.shares[3600] > 0  # the bursts from idle stay: no hold serves them


def test_no_hold_on_load_an_autoscaler_follows() -> None:
    ramp = 50.0 + 40.0 * np.sin(np.arange(3 * 1440) * 2 * np.pi / 1440)  # a diurnal curve
    hold = scale_down_hold(history(ramp), 8.0, 3.0, WAKE_S, 300, 3600, 0.005)
    assert hold is not None and hold.seconds == 300 and max(hold.shares.values()) == 0.0


def test_falls_back_once_the_gaps_leave_the_history_read() -> None:
    rate = np.r_[on_off(10, 10, 72), np.full(7 * 1440, 50.0)]
    with_gaps = scale_down_hold(history(rate), 8.0, 3.0, WAKE_S, 300, 3600, 0.005)
    week = scale_down_hold(history(rate[-7 * 1440:]), 8.0, 3.0, WAKE_S, 300, 3600, 0.005)  # the replay's 7 days
    assert with_gaps is not None and with_gaps.seconds > 300
    assert week is not None and week.seconds == 300


def test_held_misses_fall_as_the_window_grows() -> None:
    rate = np.r_[on_off(10, 10, 5), on_off(5, 30, 5)]
    misses = held_misses(rate, 8.0, 3.0, 3, list(range(0, 60)))
    assert all(a >= b for a, b in itertools.pairwise(misses))
    assert misses[0] > misses[-1] == 0.0


def test_none_without_requests_or_a_choice() -> None:
    assert scale_down_hold(history(np.zeros(100)), 8.0, 3.0, WAKE_S, 300, 3600, 0.005) is None
    assert scale_down_hold(history(on_off(10, 10, 5)), 8.0, 3.0, WAKE_S, 3600, 3600, 0.005) is None


def test_plan_and_hpa_carry_the_hold_as_the_scale_down_window() -> None:
    base = ScalingSettings(max_bound_history_s=0, min_forecast_history_s=0)
    on = plan(base, on_off(10, 10, 72))
    off = plan(base.model_copy(update={"scale_down_hold_budget_frac": None}), on_off(10, 10, 72))
    assert off.scale_down_window_s is None and scale_down_window_s(off) == 300
    assert on.scale_down_window_s is not None and on.scale_down_window_s > 300
    assert any(r.startswith("scale-down held") for r in on.reasons)
    window = hpa_behavior(on)["scaleDown"]
    assert isinstance(window, dict) and window["stabilizationWindowSeconds"] == on.scale_down_window_s
    keda = keda_parameters(on)["advanced"]
    assert keda["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == \
        on.scale_down_window_s
    steady = plan(base, np.full(3 * 1440, 50.0))
    assert steady.scale_down_window_s is None and scale_down_window_s(steady) == 300


def test_a_band_that_serves_the_returns_leaves_no_hold() -> None:
    """The returns (100 req/s after each gap) are what the forecast band above the rate already keeps replicas
    for: no hold; a band too narrow to serve them leaves the hold as long as without one, and a wider band never
    lengthens it."""
    rate = history(on_off(10, 10, 72))
    bare = scale_down_hold(rate, 8.0, 3.0, WAKE_S, 300, 3600, 0.005)
    covered = scale_down_hold(rate, 8.0, 3.0, WAKE_S, 300, 3600, 0.005, band_rps=100.0)
    narrow = scale_down_hold(rate, 8.0, 3.0, WAKE_S, 300, 3600, 0.005, band_rps=10.0)
    assert bare is not None and covered is not None and narrow is not None
    assert bare.seconds > 300 and covered.seconds == 300 and not covered.reason
    assert max(covered.shares.values()) == 0.0  # 34 replicas asked for the band alone serve 100 req/s at 8 each
    assert narrow.seconds == bare.seconds and narrow.shares[300] == bare.shares[300]  # 4 replicas: 32 req/s
    holds = [scale_down_hold(rate, 8.0, 3.0, WAKE_S, 300, 3600, 0.005, band_rps=b) for b in (0, 20, 40, 60, 80)]
    seconds = [h.seconds for h in holds if h is not None]
    assert len(seconds) == 5 and all(a >= b for a, b in itertools.pairwise(seconds))


def test_band_above_mean_is_the_least_gap_over_the_horizon() -> None:
    rising = band(10.0, 30.0)
    rising.frame.loc[rising.frame.index[30:], "hi_95"] = 50.0  # the band widens further ahead
    assert band_above_mean(WorkloadClass.REAL_TIME, (rising,)) == 20.0
    assert band_above_mean(WorkloadClass.REAL_TIME, ()) == 0.0
    assert band_above_mean(WorkloadClass.BATCH, (rising,)) == 0.0  # batch sizes on the mean: no band served
    assert band_above_mean(WorkloadClass.REAL_TIME, (band(10.0, 5.0),)) == 0.0  # a band under its mean: none


def test_the_plan_reads_its_hold_against_the_band_it_acts_on() -> None:
    """The same on-off history: without a forecast the plan holds through the gaps; with a forecast acted on
    whose band lies 100 req/s above its mean (the returns' rate), the band serves them and the base window
    stays; a forecast the plan does not act on yet (under min_forecast_history_s), or the setting off (the
    default), changes nothing."""
    base = ScalingSettings(max_bound_history_s=0, min_forecast_history_s=0, scale_down_hold_reads_band=True)
    rate = on_off(10, 10, 72)
    alone = plan(base, rate)
    wide = plan(base, rate, (band(50.0, 150.0),))
    off = plan(base.model_copy(update={"scale_down_hold_reads_band": False}), rate, (band(50.0, 150.0),))
    assert off.demand_source == "forecast" and off.scale_down_window_s == alone.scale_down_window_s  # opt-in
    unused = plan(base.model_copy(update={"min_forecast_history_s": 30 * 86_400.0}), rate, (band(50.0, 150.0),))
    assert alone.scale_down_window_s is not None and alone.scale_down_window_s > 300
    assert wide.demand_source == "forecast" and wide.scale_down_window_s is None
    assert unused.demand_source == "observed" and unused.scale_down_window_s == alone.scale_down_window_s


def returns_after_scale_in(missed: bool) -> ReplicaHistory:
    """The on-off load with the replicas a service held: one through each gap and the first 3 steps of each
    window (a cold start late), 13 after; its p95 TTFT over the 5 s objective on those 3 steps where ``missed``."""
    rate = on_off(10, 10, 72)
    start = np.tile(np.r_[np.ones(3), np.zeros(17)], 72).astype(bool)
    ready = np.where((rate > 0) & ~start, 13.0, 1.0)
    p95 = np.where(start & missed, 40.0, 0.5)
    idx = pd.date_range("2024-01-01", periods=rate.size, freq="60s", tz="UTC")
    return ReplicaHistory(60.0, pd.Series(rate, index=idx), pd.Series(p95, index=idx), None,
                          pd.Series(ready, index=idx))


def test_the_band_is_not_read_where_the_service_missed_after_scaling_in() -> None:
    """The band a forecast keeps now, checked against what happened: where the history shows the returns after a
    scale-in missing the objective (3 of each 10 busy steps after the first window), the band is not read and the
    hold is the one without it; where they met it, or no TTFT was collected, the band stands."""
    missed, met = returns_after_scale_in(True), returns_after_scale_in(False)
    assert missed_after_scale_in(missed, 5.0, 3, 59) == pytest.approx(3 * 71 / 720)  # the first window: no scale-in
    assert missed_after_scale_in(met, 5.0, 3, 59) == 0.0
    assert missed_after_scale_in(missed, 50.0, 3, 59) == 0.0  # within a looser objective: nothing missed
    assert missed_after_scale_in(history(on_off(10, 10, 72)), 5.0, 3, 59) is None  # no TTFT, no replicas
    band_rps, why = band_to_read(missed, 100.0, 5.0, WAKE_S, 3600, 0.005)
    assert band_rps == 0.0 and "29.58%" in why
    assert band_to_read(met, 100.0, 5.0, WAKE_S, 3600, 0.005) == (100.0, "")
    assert band_to_read(history(on_off(10, 10, 72)), 100.0, 5.0, WAKE_S, 3600, 0.005) == (100.0, "")


def test_the_plan_holds_without_the_band_where_it_was_contradicted() -> None:
    """A band that would serve the returns (as above) leaves the base window where the history shows them met,
    and the hold without a band where it shows them missed after a scale-in, with a reason saying so."""
    base = ScalingSettings(max_bound_history_s=0, min_forecast_history_s=0, scale_down_hold_reads_band=True)
    rt = Classification(WorkloadClass.REAL_TIME, 1.0, (), "annotation")
    bare = plan(base, on_off(10, 10, 72))
    contradicted, served = (scaling_plan(workload(), returns_after_scale_in(m), rt, (band(50.0, 150.0),), base)
                            for m in (True, False))
    assert isinstance(contradicted, ScalingPlan) and isinstance(served, ScalingPlan)
    assert bare.scale_down_window_s is not None and contradicted.scale_down_window_s == bare.scale_down_window_s
    assert any("forecast band not read" in r for r in contradicted.reasons)
    assert served.scale_down_window_s is None
