"""The forecast's shortcuts: ``mae_against`` without a merge gives the merge's sums to the bit, and a carried model
choice (``forecast_with_choice``) gives ``forecast_series``' forecast wherever it chooses again, and the chosen
model refitted, with its choice's evidence, while it is younger than ``reselect_s``."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from recommender.analysis.forecast import ModelChoice, SeasonalNaive, forecast_series, forecast_with_choice
from recommender.analysis.forecast.auto import mae_against
from recommender.analysis.forecast.clean import clean_series, coarsen


def merged(errors: pd.DataFrame, persistence: pd.DataFrame) -> tuple[float, float, int]:
    """The plain computation ``mae_against`` replaced: an inner merge on the origin."""
    both = errors.merge(persistence, on="origin", suffixes=("", "_p"))
    both = both[both["mae"].notna() & both["mae_p"].notna()]
    return float(both["mae"].sum()), float(both["mae_p"].sum()), len(both)


def errors_frame(rng: np.random.Generator, origins: pd.DatetimeIndex, nan_frac: float) -> pd.DataFrame:
    mae = rng.exponential(3.0, origins.size) * 10.0 ** rng.integers(-3, 4, origins.size)
    mae[rng.random(origins.size) < nan_frac] = np.nan
    return pd.DataFrame({"origin": origins, "smape": 0.0, "mase": 0.0, "mae": mae})


@pytest.mark.parametrize("seed", range(40))
def test_mae_against_is_the_merge_to_the_bit(seed: int) -> None:
    rng = np.random.default_rng(seed)
    all_origins = pd.date_range("2026-01-01", periods=10, freq="1h", tz="UTC")
    persistence = errors_frame(rng, all_origins[rng.integers(0, 3):], 0.15)  # persistence: the most origins
    ours = errors_frame(rng, all_origins[rng.integers(0, 6):][:: int(rng.integers(1, 3))], 0.2)
    assert mae_against(ours, persistence) == merged(ours, persistence)


def rate(days: float, seed: int = 0, step_s: int = 60) -> pd.Series:
    """A daily-periodic request rate with noise and a quiet night, per ``step_s``."""
    n = int(days * 86_400 / step_s)
    t = np.arange(n) * step_s
    rng = np.random.default_rng(seed)
    y = np.maximum(0.0, 5 + 4 * np.sin(2 * np.pi * t / 86_400) + rng.normal(0, 1.0, n))
    return pd.Series(y, index=pd.to_datetime(t, unit="s", utc=True))


def same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a, b, check_exact=True)


@pytest.mark.parametrize("days", [0.5, 3.0])
def test_no_previous_choice_is_forecast_series(days: float) -> None:
    y = rate(days)
    plain = forecast_series(y, 9, metric="m")
    fc, choice = forecast_with_choice(y, 9, metric="m", reselect_s=3600.0)
    same(fc.frame, plain.frame)
    assert (fc.model, fc.reasons, fc.backtest_smape, fc.backtest_mase) == (
        plain.model, plain.reasons, plain.backtest_smape, plain.backtest_mase)
    modelled = coarsen(clean_series(y).y, 10) if days >= 2 else y
    assert choice.template.label == plain.model and choice.chosen_at == modelled.index[-1]


@pytest.mark.parametrize("days", [0.5, 3.0])
def test_a_choice_reused_on_its_own_history_is_the_plain_forecast(days: float) -> None:
    y = rate(days)
    _, choice = forecast_with_choice(y, 9)
    again, kept = forecast_with_choice(y, 9, previous=choice, reselect_s=3600.0)
    plain = forecast_series(y, 9)
    same(again.frame, plain.frame)
    assert kept is choice and again.model == plain.model
    assert any("without a new backtest" in r for r in again.reasons)


def test_a_young_choice_is_refitted_and_an_old_one_chosen_again() -> None:
    y = rate(3.0, seed=3)
    cut = len(y) - 50  # 50 minutes before the end: the choice is made on the history up to there
    _, choice = forecast_with_choice(y.iloc[:cut], 9)
    young, kept = forecast_with_choice(y, 9, previous=choice, reselect_s=3600.0)
    assert kept is choice
    coarse = coarsen(clean_series(y).y, 10)  # 3 days per minute: modelled on 10-minute means, no widening
    refit = choice.template.clone().fit(coarse).predict(1, (80, 95))
    assert young.model == choice.template.label and coarse.index[-1] > choice.chosen_at
    assert young.frame.iloc[0].to_dict() == refit.iloc[0].to_dict()  # the chosen model, on the new history
    old, renewed = forecast_with_choice(y, 9, previous=choice, reselect_s=1800.0)  # 50 min old: chosen again
    plain = forecast_series(y, 9)
    same(old.frame, plain.frame)
    assert renewed is not choice and renewed.chosen_at > choice.chosen_at


def test_a_choice_at_another_step_or_horizon_is_not_reused() -> None:
    short = rate(1.5)  # modelled per minute
    _, choice = forecast_with_choice(short.iloc[:-10], 9)
    for y, h in ((rate(2.5), 9), (short, 12)):  # 10-minute means from two days on; another horizon
        fc, again = forecast_with_choice(y, h, previous=choice, reselect_s=86_400.0)
        same(fc.frame, forecast_series(y, h).frame)
        assert again is not choice


def test_a_reused_model_that_no_longer_fits_is_chosen_again() -> None:
    y = rate(1.0)
    _, choice = forecast_with_choice(y, 9)
    bad = ModelChoice(SeasonalNaive(10_000), choice.chosen_at, choice.step_s, choice.horizon, (), None, None)
    fc, again = forecast_with_choice(y, 9, previous=bad, reselect_s=3600.0)
    same(fc.frame, forecast_series(y, 9).frame)
    assert again is not bad
