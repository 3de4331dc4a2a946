"""How a collection's window is cut into range queries: the step (about ``target_points`` over the history,
never below the scrape interval), the range of ``rate()`` at that step, and time chunks small enough that no
query returns more than ``max_points_per_series`` points per series, makes the server hold more samples at once
than ``max_samples_per_query`` or than fit in ``query_memory_mib`` (:func:`held_samples`), or returns more
than ``max_points_per_query`` points in all (the last bounds our memory while one answer is parsed).
Pure: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from recommender.core.settings_sources import PrometheusSettings


def step_for(history_s: float, p: PrometheusSettings) -> float:
    """Query step: about ``target_points`` over the history, never below the scrape interval, whole minutes.

    Example: 14 d / 2,016 points = 600 s; 1 h / 2,016 → 60 s (the floor).
    """
    raw = max(history_s / p.target_points, p.min_step_s)
    unit = 60.0 if raw >= 60 else 1.0
    return float(math.ceil(raw / unit) * unit)


def rate_window_s(step_s: float, p: PrometheusSettings) -> int:
    """Window of ``rate`` and ``*_over_time``: the step, but at least two scrapes so rate() has two samples."""
    return int(max(step_s, 2 * p.min_step_s))


@dataclass(frozen=True)
class Chunk:
    """One query's time range: evaluation timestamps ``start_s, start_s + step_s, ..., end_s`` (inclusive)."""

    start_s: float
    end_s: float
    step_s: float

    @property
    def steps(self) -> int:
        return round((self.end_s - self.start_s) / self.step_s) + 1


BYTES_PER_SAMPLE = 24  # a point as Prometheus 2.42 holds it while evaluating: timestamp, value, histogram pointer


def budget_samples(p: PrometheusSettings) -> int:
    """Samples one query may make the server hold at once: ``query_memory_mib`` at 24 bytes a sample.

    Example: 8 MiB → 349,525 samples."""
    return int(p.query_memory_mib * 2**20 // BYTES_PER_SAMPLE)


def held_samples(series: int, steps: int, window_s: float, sample_s: float, touched: int | None = None,
                 tiles: bool = False) -> int:
    """The most samples a range query over ``steps`` steps holds at once, as Prometheus counts them (its
    ``peakSamples``, which ``query.max-samples`` limits): a function over a range selector is evaluated series
    by series, so it holds one window of raw samples (``window_s`` / ``sample_s``) for each of the ``touched``
    series, the function's result and the aggregation's over the ``touched`` series at every step, and the
    answer (``series`` at every step). ``tiles``: a subquery reading a recorded series every ``sample_s`` holds
    its inner result over the whole range (``steps`` x ``window_s`` / ``sample_s`` a series) and the answer.

    Example: 2,000 pods read raw, 54 steps at step 600 s, window 600 s, scrape 60 s → 2,000 x (10 + 2 x 54) +
    2,000 x 54 = 344,000."""
    touched = max(series, touched or 0)
    per_window = math.ceil(window_s / sample_s)
    if tiles:
        return series * (steps * per_window + steps)
    return touched * (per_window + 2 * steps) + series * steps


def steps_per_chunk(series: int, step_s: float, p: PrometheusSettings, touched: int | None = None,
                    window_s: float | None = None, sample_s: float | None = None) -> int:
    """How many steps one query may cover, from the four limits; at least one. ``touched``: the raw series
    its selectors read, where more than the ``series`` it answers with (``Family.read_names``); ``window_s``:
    its range (default one step); ``sample_s``: a recorded series read in tiles of this many seconds (default: raw
    series, scraped every ``min_step_s``). Samples held (:func:`held_samples`) stay under both
    ``max_samples_per_query`` and the ``query_memory_mib`` budget.

    Example: 2,000 series at step 600 s, scrape 60 s, limits 11,000 points/series, 20 M samples, 500 k
    points/query and 8 MiB of server memory (349,525 samples): points/query allow 500 k / 2,000 = 250 steps, the
    memory (349,525 - 2,000 x 10) / (3 x 2,000) = 54 → 54 steps (9 h) per query.
    """
    series = max(series, 1)
    touched = max(series, touched or 0)
    window_s = window_s or step_s
    limit = min(p.max_samples_per_query, budget_samples(p))
    if sample_s:
        by_samples = limit / (series * (math.ceil(window_s / sample_s) + 1))
    else:
        by_samples = (limit - touched * math.ceil(window_s / p.min_step_s)) / (2 * touched + series)
    by_points = p.max_points_per_query / series
    return max(1, int(min(p.max_points_per_series, by_samples, by_points)))


def chunks(start_s: float, end_s: float, step_s: float, per_chunk: int) -> list[Chunk]:
    """Cut the aligned grid ``start_s .. end_s`` (every step) into consecutive chunks of ``per_chunk`` steps."""
    total = round((end_s - start_s) / step_s) + 1
    out = []
    for first in range(0, total, per_chunk):
        last = min(first + per_chunk, total) - 1
        out.append(Chunk(start_s + first * step_s, start_s + last * step_s, step_s))
    return out


def split(chunk: Chunk) -> tuple[Chunk, Chunk] | None:
    """Halve a chunk that Prometheus found too large; None when it is one step already."""
    n = chunk.steps
    if n < 2:
        return None
    mid = chunk.start_s + (n // 2 - 1) * chunk.step_s
    return Chunk(chunk.start_s, mid, chunk.step_s), Chunk(mid + chunk.step_s, chunk.end_s, chunk.step_s)
