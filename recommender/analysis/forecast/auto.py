"""AutoForecaster: per series, the candidate with the lowest rolling-origin backtest error.

Persistence (``Naive``: the last observed value held) is always a candidate and bounds the choice:
candidates are ranked by the selection score (sMAPE + MASE by default), but one whose MAE, summed over
its own backtest origins, exceeds persistence's at those same origins is passed over. The chosen model
is therefore never worse than persistence on the backtest's own origins, in MAE, whatever the score
says (the score can prefer a model that persistence beats: MASE's scale differs per origin and is 0,
MASE infinite, on a flat history; sMAPE rewards over-forecasts; a seasonal model skips the early
origins it cannot fit, so it is ranked on fewer of them).

Which candidates are tried depends on the series: the seasonal ones only with two days of history,
Holt-Winters with the season detected (none: simple exponential smoothing), TSB when demand is
intermittent (Syntetos-Boylan: a mean interval between non-zero steps above 1.32) and first in line
when most steps are zero, so that on a tie the model made for that demand wins. A candidate that
cannot be fit (too short, did not converge) is skipped with its reason; when none is left, a naive
forecast comes back and says why.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from recommender.analysis.forecast.backtest import origin_positions, run_backtest, score
from recommender.analysis.forecast.base import Band, FloatArray, Forecaster, ModelFitError, NotEnoughHistory
from recommender.analysis.forecast.ets import HoltWinters
from recommender.analysis.forecast.models import TSB, Naive, SeasonalMedian, SeasonalNaive
from recommender.analysis.forecast.seasonality import Seasonality, detect_seasonality

INTERMITTENT_ADI = 1.32  # Syntetos & Boylan (2005): mean steps between demands above this = intermittent
ZERO_HEAVY_FRAC = 0.5  # at least this share of zero steps: the intermittent model goes first
ORIGINS_PER_DAY = 6  # short horizons: origins a day/6 apart, so that together they see the whole day
MIN_ORIGINS, MAX_ORIGINS = 3, 8


def default_candidates(n_points: int, horizon: int, seasonality: Seasonality, zero_frac: float) -> list[Forecaster]:
    """The models worth backtesting for a series of this length, rhythm and sparsity, in tie order."""
    daily = seasonality.daily_points
    intermittent = zero_frac >= 1.0 - 1.0 / INTERMITTENT_ADI
    zero_heavy = zero_frac >= ZERO_HEAVY_FRAC
    cands: list[Forecaster] = [TSB(point="median")] if zero_heavy else []
    if daily and n_points >= 2 * daily:
        cands += [SeasonalMedian(daily), SeasonalNaive(daily)]
    weekly = seasonality.weekly_points
    if weekly and weekly in seasonality.periods and n_points >= 2 * weekly:
        cands.append(SeasonalNaive(weekly))
    if not zero_heavy:
        cands.append(HoltWinters(_ets_season(n_points, horizon, seasonality)))
    cands.append(Naive())
    if intermittent and not zero_heavy:
        cands.append(TSB(point="median"))
    return cands


def _ets_season(n_points: int, horizon: int, seasonality: Seasonality) -> int | None:
    """The longest detected season that still leaves two seasons before the oldest backtest origin."""
    room = n_points - MIN_ORIGINS * horizon
    fits = [p for p in seasonality.periods if room >= 2 * p]
    return fits[-1] if fits else None


class AutoForecaster(Forecaster):
    """Backtests each candidate at ``horizon`` over ``origins`` past origins and keeps the best.

    Origins are ``max(horizon, day / 6)`` apart; by default there are as many as it takes to cover a
    day (3 to 8), so a 1-hour forecast is judged at every time of day, not just the last few hours.

    ``select_by`` ranks by ``"smape"``, ``"mase"`` or ``"smape+mase"`` (see ``backtest.score``).
    ``candidates`` overrides the defaults of ``default_candidates`` (persistence is added when
    missing: it bounds every choice, see the module doc). Learned: ``chosen_`` (the fitted
    model), ``template_`` (the unfitted model it was fitted from: ETS parameters kept when frozen),
    ``seasonality_``, ``errors_`` (backtest frame per candidate label), ``reasons_`` and the
    chosen model's ``backtest_smape_`` / ``backtest_mase_`` (None when nothing could be backtested).
    Expensive parameters (ETS) are estimated once, at the oldest origin, and reused after it.
    """

    name = "Auto"

    def __init__(self, horizon: int, origins: int | None = None, select_by: str = "smape+mase",
                 candidates: Sequence[Forecaster] | None = None) -> None:
        self.horizon = horizon
        self.origins = origins
        self.select_by = select_by
        self.candidates = candidates

    @property
    def label(self) -> str:
        return self.chosen_.label if hasattr(self, "chosen_") else self.name

    def _fit(self, y: FloatArray) -> None:
        series = pd.Series(y, index=self.index_)
        self.seasonality_ = detect_seasonality(y, self.step_.total_seconds())
        cands = (list(self.candidates) if self.candidates is not None
                 else default_candidates(y.size, self.horizon, self.seasonality_, float(np.mean(y == 0))))
        if not any(isinstance(c, Naive) for c in cands):
            cands.append(Naive())  # persistence: the bound every choice is held to
        self.reasons_: list[str] = []
        self.errors_: dict[str, pd.DataFrame] = {}
        ranked: list[tuple[float, int, Forecaster]] = []
        for order, model in enumerate(cands):
            try:
                errors, template = self._backtest(model, series)
            except (ModelFitError, NotEnoughHistory) as exc:
                self.reasons_.append(f"{model.label} not used: {exc}")
                continue
            self.errors_[model.label] = errors
            ranked.append((score(errors, self.select_by), order, template))
        ranked.sort(key=lambda r: (r[0], r[1]))
        kept = self._no_worse_than_persistence([t for _, _, t in ranked])
        self.chosen_ = self._fit_first(kept, series)
        self._explain()

    def _no_worse_than_persistence(self, ranked: list[Forecaster]) -> list[Forecaster]:
        """``ranked`` less the models whose MAE on their own origins exceeds persistence's there, with a reason
        for each one passed over that ranked above the model that is kept first."""
        persistence = self.errors_.get(Naive.name)
        if persistence is None:
            return ranked
        kept: list[Forecaster] = []
        for rank, template in enumerate(ranked, 1):
            ours, theirs, origins = mae_against(self.errors_[template.label], persistence)
            if ours <= theirs:
                kept.append(template)
            elif not kept:
                ratio = f"{ours / theirs:.2f}x" if theirs > 0 else f"{ours:.3g} against 0 for"
                self.reasons_.append(f"{template.label} passed over (rank {rank} by {self.select_by}): its MAE was "
                                     f"{ratio} persistence's at its {origins} backtest origin(s)")
        return kept

    def _backtest(self, model: Forecaster, series: pd.Series) -> tuple[pd.DataFrame, Forecaster]:
        daily = self.seasonality_.daily_points or 1
        spacing = max(self.horizon, daily // ORIGINS_PER_DAY)
        count = self.origins or min(max(-(-daily // spacing), MIN_ORIGINS), MAX_ORIGINS)
        positions = origin_positions(len(series), self.horizon, count, spacing, model.min_points)
        return run_backtest(model, series, self.horizon, positions, daily, refit=False)

    def _fit_first(self, ranked: list[Forecaster], series: pd.Series) -> Forecaster:
        """The best-ranked model that fits the whole series; naive when none does."""
        for template in ranked:
            try:
                fitted = template.clone().fit(series)
            except (ModelFitError, NotEnoughHistory) as exc:
                self.reasons_.append(f"{template.label} not used: {exc}")
                continue
            self.template_ = template
            return fitted
        self.reasons_.append("no candidate could be backtested: naive forecast (last value)")
        self.template_ = Naive()
        return self.template_.clone().fit(series)

    def _explain(self) -> None:
        """Say what was chosen, on what evidence, and how the floor (seasonal naive) did."""
        errors = self.errors_.get(self.chosen_.label)
        self.backtest_smape_: float | None = None
        self.backtest_mase_: float | None = None
        if errors is None:
            return
        self.backtest_smape_ = _finite_mean(errors["smape"])
        self.backtest_mase_ = _finite_mean(errors["mase"])
        name = f"{Naive.name} (persistence: the last value held)" if isinstance(self.chosen_, Naive) else None
        line = (f"{name or self.chosen_.label} chosen by a backtest at {len(errors)} origin(s), "
                f"{self.horizon} step(s) ahead: "
                f"sMAPE {_fmt(self.backtest_smape_, '.1f')} %, MASE {_fmt(self.backtest_mase_, '.2f')}")
        floor = next((e for label, e in self.errors_.items() if label.startswith(SeasonalNaive.name)), None)
        if floor is not None and not self.chosen_.label.startswith(SeasonalNaive.name):
            line += f" (seasonal naive: sMAPE {_fmt(_finite_mean(floor['smape']), '.1f')} %)"
        self.reasons_.insert(0, line)

    def _predict(self, h: int, levels: tuple[int, ...]) -> tuple[FloatArray, dict[int, Band]]:
        return self.chosen_._predict(h, levels)


def mae_against(errors: pd.DataFrame, persistence: pd.DataFrame) -> tuple[float, float, int]:
    """Summed MAE of ``errors`` and of ``persistence`` over the origins of ``errors`` that both scored.

    Both sums run over the same origins, each the MAE of one ``h``-step window; an origin with no actuals
    (NaN MAE) counts for neither. Persistence is backtested at every origin another model is, as it needs
    the fewest points (``origin_positions`` drops only the oldest origins for longer ``min_points``).
    """
    origins = errors["origin"].to_numpy()
    theirs_at = dict(zip(persistence["origin"].to_numpy(), persistence["mae"].to_numpy(dtype="float64"), strict=True))
    ours = errors["mae"].to_numpy(dtype="float64")
    theirs = np.array([theirs_at.get(o, np.nan) for o in origins], dtype="float64")
    keep = np.array([o in theirs_at for o in origins], dtype=bool) & ~np.isnan(ours) & ~np.isnan(theirs)
    return float(pd.Series(ours[keep]).sum()), float(pd.Series(theirs[keep]).sum()), int(keep.sum())


def _finite_mean(values: pd.Series) -> float | None:
    """Mean over the origins that have a value (NaN: no actuals there); inf stays inf."""
    v = values.to_numpy(dtype="float64")
    v = v[~np.isnan(v)]
    return float(v.mean()) if v.size else None


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)
