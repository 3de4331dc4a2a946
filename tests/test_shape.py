"""Demand shape maths, table-driven on small synthetic series, with the arithmetic beside each number."""

from __future__ import annotations

import math
from dataclasses import fields

import numpy as np
import pandas as pd
import pytest

from recommender.analysis.shape import (
    SeriesShape,
    demand_shape,
    longest_run,
    queue_shape,
    seasonal_strength,
    series_shape,
)
from recommender.core import usage as m
from recommender.core.annotations import CLASS_ANNOTATION, SCHEDULE_ANNOTATION, TTFT_OBJECTIVE_ANNOTATION
from recommender.core.inventory import Workload
from tests import builders as b

DAY = 144  # 10-minute steps per day
RNG = np.random.default_rng(20261101)


def _days(n: float) -> np.ndarray:
    return np.arange(int(n * DAY))


# Ten 10-minute steps: idle runs of 2, 3 and 1 steps; busy values 4, 2, 4, 2.
ON_OFF = np.array([0, 0, 4, 0, 0, 0, 2, 4, 2, 0], dtype=float)


@pytest.mark.parametrize(("values", "field", "expected"), [
    # 1, 3 alternating: mean 2, population std 1 -> CV 1/2
    (np.tile([1.0, 3.0], 50), "cv", 0.5),
    # burstiness (sigma - mu) / (sigma + mu) = (1 - 2) / (1 + 2)
    (np.tile([1.0, 3.0], 50), "burstiness", -1 / 3),
    # alternating: each step is the opposite of the last
    (np.tile([1.0, 3.0], 50), "lag1_autocorr", -1.0),
    # a constant: std 0 -> (0 - mu) / (0 + mu) = -1, the flattest there is
    (np.full(30, 5.0), "burstiness", -1.0),
    # ON_OFF: 6 of 10 steps are 0 -> idle 0.6
    (ON_OFF, "idle_frac", 0.6),
    # p99 of sorted [0 x6, 2, 2, 4, 4] interpolates between the two 4s -> 4; mean 12/10 = 1.2 -> 1.2/4
    (ON_OFF, "duty_cycle_frac", 0.3),
    # busy steps 4, 2, 4, 2: two of four are >= 0.9 x 4 = 3.6
    (ON_OFF, "plateau_frac", 0.5),
    # idle runs 2, 3, 1 steps: longest 3 x 600 s
    (ON_OFF, "longest_idle_s", 1800.0),
    # peak / mean = 4 / 1.2
    (ON_OFF, "peak_to_mean", 4 / 1.2),
])
def test_series_numbers(values: np.ndarray, field: str, expected: float) -> None:
    assert getattr(series_shape(values, 600.0), field) == pytest.approx(expected)


def test_longest_idle_frac_is_the_gap_over_the_history() -> None:
    # 1800 s of a 10 x 600 = 6000 s history
    assert series_shape(ON_OFF, 600.0).longest_idle_frac == pytest.approx(0.3)


@pytest.mark.parametrize(("name", "values", "low", "high"), [
    # a clean daily sine over 14 days: the phase profile explains everything
    ("daily sine", 10 + 5 * np.sin(2 * np.pi * _days(14) / DAY), 0.95, 1.0),
    # white noise: the 14-period phase means keep 1/14 of its variance, and k/(k-1) removes that bias
    ("noise, 14 days", RNG.normal(10, 1, 14 * DAY), 0.0, 0.1),
    # the same with only 2 periods, where the uncorrected ratio would read 0.5
    ("noise, 2 days", RNG.normal(10, 1, 2 * DAY), 0.0, 0.15),
    # a sine under noise of equal variance: signal var 12.5 of 12.5 + 12.5 -> about 0.5
    ("half sine", 10 + 5 * np.sin(2 * np.pi * _days(14) / DAY) + RNG.normal(0, 5 / math.sqrt(2), 14 * DAY),
     0.4, 0.6),
])
def test_daily_strength(name: str, values: np.ndarray, low: float, high: float) -> None:
    strength = series_shape(values, 600.0).daily_strength_frac
    assert strength is not None and low <= strength <= high, name


def test_seasonality_needs_two_periods() -> None:
    assert series_shape(np.ones(DAY * 2 - 1), 600.0).daily_strength_frac is None  # one step short of 2 days
    assert series_shape(RNG.normal(10, 1, 13 * DAY), 600.0).weekly_strength_frac is None  # under 2 weeks
    assert seasonal_strength(np.ones(10), 1) is None  # a period of one step is no season


def test_weekly_strength_sees_weekends_and_not_noise() -> None:
    day = np.arange(21 * DAY) // DAY
    weekend_dip = np.where(day % 7 >= 5, 50.0, 100.0) + RNG.normal(0, 2, day.size)
    strong = series_shape(weekend_dip, 600.0).weekly_strength_frac
    flat = series_shape(RNG.normal(100, 2, 21 * DAY), 600.0).weekly_strength_frac
    assert strong is not None and strong > 0.9
    assert flat is not None and flat < 0.3


def test_trend_is_relative_slope_per_day() -> None:
    # 100 + 10/day over 4 days; mean = 100 + 10 x mean(t) = 100 + 10 x (575 / 144) / 2 = 119.965 -> 10 / 119.965
    t_days = np.arange(4 * DAY) / DAY
    assert series_shape(100 + 10 * t_days, 600.0).trend_frac_per_day == pytest.approx(10 / 119.965, rel=1e-4)
    assert series_shape(np.ones(DAY), 600.0).trend_frac_per_day is None  # one day is too short to call a trend


def test_fine_steps_are_averaged_to_ten_minutes_over_long_histories() -> None:
    two_days_at_60s = np.tile([0.0] * 5 + [2.0] * 5, 2 * DAY)  # every 10 minutes averages to 1.0
    shape = series_shape(two_days_at_60s, 60.0)
    assert (shape.grain_s, shape.points, shape.cv) == (600.0, 2 * DAY, pytest.approx(0.0))
    one_hour_at_10s = RNG.poisson(3, 360).astype(float)  # under GRAIN_MIN_SPAN_S: kept as it is
    assert series_shape(one_hour_at_10s, 10.0).grain_s == 10.0


@pytest.mark.parametrize("values", [np.array([]), np.full(50, np.nan)])
def test_no_data_gives_none_fields(values: np.ndarray) -> None:
    shape = series_shape(values, 600.0)
    assert shape.points == 0
    assert all(getattr(shape, f.name) is None for f in fields(SeriesShape) if f.name != "points")


def test_all_zero_is_idle_with_undefined_ratios() -> None:
    shape = series_shape(np.zeros(100), 600.0)
    assert (shape.idle_frac, shape.duty_cycle_frac, shape.cv, shape.peak_to_mean) == (1.0, 0.0, None, None)


def test_nan_steps_are_neither_idle_nor_busy() -> None:
    # [0, nan, 0, 3]: 3 known steps, 2 idle -> 2/3; the NaN breaks the idle run -> longest 1 step
    shape = series_shape(np.array([0, np.nan, 0, 3.0]), 600.0)
    assert (shape.points, shape.idle_frac, shape.longest_idle_s) == (3, pytest.approx(2 / 3), 600.0)
    assert not any(isinstance(v, float) and math.isnan(v) for v in vars(shape).values())


def test_longest_run() -> None:
    assert longest_run(np.array([True, True, False, True, True, True, False])) == 3
    assert longest_run(np.array([], dtype=bool)) == 0


def _wl(name: str = "svc", kind: str = "Deployment", **annotations: str) -> Workload:
    return b.workload(name, b.whole_gpu(), kind=kind, annotations=annotations)


def test_demand_series_preference_rate_then_running_then_engine() -> None:
    wl = _wl()
    both = b.snapshot([wl], {m.REQUEST_RATE: {"svc": 5.0}, m.REQUESTS_RUNNING: {"svc": 3.0},
                             m.GR_ENGINE_ACTIVE_FRAC: {"svc": 0.4}}, days=2)
    engine = b.snapshot([wl], {m.GR_ENGINE_ACTIVE_FRAC: {"svc": 0.4}}, days=2)
    running = b.snapshot([wl], {m.REQUESTS_RUNNING: {"svc": 3.0}, m.GR_ENGINE_ACTIVE_FRAC: {"svc": 0.4}}, days=2)
    assert demand_shape(both, wl).demand_metric == m.REQUEST_RATE
    assert demand_shape(running, wl).demand_metric == m.REQUESTS_RUNNING
    shape = demand_shape(engine, wl)
    assert (shape.demand_metric, shape.series.level_mean) == (m.GR_ENGINE_ACTIVE_FRAC, pytest.approx(0.4))


def test_no_demand_series() -> None:
    shape = demand_shape(b.snapshot([_wl()], {m.FB_USED_MIB: {"svc": 1000.0}}, days=1), _wl())
    assert (shape.demand_metric, shape.series.points) == (None, 0)


def test_token_mix() -> None:
    # 300 prompt + 100 generation tokens/s -> prompt share 300 / 400
    snap = b.snapshot([_wl()], {m.PROMPT_TOKENS_RATE: {"svc": 300.0}, m.GENERATION_TOKENS_RATE: {"svc": 100.0}},
                      days=1)
    shape = demand_shape(snap, _wl())
    assert (shape.prompt_token_share_frac, shape.prompt_tokens_per_s, shape.generation_tokens_per_s) == (
        pytest.approx(0.75), pytest.approx(300.0), pytest.approx(100.0))


def test_metadata_from_annotations() -> None:
    wl = _wl("nightly", kind="CronJob", **{CLASS_ANNOTATION: "batch", TTFT_OBJECTIVE_ANNOTATION: "0.5",
                                           SCHEDULE_ANNOTATION: "0 2 * * *"})
    shape = demand_shape(b.snapshot([wl], {}, days=1), wl)
    assert (shape.owner_kind, shape.schedule, shape.class_annotation) == ("CronJob", "0 2 * * *", "batch")
    assert shape.ttft_objective_s == 0.5 and shape.has_latency_objective


@pytest.mark.parametrize("raw", ["fast", "-1", "0", "nan", "inf", "1e-320", "0.0009"])
def test_bad_objective_is_ignored_with_a_note(raw: str) -> None:
    wl = _wl(**{TTFT_OBJECTIVE_ANNOTATION: raw})
    shape = demand_shape(b.snapshot([wl], {}, days=1), wl)
    assert shape.ttft_objective_s is None and not shape.has_latency_objective
    assert any(TTFT_OBJECTIVE_ANNOTATION in n and "ignored" in n for n in shape.notes)


@pytest.mark.parametrize(("raw", "seconds"), [("0.001", 0.001), ("3600", 3600.0)])
def test_an_objective_the_histogram_can_tell_is_taken(raw: str, seconds: float) -> None:
    wl = _wl(**{TTFT_OBJECTIVE_ANNOTATION: raw})
    shape = demand_shape(b.snapshot([wl], {}, days=1), wl)
    assert shape.ttft_objective_s == seconds and not shape.notes


# 12 steps of 600 s: requests wait in steps 2..9 (8 steps = 4800 s), none otherwise.
WAITING = np.array([0, 0, 3, 4, 5, 5, 4, 3, 2, 1, 0, 0], dtype=float)


@pytest.mark.parametrize(("ttft_s", "objective_s", "tolerated_s", "breach"), [
    (0.5, 1.0, 4800.0, 0.0),  # TTFT under the objective throughout: all 8 waiting steps tolerated
    (2.0, 1.0, 0.0, 1.0),  # every waiting step breaches -> nothing tolerated
    (2.0, None, 4800.0, None),  # no objective: nothing to breach, no breach share
])
def test_queue_tolerance(ttft_s: float, objective_s: float | None, tolerated_s: float, breach: float | None) -> None:
    idx = b.index(12 * 600 / 86_400)
    q = queue_shape(pd.Series(WAITING, index=idx), pd.Series(ttft_s, index=idx), objective_s, 600.0)
    # 8 of 12 steps queued; longest run 8 x 600 s
    assert (q.queued_frac, q.longest_queue_s, q.queued_ttft_p95_s) == (pytest.approx(8 / 12), 4800.0, ttft_s)
    assert (q.tolerated_queue_s, q.queued_breach_frac) == (tolerated_s, breach)


def test_queue_without_waiting_series_is_unknown() -> None:
    assert queue_shape(None, None, 1.0, 600.0).queued_frac is None
