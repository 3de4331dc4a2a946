"""Rolling-origin backtest: how a model would have done at a few past origins, at the wanted horizon.

At each origin the model sees only the history before it, forecasts ``h`` steps, and is scored
against what happened (metrics in ``metrics.py``). Origins end at the last point that still leaves
``h`` actuals and step back ``spacing`` points (default ``h``), so with ``spacing = h`` the held-out
windows tile the end of the series without overlap.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from recommender.analysis.forecast.base import Forecaster, NotEnoughHistory
from recommender.analysis.forecast.metrics import mae, mase, smape
from recommender.analysis.forecast.seasonality import candidate_periods

ERROR_COLUMNS = ["origin", "smape", "mase", "mae"]


def origin_positions(n_points: int, h: int, origins: int, spacing: int | None = None, min_train: int = 2) -> list[int]:
    """Positions (number of training points) of up to ``origins`` origins, oldest first.

    Raises NotEnoughHistory when not even one origin leaves ``min_train`` points before it.
    """
    step = spacing or h
    last = n_points - h
    positions = [last - i * step for i in range(origins) if last - i * step >= min_train]
    if not positions:
        raise NotEnoughHistory(f"{n_points} points: too few to backtest {h} steps ahead with {min_train} to train on")
    return positions[::-1]


def backtest(model: Forecaster, y: pd.Series, h: int, origins: int | Sequence[int] = 3, *,
             spacing: int | None = None, season_length: int | None = None, refit: bool = True) -> pd.DataFrame:
    """Errors of ``model`` at each origin: a frame with columns ``origin, smape, mase, mae``.

    ``origins`` is a count (see ``origin_positions``) or explicit training lengths. MASE is scaled by
    the seasonal naive of ``season_length`` (default: one day of ``y``'s step, or 1 when under two
    steps a day). ``refit=False`` estimates the model once, at the oldest origin, and only re-runs its
    filter at the later ones (statsforecast's ``refit=False``): much cheaper for ETS, no look-ahead.
    """
    positions = (origin_positions(len(y), h, origins, spacing, model.min_points) if isinstance(origins, int)
                 else list(origins))
    errors, _ = run_backtest(model, y, h, positions, season_length or _daily_points(y), refit)
    return errors


def run_backtest(model: Forecaster, y: pd.Series, h: int, positions: Sequence[int], season_length: int,
                 refit: bool) -> tuple[pd.DataFrame, Forecaster]:
    """The backtest proper; also returns the template each origin cloned (frozen when ``refit=False``)."""
    values = y.to_numpy(dtype="float64")
    template = model if refit else model.clone().fit(y.iloc[: positions[0]]).frozen()
    forecasts = None if refit else template.origin_forecasts(y, positions, h)
    if forecasts is None:
        forecasts = [template.clone().fit(y.iloc[:pos]).predict_mean(h) for pos in positions]
    scores = []
    for pos, forecast in zip(positions, forecasts, strict=True):
        actual = values[pos: pos + h]
        scores.append((smape(actual, forecast), mase(actual, forecast, values[:pos], season_length),
                       mae(actual, forecast)))
    columns = np.array(scores, dtype="float64").reshape(-1, 3).T
    return pd.DataFrame(dict(zip(ERROR_COLUMNS, [y.index[list(positions)], *columns], strict=True))), template


def _daily_points(y: pd.Series) -> int:
    if len(y) < 2:
        return 1
    step_s = (y.index[1] - y.index[0]).total_seconds()
    daily, _ = candidate_periods(step_s)
    return daily or 1


def score(errors: pd.DataFrame, select_by: str, mase_cap: float = 10.0) -> float:
    """One number to rank models by (lower is better): mean sMAPE as a fraction, mean MASE, or both.

    ``"smape+mase"`` adds mean sMAPE/100 (0-2) to mean MASE (capped at ``mase_cap`` so one flat
    stretch with an infinite MASE does not hide everything else): both goals count.
    """
    smape_, mase_ = errors["smape"].to_numpy(dtype="float64"), errors["mase"].to_numpy(dtype="float64")
    any_smape, any_mase = bool((~np.isnan(smape_)).any()), bool((~np.isnan(mase_)).any())
    s = float(np.nanmean(smape_)) / 100 if any_smape else np.inf
    q = float(np.nanmean(np.minimum(mase_, mase_cap))) if any_mase else 0.0
    if select_by == "smape":
        return s
    if select_by == "mase":
        return q if any_mase else np.inf
    if select_by == "smape+mase":
        return s + q
    raise ValueError(f"select_by must be 'smape', 'mase' or 'smape+mase', got {select_by!r}")
