"""The recurring-burst floor (policies/replicas/recurring.py): replicas kept ahead of a rise the request rate
showed at this time of day on at least two of the last seven days; and its emission as the plan's min (on in
the controller, over its interval; off in a report, which makes one plan)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from policies.autoscalerobjects import keda_parameters
from policies.replicas.recurring import day_peaks, recurring_floor
from recommender.core.settings import ScalingSettings
from tests.replicaplans import history, plan

DAY = 1440  # steps


def daily_burst(days: int, at: int, rate: float = 60.0, base: float = 0.5, skip: tuple[int, ...] = ()) -> np.ndarray:
    """``days`` days at ``base`` req/s with ten minutes at ``rate`` from step ``at`` of each day not in ``skip``."""
    out = np.full(days * DAY, base)
    for d in range(days):
        if d not in skip:
            out[d * DAY + at: d * DAY + at + 10] = rate
    return out


def test_warms_ahead_of_a_burst_seen_at_this_time_on_earlier_days() -> None:
    rate = daily_burst(7, 120)[:6 * DAY + 115]  # five minutes before the seventh day's burst
    floor = recurring_floor(history(rate), 3.0, 450.0)
    assert floor is not None and floor.replicas == 20 and floor.rate == 60.0
    assert "recurring-burst floor 20" in floor.reason


def test_nothing_away_from_the_bursts_time() -> None:
    rate = daily_burst(7, 120)[:6 * DAY + 600]  # hours after it
    floor = recurring_floor(history(rate), 3.0, 450.0)
    assert floor is not None and floor.replicas == 1 and not floor.reason


def test_one_days_burst_does_not_warm_the_next() -> None:
    rate = daily_burst(7, 120, skip=(0, 1, 2, 3, 4))[:6 * DAY + 115]  # only yesterday's
    floor = recurring_floor(history(rate), 3.0, 450.0)
    assert floor is not None and floor.replicas == 1
    twice = daily_burst(7, 120, skip=(0, 1, 2, 3))[:6 * DAY + 115]
    again = recurring_floor(history(twice), 3.0, 450.0)
    assert again is not None and again.replicas == 20


def test_a_schedule_that_stopped_leaves_the_floor() -> None:
    rate = daily_burst(14, 120, skip=tuple(range(7, 14)))[:13 * DAY + 115]  # bursts only in the first week
    floor = recurring_floor(history(rate), 3.0, 450.0)
    assert floor is not None and floor.replicas == 1


def test_day_peaks_leave_out_days_before_the_history() -> None:
    rate = pd.Series(np.arange(3 * DAY, dtype="float64"),
                     index=pd.date_range("2024-01-01", periods=3 * DAY, freq="60s", tz="UTC"))
    now = rate.index[-1] + pd.Timedelta(seconds=60)
    peaks = day_peaks(rate, now, 300.0, 7)
    assert peaks.tolist() == [2 * DAY + 4, DAY + 4, 4]  # three days back is the start; four to seven lie before it


def test_plan_and_keda_carry_the_floor_as_min_replicas() -> None:
    base = ScalingSettings(max_bound_history_s=0, min_forecast_history_s=0, no_forecast_floor_window_s=600.0,
                           scale_down_hold_budget_frac=None)
    rate = daily_burst(7, 120)[:6 * DAY + 115]
    off = plan(base, rate)  # a report's settings: one plan, no floor
    on = plan(base.model_copy(update={"recurring_floor_interval_s": 300.0}), rate)  # the controller's
    assert off.min_replicas == 1
    assert on.min_replicas > 1 and on.recommended_replicas >= on.min_replicas and on.max_replicas >= on.min_replicas
    assert any(r.startswith("recurring-burst floor") for r in on.reasons)
    assert keda_parameters(on)["minReplicaCount"] == on.min_replicas


def test_the_controllers_floor_reaches_its_own_interval_unless_the_user_set_one() -> None:
    from recommender.cli.controller import floor_over_interval
    from recommender.core.settings import Settings

    assert Settings().scaling.recurring_floor_interval_s is None  # a report: off
    assert floor_over_interval(Settings(), 600.0).scaling.recurring_floor_interval_s == 600.0
    given = Settings.model_validate({"scaling": {"recurring_floor_interval_s": 120}})
    assert floor_over_interval(given, 600.0).scaling.recurring_floor_interval_s == 120.0
    off = Settings.model_validate({"scaling": {"recurring_floor_interval_s": None}})
    assert floor_over_interval(off, 600.0).scaling.recurring_floor_interval_s is None
