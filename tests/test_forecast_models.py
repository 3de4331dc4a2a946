"""Forecast models: one contract every model passes, the metrics' arithmetic, seasonality, choice, bad input."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest

from recommender.analysis.forecast import (
    TSB,
    AutoForecaster,
    Forecaster,
    HoltWinters,
    ModelFitError,
    Naive,
    NotEnoughHistory,
    SeasonalMedian,
    SeasonalNaive,
    backtest,
    clean_series,
    detect_seasonality,
    forecast_series,
    mase,
    origin_positions,
    seasonal_strength,
    smape,
)
from recommender.analysis.forecast.seasonality import candidate_periods

HOURLY = pd.Timedelta(hours=1)


def hourly(values: np.ndarray | list[float], start: str = "2024-03-01") -> pd.Series:
    return pd.Series(np.asarray(values, dtype="float64"), index=pd.date_range(start, periods=len(values), freq="h",
                                                                               tz="UTC"))


def daily_sine(days: int = 10, noise: float = 1.0, seed: int = 7) -> pd.Series:
    """Hourly demand with a daily rhythm (10 ± 6) and Gaussian noise."""
    t = np.arange(24 * days)
    rng = np.random.default_rng(seed)
    return hourly(np.maximum(10 + 6 * np.sin(2 * np.pi * t / 24) + rng.normal(0, noise, t.size), 0))


def sparse(days: int = 10, p: float = 0.1, seed: int = 3) -> pd.Series:
    """Hourly intermittent demand: a burst of 5-15 in a share ``p`` of the hours, at random."""
    rng = np.random.default_rng(seed)
    n = 24 * days
    return hourly(np.where(rng.random(n) < p, rng.uniform(5, 15, n), 0.0))


MODELS: dict[str, Callable[[], Forecaster]] = {
    "naive": Naive,
    "seasonal-naive": lambda: SeasonalNaive(24),
    "seasonal-median": lambda: SeasonalMedian(24),
    "tsb-mean": TSB,
    "tsb-median": lambda: TSB(point="median"),
    "holt-winters": lambda: HoltWinters(24),
    "ses": lambda: HoltWinters(None),
    "auto": lambda: AutoForecaster(6),
}
DATA = {"seasonal": daily_sine, "sparse": sparse}


# -- the contract every model passes ------------------------------------------------------------------
@pytest.mark.parametrize("data", DATA)
@pytest.mark.parametrize("make", MODELS.values(), ids=MODELS.keys())
def test_contract(make: Callable[[], Forecaster], data: str) -> None:
    y = DATA[data]()
    model = make()
    params = model.get_params()
    before = set(vars(model))
    assert model.fit(y) is model
    learned = set(vars(model)) - before
    assert learned and all(name.endswith("_") for name in learned), learned
    assert set(params) == before  # __init__ stores its hyper-parameters and nothing else

    frame = model.predict(30, level=(80, 95))
    assert list(frame.columns) == ["mean", "lo_80", "hi_80", "lo_95", "hi_95"]
    expected_index = pd.date_range(y.index[-1] + HOURLY, periods=30, freq="h", tz="UTC")
    assert frame.index.equals(expected_index)
    assert np.isfinite(frame.to_numpy()).all() and (frame.to_numpy() >= 0).all()
    assert (frame["lo_95"] <= frame["lo_80"]).all() and (frame["lo_80"] <= frame["mean"]).all()
    assert (frame["mean"] <= frame["hi_80"]).all() and (frame["hi_80"] <= frame["hi_95"]).all()
    width_80 = frame["hi_80"] - frame["lo_80"]
    width_95 = frame["hi_95"] - frame["lo_95"]
    assert (width_95 >= width_80).all() and width_95.sum() > width_80.sum()

    again = make().fit(y).predict(30, level=(80, 95))
    pd.testing.assert_frame_equal(frame, again)  # deterministic
    assert model.clone().get_params() == params and not hasattr(model.clone(), "index_")


@pytest.mark.parametrize("make", MODELS.values(), ids=MODELS.keys())
def test_predict_before_fit_and_other_levels(make: Callable[[], Forecaster]) -> None:
    with pytest.raises(RuntimeError, match="not fitted"):
        make().predict(3)
    frame = make().fit(daily_sine()).predict(4, level=[50])
    assert list(frame.columns) == ["mean", "lo_50", "hi_50"]
    with pytest.raises(ValueError, match="whole percentages"):
        make().fit(daily_sine()).predict(4, level=[100])


def test_seasonal_naive_repeats_the_last_day() -> None:
    y = daily_sine()
    frame = SeasonalNaive(24).fit(y).predict(30)
    # step i forecasts y[-24 + i % 24]: hour 25 repeats hour 1 of the last day
    np.testing.assert_allclose(frame["mean"].to_numpy(), np.resize(y.to_numpy()[-24:], 30))


def poisson_daily(days: int, seed: int = 5) -> pd.Series:
    """Hourly request counts, Poisson around a daily rhythm from 2 (night) to 40 (peak)."""
    t = np.arange(24 * days)
    level = 21 - 19 * np.cos(2 * np.pi * t / 24)
    return hourly(np.random.default_rng(seed).poisson(level).astype("float64"))


def test_band_width_follows_the_level_once_each_level_has_enough_errors() -> None:
    """Counts spread with their level: the band is narrow at night and wide at the peak, not one width."""
    frame = SeasonalNaive(24).fit(poisson_daily(30)).predict(24)
    width = (frame["hi_95"] - frame["mean"]).to_numpy()
    night = frame["mean"].to_numpy() < 8
    assert 0 < night.sum() < night.size
    assert width[night].mean() < 0.7 * width[~night].mean()  # one pooled quantile: the same width every hour


def test_short_history_keeps_one_pooled_band_width() -> None:
    """Under MIN_RESIDUALS_PER_BIN errors per level bin the quantiles are pooled: one width for the day."""
    frame = SeasonalNaive(24).fit(poisson_daily(8)).predict(24)
    width = (frame["hi_95"] - frame["mean"]).to_numpy()
    assert np.ptp(width[frame["mean"].to_numpy() > 0]) == pytest.approx(0.0, abs=1e-9)


def test_tsb_mean_is_probability_times_size() -> None:
    # demand of 10 in every second hour, from the start: probability 1/2, size 10 -> 5 per hour
    y = hourly([10.0, 0.0] * 48)
    assert TSB(alpha_d=0.2, alpha_p=0.2).fit(y).predict(2)["mean"].iloc[0] == pytest.approx(5.0, abs=0.6)
    assert TSB(point="median").fit(sparse(p=0.1)).predict(2)["mean"].iloc[0] == 0.0  # idle 90 % of the hours


# -- metrics, with the arithmetic ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("actual", "forecast", "expected"),
    [
        ([100.0], [100.0], 0.0),
        ([100.0], [50.0], 200 * 50 / 150),  # 2|a-f| / (|a|+|f|) = 100/150 -> 66.7 %
        ([0.0], [0.0], 0.0),  # 0/0 counts as a perfect forecast
        ([0.0], [5.0], 200.0),  # a zero actual forecast non-zero: the maximum
        ([2.0, 0.0], [1.0, 0.0], (200 * 1 / 3 + 0) / 2),  # (66.7 + 0) / 2 = 33.3 %
        ([math.nan, 10.0], [5.0, 10.0], 0.0),  # a missing actual is not scored
    ],
)
def test_smape(actual: list[float], forecast: list[float], expected: float) -> None:
    assert smape(actual, forecast) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("actual", "forecast", "insample", "m", "expected"),
    [
        # scale: |3-1|, |4-2|, |5-3|, |6-4| -> 2; MAE (|7-6| + |8-10|) / 2 = 1.5 -> 0.75
        ([7.0, 8.0], [6.0, 10.0], [1, 2, 3, 4, 5, 6], 2, 0.75),
        # two points cannot hold a season of 5: m falls back to 1, scale |3-1| = 2; MAE 1 -> 0.5
        ([4.0], [3.0], [1, 3], 5, 0.5),
        ([2.0], [2.0], [2, 2, 2, 2], 1, 0.0),  # flat history, exact forecast: 0/0 -> 0
        ([3.0], [2.0], [2, 2, 2, 2], 1, math.inf),  # flat history, any error: no model beats that scale
    ],
)
def test_mase(actual: list[float], forecast: list[float], insample: list[float], m: int, expected: float) -> None:
    assert mase(actual, forecast, insample, m) == pytest.approx(expected)


def test_backtest_of_naive_on_a_ramp() -> None:
    y = hourly(np.arange(20.0))
    assert origin_positions(20, 2, 3) == [14, 16, 18]  # the last three 2-step windows, oldest first
    errors = backtest(Naive(), y, h=2, origins=3)
    assert list(errors["origin"]) == [y.index[14], y.index[16], y.index[18]]
    # at origin 14 naive says 13, 13 for actuals 14, 15: errors 1, 2 -> MAE 1.5; one step a day is
    # more than 20 points, so the MASE scale falls back to lag 1: |y[t] - y[t-1]| = 1 -> MASE 1.5
    assert errors["mae"].tolist() == [1.5] * 3 and errors["mase"].tolist() == [1.5] * 3
    # sMAPE at 14: (2*1/27 + 2*2/28) / 2 * 100
    assert errors["smape"].iloc[0] == pytest.approx((2 / 27 + 4 / 28) / 2 * 100)


# -- seasonality ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("step_s", "daily", "weekly"), [(600, 144, 1008), (3600, 24, 168), (86_400, None, None)])
def test_candidate_periods(step_s: float, daily: int | None, weekly: int | None) -> None:
    assert candidate_periods(step_s) == (daily, weekly)


def test_daily_sine_is_strongly_daily_and_noise_is_not() -> None:
    t = np.arange(144 * 7)  # a week at 10-minute steps
    rng = np.random.default_rng(0)
    sine = 50 + 20 * np.sin(2 * np.pi * t / 144) + rng.normal(0, 2, t.size)
    found = detect_seasonality(sine, 600)
    assert found.daily_points == 144 and found.daily_strength > 0.9
    assert found.weekly_strength == 0.0 and found.season_length == 144  # one week: weekly not measured
    noise = detect_seasonality(rng.normal(50, 5, t.size), 600)
    assert noise.daily_strength < 0.1 and noise.season_length is None


def test_weekly_season_needs_two_weeks_and_a_weekend() -> None:
    days = 21
    t = np.arange(24 * days)
    weekend = np.isin((t // 24) % 7, [5, 6])
    y = 10 + 5 * np.sin(2 * np.pi * t / 24) - 8 * weekend
    found = detect_seasonality(y, 3600)
    assert found.weekly_strength > 0.8 and found.season_length == 168
    assert seasonal_strength(y[: 24 * 13], 168) == 0.0  # under two weeks: not measured


# -- choice by backtest ---------------------------------------------------------------------------------
def test_auto_picks_a_seasonal_model_on_seasonal_data() -> None:
    auto = AutoForecaster(12).fit(daily_sine(days=14))
    assert auto.chosen_.label.split("(")[0] in {"SeasonalNaive", "SeasonalMedian", "HoltWinters"}
    assert auto.backtest_smape_ is not None and auto.backtest_smape_ < smape_of(Naive(), daily_sine(days=14), 12)
    assert auto.reasons_[0].startswith(auto.chosen_.label + " chosen")


def smape_of(model: Forecaster, y: pd.Series, h: int) -> float:
    return float(backtest(model, y, h, origins=4, spacing=6)["smape"].mean())


def test_auto_picks_the_intermittent_model_on_zero_heavy_data() -> None:
    auto = AutoForecaster(24).fit(sparse(days=14, p=0.08))
    assert auto.chosen_.label == "TSB"


def test_a_model_that_does_not_converge_falls_back_quietly() -> None:
    y = daily_sine()
    with pytest.raises(ModelFitError, match="did not converge"):
        HoltWinters(24, maxiter=1).fit(y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no statsmodels warning may reach the user
        auto = AutoForecaster(6, candidates=[HoltWinters(24, maxiter=1), Naive()]).fit(y)
    assert auto.chosen_.label == "Naive"
    assert any("HoltWinters(24) not used: Holt-Winters did not converge" in r for r in auto.reasons_)


# -- bad input: a forecast with a reason and a wider band, or one clear line ----------------------------
def test_duplicates_are_averaged_and_unsorted_times_sorted() -> None:
    y = daily_sine(days=3)
    dup = pd.concat([y, pd.Series([1.0, 3.0], index=[y.index[5]] * 2)]).iloc[::-1]
    cleaned = clean_series(dup)
    assert cleaned.y.index.equals(y.index)
    assert cleaned.y.iloc[5] == pytest.approx((y.iloc[5] + 1 + 3) / 3)  # three values at one time: their mean
    assert any("duplicate" in r for r in cleaned.reasons) and any("sorted" in r for r in cleaned.reasons)


def test_gaps_and_nans_are_filled_and_widen_the_band() -> None:
    y = daily_sine(days=6)
    holed = y.drop(y.index[30:32]).drop(y.index[50:60])  # a 2-hour and a 10-hour gap
    holed.iloc[70] = np.nan
    fc = forecast_series(holed, 12)
    assert fc.frame.notna().all().all() and len(fc.frame) == 12
    assert any("13 missing step(s) in 3 gap(s), the longest 10.0 h" in r for r in fc.reasons)
    assert any("band widened x1.09" in r for r in fc.reasons)  # 13 of 144 filled: 1 + 0.09
    plain = AutoForecaster(12).fit(clean_series(holed).y).predict(12)  # the same choice, before widening
    np.testing.assert_allclose(fc.frame["hi_95"] - fc.frame["mean"], (plain["hi_95"] - plain["mean"]) * (1 + 13 / 144))


def test_negative_values_are_clipped_with_a_reason() -> None:
    y = daily_sine(days=3) - 5
    fc = forecast_series(y, 6)
    assert (fc.frame.to_numpy() >= 0).all()
    assert any("negative value(s) set to 0" in r for r in fc.reasons)


def test_all_zeros_forecast_zero_and_say_so() -> None:
    fc = forecast_series(hourly(np.zeros(72)), 6)
    assert (fc.frame.to_numpy() == 0).all()
    assert any("all 72 points are 0" in r for r in fc.reasons)


@pytest.mark.parametrize(
    ("y", "points"),
    [
        (hourly([5.0]), 1),
        (hourly([5.0, 6.0]), 2),
        (hourly([5.0, np.nan, np.inf, 7.0]), 2),  # NaN and inf are not history
        (pd.Series([1.0, 2.0, 3.0], index=pd.DatetimeIndex(["2024-03-01"] * 3, tz="UTC")), 1),  # one time, thrice
    ],
)
def test_too_little_history_is_one_clear_line(y: pd.Series, points: int) -> None:
    with pytest.raises(NotEnoughHistory) as err:
        forecast_series(y, 6)
    assert "\n" not in str(err.value) and f"{points} finite point(s)" in str(err.value)
    assert isinstance(err.value, ValueError)


def test_less_than_a_season_still_forecasts_with_a_wider_band() -> None:
    y = daily_sine(days=1).iloc[:12]  # 12 hours: no daily season can be seen
    fc = forecast_series(y, 6)
    plain = Naive().fit(y).predict(6)
    assert any("only 12.0 h of history" in r for r in fc.reasons)
    assert (fc.frame["hi_95"] - fc.frame["mean"] > plain["hi_95"] - plain["mean"]).all()


def test_naive_timestamps_are_utc_and_horizon_must_be_positive() -> None:
    y = daily_sine(days=3)
    fc = forecast_series(y.tz_localize(None), 3)
    assert str(pd.DatetimeIndex(fc.frame.index).tz) == "UTC" and fc.frame.index[0] == y.index[-1] + HOURLY
    with pytest.raises(ValueError, match="at least 1 step"):
        forecast_series(y, 0)


def test_forecast_series_fills_the_forecast_record() -> None:
    fc = forecast_series(daily_sine(days=14), 24, levels=(90,), metric="request_rate_per_s")
    assert fc.metric == "request_rate_per_s" and list(fc.frame.columns) == ["mean", "lo_90", "hi_90"]
    assert fc.model.split("(")[0] in {"SeasonalNaive", "SeasonalMedian", "HoltWinters"}
    assert fc.backtest_smape is not None and fc.backtest_mase is not None and fc.backtest_mase < 1


# -- persistence: always a candidate, never beaten on MAE by the model chosen -----------------------------
def ten_minute(values: np.ndarray) -> pd.Series:
    return pd.Series(values.astype("float64"), index=pd.date_range("2024-03-01", periods=values.size, freq="10min",
                                                                    tz="UTC"))


def replica_steps() -> pd.Series:
    """Four days of a replica count in 10-minute steps: 2 all day 1 (a flat first day), 5 from 10:00 on day 2,
    3 from 10:00 on day 4. Holding the last value errs only at the steps; repeating yesterday errs all
    afternoon after each one."""
    t = np.arange(4 * 144)
    return ten_minute(np.select([t < 144 + 60, t < 3 * 144 + 60], [2, 5], 3))


def mae_against_persistence(auto: AutoForecaster) -> tuple[float, float]:
    """Summed MAE of the chosen model and of persistence, on the chosen model's own backtest origins."""
    chosen = auto.errors_[auto.chosen_.label]
    persistence = auto.errors_["Naive"].set_index("origin").loc[chosen["origin"]]
    return float(chosen["mae"].sum()), float(persistence["mae"].sum())


def test_a_step_shaped_replica_count_keeps_persistence() -> None:
    auto = AutoForecaster(144).fit(replica_steps())
    ours, persistence = mae_against_persistence(auto)
    assert ours <= persistence
    assert auto.chosen_.label in {"Naive", "HoltWinters"}  # the seasonal ones repeat yesterday's step; SES holds
    assert any(r.startswith("SeasonalNaive(144) passed over (rank 1 by smape+mase): its MAE was 2.07x "
                            "persistence's at its 2 backtest origin(s)") for r in auto.reasons_)


def replica_history(seed: int) -> pd.Series:
    """3-14 days of a replica count in 10-minute steps: levels held 1 hour to 3 days, moving by 1 or 3 (not
    below 0); on half the seeds 0-2 more replicas each afternoon."""
    rng = np.random.default_rng(seed)
    n = 144 * int(rng.integers(3, 15))
    shortest, longest = sorted(int(v) for v in rng.integers(6, 3 * 144, 2))
    y, level, i = np.empty(n), int(rng.integers(0, 4)), 0
    while i < n:
        hold = int(rng.integers(shortest, longest + 1))
        y[i: i + hold], i = level, i + hold
        level = max(0, level + int(rng.choice([-3, -1, 1, 3])))
    slot = np.arange(n) % 144
    if rng.random() < 0.5:
        y += np.where((slot > 58) & (slot < 115), rng.integers(0, 3), 0)
    return ten_minute(y)


# 35, 48, 97, 264, 272 and 294 are histories on which the choice by sMAPE + MASE alone lost to persistence
@pytest.mark.parametrize("seed", [0, 1, 2, 3, 35, 48, 97, 264, 272, 294])
@pytest.mark.parametrize("h", [6, 144])
def test_the_chosen_model_never_loses_to_persistence_on_its_own_origins(seed: int, h: int) -> None:
    auto = AutoForecaster(h).fit(replica_history(seed))
    ours, persistence = mae_against_persistence(auto)
    assert ours <= persistence


def test_persistence_is_a_candidate_even_when_the_caller_leaves_it_out() -> None:
    auto = AutoForecaster(144, candidates=[SeasonalNaive(144)]).fit(replica_steps())
    assert "Naive" in auto.errors_ and auto.chosen_.label == "Naive"
    assert auto.reasons_[0].startswith("Naive (persistence: the last value held) chosen by a backtest at 3 origin(s)")


def test_a_model_that_beats_persistence_on_mae_is_still_chosen() -> None:
    auto = AutoForecaster(12).fit(daily_sine(days=14))
    ours, persistence = mae_against_persistence(auto)
    assert auto.chosen_.label != "Naive" and ours < persistence
    assert not any("persistence" in r for r in auto.reasons_[1:])
