"""How a collection's window is cut into range queries: its grid, the step (about ``target_points`` over the
history, never below the scrape interval), the range of ``rate()`` at that step, and time chunks small enough that no
query returns more than ``max_points_per_series`` points per series, makes the server hold more samples at once
than ``max_samples_per_query`` or than fit in ``query_memory_mib`` (:func:`held_samples`), or returns more
than ``max_points_per_query`` points in all (the last bounds our memory while one answer is parsed).
Pure: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from recommender.core.settings_sources import PrometheusSettings

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class Grid:
    """The evaluation timestamps of the whole window: ``start_s + k * step_s`` for k in [0, n)."""

    start_s: float
    step_s: float
    n: int

    def index(self) -> pd.DatetimeIndex:
        import pandas as pd  # here only: the window and the census are planned before pandas is imported

        return pd.date_range(pd.Timestamp(self.start_s, unit="s", tz="UTC"), periods=self.n,
                             freq=pd.Timedelta(seconds=self.step_s))


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
                    window_s: float | None = None, sample_s: float | None = None, held_ratio: float = 1.0,
                    points_ratio: float = 1.0) -> int:
    """How many steps one query may cover, from the four limits; at least one. ``touched``: the raw series
    its selectors read, where more than the ``series`` it answers with (``Family.read_names``); ``window_s``:
    its range (default one step); ``sample_s``: a recorded series read in tiles of this many seconds (default: raw
    series, scraped every ``min_step_s``). Samples held (:func:`held_samples`) stay under both
    ``max_samples_per_query`` and the ``query_memory_mib`` budget. ``held_ratio`` and ``points_ratio``: what the
    server held and answered against these estimates, where earlier chunks showed it (:class:`Measured`).

    Example: 2,000 series at step 600 s, scrape 60 s, limits 11,000 points/series, 20 M samples, 500 k
    points/query and 8 MiB of server memory (349,525 samples): points/query allow 500 k / 2,000 = 250 steps, the
    memory (349,525 - 2,000 x 10) / (3 x 2,000) = 54 → 54 steps (9 h) per query.
    """
    held = max(series, 1) * held_ratio  # the series as the server holds them
    reads = max(series, touched or 0, 1) * held_ratio
    window_s = window_s or step_s
    limit = min(p.max_samples_per_query, budget_samples(p))
    if sample_s:
        by_samples = limit / (held * (math.ceil(window_s / sample_s) + 1))
    else:
        by_samples = (limit - reads * math.ceil(window_s / p.min_step_s)) / (2 * reads + held)
    by_points = p.max_points_per_query / (max(series, 1) * points_ratio)
    return max(1, int(min(p.max_points_per_series, by_samples, by_points)))


@dataclass(frozen=True)
class Cost:
    """A family's range query as the plan sized it: :func:`steps_per_chunk`'s inputs, kept with each of its
    chunks so that later ones can be cut again from what the server said earlier ones cost."""

    series: int
    touched: int | None = None
    window_s: float | None = None
    sample_s: float | None = None

    def held(self, steps: int, step_s: float, p: PrometheusSettings) -> int:
        """The samples a chunk of ``steps`` is estimated to hold (:func:`held_samples`)."""
        return held_samples(max(self.series, 1), steps, self.window_s or step_s, self.sample_s or p.min_step_s,
                            self.touched, tiles=self.sample_s is not None)

    def steps(self, step_s: float, p: PrometheusSettings, held_ratio: float = 1.0, points_ratio: float = 1.0
              ) -> int:
        return steps_per_chunk(self.series, step_s, p, self.touched, self.window_s, self.sample_s, held_ratio,
                               points_ratio)


@dataclass
class Measured:
    """What the server said a family's answered chunks cost against their :class:`Cost` estimates: the most
    samples held (its ``peakSamples``) per sample estimated, and the points answered per series x step planned.

    The census counts every series the window ever had, so on a fleet that replaces its pods the estimates run high
    (a chunk selects only the series of its own hours) and the chunks come out short. Where the largest ratio seen
    is under one half, later chunks are cut for twice it (a family's series may double from one chunk to the next
    and still stay in the budget), each at most twice as long as the longest answered; where it is over one, for
    what was seen. Between the two, the plan's chunks stand."""

    held_ratio: float | None = None
    points_ratio: float | None = None
    longest: int = 0

    def add(self, cost: Cost, chunk: Chunk, p: PrometheusSettings, peak: int | None, points: int) -> None:
        """One answer: ``peak`` the samples the server said it held at most (None, or not a positive count: it did
        not say), ``points`` what it sent back. An answer with nothing in it says nothing about the cost."""
        if points <= 0:
            return
        self.longest = max(self.longest, chunk.steps)
        self.points_ratio = max(self.points_ratio or 0.0, points / (max(cost.series, 1) * chunk.steps))
        if peak is not None and peak > 0:
            self.held_ratio = max(self.held_ratio or 0.0, peak / cost.held(chunk.steps, chunk.step_s, p))

    def steps(self, cost: Cost, step_s: float, p: PrometheusSettings) -> int:
        """Steps per chunk for the family's chunks not yet sent. A server that gives no query stats is never asked
        to hold more than the plan estimated."""
        planned = cost.steps(step_s, p)
        held = 1.0 if self.held_ratio is None else _ahead(self.held_ratio)
        measured = cost.steps(step_s, p, held, _ahead(self.points_ratio or 1.0))
        return measured if measured <= planned else min(measured, max(planned, 2 * self.longest))


def _ahead(ratio: float) -> float:
    """The ratio a chunk not yet sent is sized for: what was seen where it is over one, else twice it, at most one."""
    return ratio if ratio >= 1 else min(1.0, 2 * ratio)


def chunks(start_s: float, end_s: float, step_s: float, per_chunk: int) -> list[Chunk]:
    """Cut the aligned grid ``start_s .. end_s`` (every step) into consecutive chunks of ``per_chunk`` steps."""
    total = round((end_s - start_s) / step_s) + 1
    out = []
    for first in range(0, total, per_chunk):
        last = min(first + per_chunk, total) - 1
        out.append(Chunk(start_s + first * step_s, start_s + last * step_s, step_s))
    return out


def recut(run: list[Chunk], per_chunk: int) -> list[Chunk]:
    """Consecutive chunks on one grid cut again into chunks of ``per_chunk`` steps, the same steps covered."""
    out: list[Chunk] = []
    i = 0
    while i < len(run):
        j = i
        while j + 1 < len(run) and run[j + 1].start_s == run[j].end_s + run[j].step_s:
            j += 1
        out += chunks(run[i].start_s, run[j].end_s, run[i].step_s, per_chunk)
        i = j + 1
    return out


def split(chunk: Chunk) -> tuple[Chunk, Chunk] | None:
    """Halve a chunk that Prometheus found too large; None when it is one step already."""
    n = chunk.steps
    if n < 2:
        return None
    mid = chunk.start_s + (n // 2 - 1) * chunk.step_s
    return Chunk(chunk.start_s, mid, chunk.step_s), Chunk(mid + chunk.step_s, chunk.end_s, chunk.step_s)
