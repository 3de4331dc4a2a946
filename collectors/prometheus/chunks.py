"""How a collection's window is cut into range queries: the step (about ``target_points`` over the history,
never below the scrape interval), the range of ``rate()`` at that step, and time chunks small enough that no
query returns more than ``max_points_per_series`` points per series, makes the server hold more samples at once
than ``max_samples_per_query`` or more resident memory than ``query_memory_mib`` (:func:`server_bytes`), or
returns more than ``max_points_per_query`` points in all (the last bounds our memory while one answer is parsed).
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


def server_bytes(held: int, touched: int, p: PrometheusSettings) -> float:
    """Resident memory one query adds to the server, bytes: ``server_bytes_per_sample`` for each sample it holds
    at once (:func:`held_samples`, its ``peakSamples``) and ``server_bytes_per_series`` for each series its
    selectors read (the server's costs, settings measured on the server; its garbage collector's slack included).

    Example: 2,000 pods, 134,000 samples held, at 128 and 8,192 bytes: 134,000 x 128 + 2,000 x 8,192 = 32 MiB."""
    return held * p.server_bytes_per_sample + touched * p.server_bytes_per_series


def budget_samples(p: PrometheusSettings, touched: int = 0) -> int:
    """Samples one query reading ``touched`` series may make the server hold at once: ``query_memory_mib`` less
    what the series cost (:func:`server_bytes`), at ``server_bytes_per_sample`` a sample. The series take at
    most half of it: cutting a query in time does not lower what its series cost (:func:`series_fill_budget`).

    Example: 32 MiB, 2,000 series at 8,192 bytes and 128 bytes a sample: (32 MiB - 15.6 MiB) / 128 = 134,144."""
    budget = p.query_memory_mib * 2**20
    left = max(budget - touched * p.server_bytes_per_series, budget / 2)
    return int(left // p.server_bytes_per_sample)


def series_fill_budget(touched: int, p: PrometheusSettings) -> bool:
    """Whether the series one query reads cost the server more than half of ``query_memory_mib`` by themselves
    (then the budget does not hold for it, however short the query: fewer series a query would)."""
    return touched * p.server_bytes_per_series > p.query_memory_mib * 2**20 / 2


def over_budget(touched: dict[str, int], p: PrometheusSettings) -> str:
    """One line naming the queries (by family: the series each reads) whose series alone fill half the budget,
    so that they cost the server more than ``query_memory_mib``; "" when none do."""
    over = [f"{name} ({n:,} series)" for name, n in sorted(touched.items()) if series_fill_budget(n, p)]
    if not over:
        return ""
    return (f"prometheus.query_memory_mib: the series of {', '.join(over)} cost the server more than half of "
            f"{p.query_memory_mib:g} MiB a query at {p.server_bytes_per_series:g} bytes a series, so their queries "
            "exceed it however short (select fewer namespaces with -n, or raise it)")


def held_samples(series: int, steps: int, window_s: float, sample_s: float, touched: int | None = None,
                 tiles: bool = False) -> int:
    """The most samples a range query over ``steps`` steps holds at once, as Prometheus counts them (its
    ``peakSamples``, which ``query.max-samples`` limits): a function over a range selector is evaluated series
    by series, so it holds one window of raw samples (``window_s`` / ``sample_s``) of one series at a time and a
    sample of each of the ``touched`` series, the function's result and an aggregation's over the ``touched``
    series at every step (a binary operation's operands), and the answer (``series`` at every step). Prometheus
    2.42 counts ``touched x (steps + 1) + series x steps`` for one aggregation of one function (measured), so
    this is an upper bound. ``tiles``: a subquery reading a recorded series every ``sample_s`` holds its inner
    result over the whole range (``steps`` x ``window_s`` / ``sample_s`` a series) and the answer.

    Example: 2,000 pods read raw, 54 steps at step 600 s, window 600 s, scrape 60 s → 2,000 x (1 + 2 x 54) + 10 +
    2,000 x 54 = 326,010 (the server counts 218,000)."""
    touched = max(series, touched or 0)
    per_window = math.ceil(window_s / sample_s)
    if tiles:
        return series * (steps * per_window + steps)
    return touched * (1 + 2 * steps) + per_window + series * steps


def steps_per_chunk(series: int, step_s: float, p: PrometheusSettings, touched: int | None = None,
                    window_s: float | None = None, sample_s: float | None = None) -> int:
    """How many steps one query may cover, from the four limits; at least one. ``touched``: the raw series
    its selectors read, where more than the ``series`` it answers with (``Family.read_names``); ``window_s``:
    its range (default one step); ``sample_s``: a recorded series read in tiles of this many seconds (default: raw
    series, scraped every ``min_step_s``). Samples held (:func:`held_samples`) stay under both
    ``max_samples_per_query`` and the ``query_memory_mib`` budget (:func:`budget_samples`).

    Example: 2,000 series at step 600 s, scrape 60 s, limits 11,000 points/series, 20 M samples, 500 k
    points/query and 32 MiB of server memory (134,144 samples after the series' 15.6 MiB, at 128 bytes a sample):
    points/query allow 500 k / 2,000 = 250 steps, the memory (134,144 - 2,000 - 10) / (3 x 2,000) = 22 → 22
    steps (3 h 40 min) per query.
    """
    series = max(series, 1)
    touched = max(series, touched or 0)
    window_s = window_s or step_s
    limit = min(p.max_samples_per_query, budget_samples(p, touched))
    if sample_s:
        by_samples = limit / (series * (math.ceil(window_s / sample_s) + 1))
    else:
        by_samples = (limit - touched - math.ceil(window_s / p.min_step_s)) / (2 * touched + series)
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
