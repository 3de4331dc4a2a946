"""The shape of a workload's demand: how steady, idle, seasonal and bursty it is, and what it tolerates.

The classifier (recommender.analysis.classify) reads a :class:`DemandShape`, not raw series. Its numeric core,
:class:`SeriesShape`, comes from :func:`series_shape` over a bare ``pd.Series``: the committed training
table (benchmarks/build_class_training.py) is computed by that same function from public traces, so a
live workload and a training row can only differ in their data, never in the arithmetic.

Scale: every model-facing number is scale-free (ratios, shares, correlations), so request rates,
running requests and GPU activity compare. Grain: a day or more of history is averaged to a 10-minute
grain (:data:`GRAIN_S`, the grain of the ServeGen traces) before measuring, so a 15 s scrape and a
10-minute trace give comparable CVs; shorter histories keep their own step. Unknown is None, never NaN.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from recommender.core import usage as m
from recommender.core.annotations import (
    CLASS_ANNOTATION,
    SCHEDULE_ANNOTATION,
    TTFT_OBJECTIVE_ANNOTATION,
    quoted,
)
from recommender.core.inventory import Workload
from recommender.core.usage import Snapshot

# Annotations a user (or a collector) puts on a workload. The one place these names are defined.

GRAIN_S = 600.0  # histories of at least GRAIN_MIN_SPAN_S are measured at this grain (ServeGen's)
GRAIN_MIN_SPAN_S = 6 * 3600.0  # below this, averaging to 10 minutes would leave too few points
IDLE_SHARE_OF_PEAK = 0.01  # a step is idle when demand <= 1% of the peak: health checks are not work
PLATEAU_SHARE_OF_PEAK = 0.9  # a busy step at >= 90% of the peak is at the ceiling (saturated)
DAY_S = 86_400.0
WEEK_DAYS = 7

# Demand series in order of preference: what users ask for beats what the GPU does about it.
DEMAND_METRICS: tuple[str, ...] = (m.REQUEST_RATE, m.REQUESTS_RUNNING, m.GR_ENGINE_ACTIVE_FRAC)


@dataclass(frozen=True)
class SeriesShape:
    """Numeric shape of one demand series, in the series' own unit for the levels, scale-free otherwise.

    "Peak" is the p99, or the maximum when demand shows in under 1% of the steps (p99 = 0): a robust
    ceiling that one outlier does not move.
    """

    points: int = 0  # finite points at the grain
    grain_s: float | None = None  # step the shape was measured at
    span_s: float | None = None  # length of the measured history, NaN steps included
    level_mean: float | None = None
    level_p50: float | None = None
    level_p95: float | None = None
    level_p99: float | None = None
    level_max: float | None = None
    cv: float | None = None  # std / mean; None when the mean is 0
    duty_cycle_frac: float | None = None  # mean / peak: share of its peak it keeps busy on average
    idle_frac: float | None = None  # share of steps at <= IDLE_SHARE_OF_PEAK of the peak
    longest_idle_s: float | None = None  # longest run of idle steps
    plateau_frac: float | None = None  # share of busy steps at >= PLATEAU_SHARE_OF_PEAK of the peak
    burstiness: float | None = None  # (sigma - mu) / (sigma + mu) of the per-step level: -1 flat, 0 Poisson-like
    peak_to_mean: float | None = None  # peak / mean
    lag1_autocorr: float | None = None  # persistence from one step to the next
    daily_strength_frac: float | None = None  # 0-1, needs >= 2 days
    weekly_strength_frac: float | None = None  # 0-1 over daily means, needs >= 2 weeks
    trend_frac_per_day: float | None = None  # OLS slope / mean, per day; needs >= 2 days

    @property
    def longest_idle_frac(self) -> float | None:
        """Longest idle gap as a share of the history: comparable across window lengths."""
        if self.longest_idle_s is None or not self.span_s:
            return None
        return self.longest_idle_s / self.span_s


@dataclass(frozen=True)
class QueueShape:
    """How long requests were left waiting, and whether the latency objective held meanwhile."""

    queued_frac: float | None = None  # share of steps with requests waiting
    longest_queue_s: float | None = None  # longest run of steps with requests waiting
    tolerated_queue_s: float | None = None  # longest such run with no TTFT objective breach in it
    queued_ttft_p95_s: float | None = None  # median TTFT p95 over the steps with requests waiting
    queued_breach_frac: float | None = None  # share of waiting steps over the objective (None: no objective)


@dataclass(frozen=True)
class DemandShape:
    """A workload's demand shape plus the metadata that says how it wants to be treated."""

    demand_metric: str | None  # which series the shape is of (DEMAND_METRICS), None when none exists
    series: SeriesShape
    queue: QueueShape
    prompt_token_share_frac: float | None  # prompt / (prompt + generation) tokens over the window
    prompt_tokens_per_s: float | None  # mean
    generation_tokens_per_s: float | None  # mean
    owner_kind: str
    schedule: str | None  # CronJob schedule when recorded in SCHEDULE_ANNOTATION
    class_annotation: str | None  # raw value of CLASS_ANNOTATION: classify validates it
    ttft_objective_s: float | None  # from TTFT_OBJECTIVE_ANNOTATION; None when absent or invalid
    notes: tuple[str, ...] = field(default_factory=tuple)  # e.g. an annotation that could not be read

    @property
    def has_latency_objective(self) -> bool:
        return self.ttft_objective_s is not None


def longest_run(mask: np.ndarray) -> int:
    """Longest run of consecutive True values, in steps (vectorised: no Python loop over points)."""
    if mask.size == 0 or not mask.any():
        return 0
    padded = np.concatenate(([0], mask.astype(np.int8), [0]))
    edges = np.flatnonzero(np.diff(padded))
    return int((edges[1::2] - edges[::2]).max())


def block_means(values: np.ndarray, k: int) -> np.ndarray:
    """Means of consecutive blocks of ``k`` steps ignoring NaN (NaN for an all-NaN block); a partial tail
    block is dropped."""
    blocks = values[: values.size // k * k].reshape(-1, k)
    counts = np.isfinite(blocks).sum(axis=1)
    sums = np.where(np.isfinite(blocks), blocks, 0.0).sum(axis=1)
    return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def to_grain(values: np.ndarray, step_s: float) -> tuple[np.ndarray, float]:
    """Average consecutive steps to about GRAIN_S when the history is long enough (see module doc)."""
    k = round(GRAIN_S / step_s)
    if k <= 1 or values.size * step_s < GRAIN_MIN_SPAN_S:
        return values, step_s
    return block_means(values, k), k * step_s


def seasonal_strength(values: np.ndarray, period: int) -> float | None:
    """Strength of a seasonal profile of ``period`` steps, 0-1, or None with fewer than 2 periods.

    Classical decomposition: remove a centred one-period moving average, average the rest by phase,
    and compare the remainder's variance with the detrended variance (Hyndman's F_S). The phase means
    of k periods of pure noise keep 1/k of its variance, so the remainder variance is scaled by
    k/(k-1): white noise then scores about 0 whatever the history length, a clean sine 1.
    """
    if period < 2 or values.size < 2 * period:
        return None
    trend = pd.Series(values).rolling(period, center=True, min_periods=period // 2).mean().to_numpy()
    detrended = values - trend
    ok = np.isfinite(detrended)
    if ok.sum() < 2 * period:
        return None
    phase = np.arange(values.size) % period
    counts = np.bincount(phase[ok], minlength=period)
    sums = np.bincount(phase[ok], weights=detrended[ok], minlength=period)
    profile = np.divide(sums, counts, out=np.zeros(period), where=counts > 0)
    remainder = detrended[ok] - profile[phase[ok]]
    var_detrended = float(np.var(detrended[ok]))
    scale = max(1.0, float(np.nanmean(np.abs(values))))  # squared as a product: inf, not OverflowError, past 1e154
    if var_detrended <= 1e-12 * (scale * scale):
        return 0.0  # flat after detrending: nothing repeats
    k = ok.sum() / period
    return float(np.clip(1.0 - np.var(remainder) * k / (k - 1) / var_detrended, 0.0, 1.0))


def _weekly_strength(values: np.ndarray, grain_s: float) -> float | None:
    """Weekly strength over daily means (weekday vs weekend), only with at least two weeks of days."""
    per_day = max(1, round(DAY_S / grain_s))
    if values.size // per_day < 2 * WEEK_DAYS:
        return None
    return seasonal_strength(block_means(values, per_day), WEEK_DAYS)


def _trend_frac_per_day(values: np.ndarray, grain_s: float, mean: float) -> float | None:
    """OLS slope of the level per day relative to its mean; None under two days or with a zero mean."""
    ok = np.isfinite(values)
    if values.size * grain_s < 2 * DAY_S or mean <= 0 or ok.sum() < 3:
        return None
    t_days = np.arange(values.size)[ok] * grain_s / DAY_S
    slope = np.polyfit(t_days, values[ok], 1)[0]
    return float(slope / mean)


def _lag1(values: np.ndarray) -> float | None:
    """Lag-1 autocorrelation over pairs where both points are known; None without variance."""
    a, b = values[:-1], values[1:]
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 3 or np.std(a[ok]) == 0 or np.std(b[ok]) == 0:
        return None
    return float(np.corrcoef(a[ok], b[ok])[0, 1])


def series_shape(y: pd.Series | np.ndarray, step_s: float) -> SeriesShape:
    """The shape of one demand series sampled every ``step_s`` seconds (NaN = no data at that step).

    The same function builds the classifier's training table from public traces and measures live
    workloads. An empty or all-NaN series gives a shape whose fields are all None.
    """
    values, grain_s = to_grain(np.asarray(y, dtype="float64"), step_s)
    x = values[np.isfinite(values)]
    if x.size == 0:
        return SeriesShape()
    mean, std = float(x.mean()), float(x.std())
    p50, p95, p99 = (float(q) for q in np.quantile(x, [0.5, 0.95, 0.99]))
    peak = p99 if p99 > 0 else float(x.max())  # demand in under 1% of steps: its peak is beyond the p99
    idle = np.isfinite(values) & (values <= IDLE_SHARE_OF_PEAK * peak)
    busy = x[x > IDLE_SHARE_OF_PEAK * peak]
    return SeriesShape(
        points=int(x.size), grain_s=float(grain_s), span_s=values.size * grain_s,
        level_mean=mean, level_p50=p50, level_p95=p95, level_p99=p99, level_max=float(x.max()),
        cv=std / mean if mean > 0 else None,
        duty_cycle_frac=min(1.0, mean / peak) if peak > 0 else 0.0,
        idle_frac=1.0 - busy.size / x.size,
        longest_idle_s=longest_run(idle) * grain_s,
        plateau_frac=float((busy >= PLATEAU_SHARE_OF_PEAK * peak).mean()) if busy.size else None,
        burstiness=(std - mean) / (std + mean) if std + mean > 0 else None,
        peak_to_mean=peak / mean if mean > 0 else None,
        lag1_autocorr=_lag1(values),
        daily_strength_frac=seasonal_strength(values, round(DAY_S / grain_s)),
        weekly_strength_frac=_weekly_strength(values, grain_s),
        trend_frac_per_day=_trend_frac_per_day(values, grain_s, mean),
    )


def queue_shape(waiting: pd.Series | None, ttft_p95_s: pd.Series | None, objective_s: float | None,
                step_s: float) -> QueueShape:
    """How requests waited: share of steps queued, longest queue, and how TTFT held meanwhile."""
    if waiting is None:
        return QueueShape()
    w = waiting.to_numpy(dtype="float64")
    known = np.isfinite(w)
    if not known.any():
        return QueueShape()
    queued = known & (w > 0)
    ttft = (ttft_p95_s.reindex(waiting.index).to_numpy(dtype="float64") if ttft_p95_s is not None
            else np.full(w.size, np.nan))
    timed = queued & np.isfinite(ttft)  # waiting steps whose TTFT is known
    breach = timed & (ttft > objective_s) if objective_s is not None else np.zeros(w.size, dtype=bool)
    breach_frac = float(breach.sum() / timed.sum()) if objective_s is not None and timed.any() else None
    return QueueShape(
        queued_frac=float(queued.sum() / known.sum()),
        longest_queue_s=longest_run(queued) * step_s,
        tolerated_queue_s=longest_run(queued & ~breach) * step_s,
        queued_ttft_p95_s=float(np.median(ttft[timed])) if timed.any() else None,
        queued_breach_frac=breach_frac,
    )


def _token_mix(snapshot: Snapshot, workload: Workload) -> tuple[float | None, float | None, float | None]:
    """(prompt share, mean prompt tokens/s, mean generation tokens/s) over steps where both are known."""
    prompt = snapshot.series(m.PROMPT_TOKENS_RATE, workload.ref)
    gen = snapshot.series(m.GENERATION_TOKENS_RATE, workload.ref)
    if prompt is None or gen is None:
        return None, None, None
    both = prompt.notna() & gen.notna()
    p, g = float(prompt[both].sum()), float(gen[both].sum())
    n = int(both.sum())
    if n == 0:
        return None, None, None
    return (p / (p + g) if p + g > 0 else None), p / n, g / n


def ttft_objective_from(annotations: Mapping[str, str]) -> tuple[float | None, tuple[str, ...]]:
    """The TTFT objective from its annotation, or None with a note when it is not a number of seconds vLLM's
    TTFT histogram can tell: below its first bucket bound (1 ms) every request would count as over it, and the
    replicas sized for it would be the most allowed."""
    raw = annotations.get(TTFT_OBJECTIVE_ANNOTATION)
    if raw is None:
        return None, ()
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        return None, (f"{TTFT_OBJECTIVE_ANNOTATION}={quoted(raw)} is not a positive number of seconds: ignored",)
    if value < m.VLLM_TTFT_BUCKETS_S[0]:
        return None, (f"{TTFT_OBJECTIVE_ANNOTATION}={quoted(raw)} is under the {m.VLLM_TTFT_BUCKETS_S[0]:g} s "
                      "TTFT histograms start at: ignored",)
    return value, ()


def demand_shape(snapshot: Snapshot, workload: Workload, objective_s: float | None = None) -> DemandShape:
    """The demand shape of one workload from its preferred demand series, its queue and its metadata.
    ``objective_s``: a policy's TTFT objective, over the annotation's."""
    metric, series = next(((mt, s) for mt in DEMAND_METRICS
                           if (s := snapshot.series(mt, workload.ref)) is not None), (None, None))
    annotations = workload.annotations
    objective_s, notes = (objective_s, ()) if objective_s is not None else ttft_objective_from(annotations)
    queue = queue_shape(snapshot.series(m.REQUESTS_WAITING, workload.ref),
                        snapshot.series(m.TTFT_P95_S, workload.ref), objective_s, snapshot.step_s)
    share, prompt_rate, gen_rate = _token_mix(snapshot, workload)
    return DemandShape(
        demand_metric=metric,
        series=series_shape(series, snapshot.step_s) if series is not None else SeriesShape(),
        queue=queue,
        prompt_token_share_frac=share, prompt_tokens_per_s=prompt_rate, generation_tokens_per_s=gen_rate,
        owner_kind=workload.ref.kind,
        schedule=annotations.get(SCHEDULE_ANNOTATION),
        class_annotation=annotations.get(CLASS_ANNOTATION),
        ttft_objective_s=objective_s,
        notes=notes,
    )
