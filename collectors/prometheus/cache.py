"""What one collection read, kept for the next: a loop (the controller) then reads only the steps added since
its last collection (and the last ``cachefile.OVERLAP_STEPS`` again, where late samples land) and joins them to the
cached ones, instead of the whole history every cycle; a change of query, grid or a daily refresh reads all.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from collectors.prometheus import parse
from collectors.prometheus.cachefile import Mark, digest, fresh_start
from collectors.prometheus.chunks import Grid
from collectors.prometheus.devices import DeviceTable

# A re-read step whose value differs from the cached one by at most this, relative, is the cached value summed in
# another order (Prometheus' ``sum by`` adds in no fixed order): reordering n terms moves a sum by at most
# (n - 1) x eps x sum|terms|, i.e. (n - 1) x 2.2e-16 of it for the non-negative terms read here (utilisation,
# memory, counts): 1e-12 covers sums of up to ~4,500 series. A real change of one sample moves a sum by that
# sample's resolution (a count, a percent, a byte), many orders above 1e-12 of the sum.
REORDER_RTOL = 1e-12


class Frames(Mapping[str, pd.DataFrame]):
    """A cache file's frames while a thread of their own decodes them: their names at once (all that deciding to
    read only the new steps needs), the frames on first use, waiting for the decoding then and raising its
    error there. A warm report's queries run while its cache decompresses."""

    def __init__(self, names: Sequence[str], decode: Callable[[], dict[str, pd.DataFrame]]) -> None:
        self._names = tuple(names)
        self._done: Future[dict[str, pd.DataFrame]] = Future()

        def run() -> None:
            try:
                self._done.set_result(decode())
            except BaseException as exc:  # raised to whoever reads a frame
                self._done.set_exception(exc)

        threading.Thread(target=run, name="cache-frames", daemon=True).start()

    def __len__(self) -> int:
        return len(self._names)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __getitem__(self, name: str) -> pd.DataFrame:
        return self._done.result()[name]


@dataclass
class UsageCache:
    """What the last collection read, so that the next reads only the steps added since (a loop's cycles).

    ``key`` is everything that shapes the queries and the grid (server, selection, step, window): when it
    changes, when the new window does not overlap the cached one, or ``refresh_s`` after the last full read
    (data corrected later than the overlap: a backfill, a late remote write), the next collection reads
    everything."""

    key: str | None = None  # digest(key) of the last collection: a cache on disk keeps no URL or selector in clear
    series: Mapping[str, pd.DataFrame] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    inventory: dict[str, parse.Latest] = field(default_factory=dict)  # latest values, oldest first
    # per pod, the cluster labels' values its series carry, as the last full read listed them (parse.several_clusters)
    clusters: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    exporter: tuple[str, str] | None = None  # where dcgm-exporter names its pods, as the last full read found (Scope)
    devices: DeviceTable | None = None
    last_s: float = -math.inf  # the cached grid's last step
    full_s: float = -math.inf  # the grid's last step when everything was last read
    refresh_s: float = 86_400.0
    workloads: UsageCache | None = None  # the same for ``collect.collect_workload_replicas`` (its series: "replicas")

    def fresh_start(self, key: tuple[object, ...], grid: Grid) -> float | None:
        """The first step to read for ``grid``, or None when the cache cannot serve it (read everything)."""
        return fresh_start(Mark(self.key, bool(self.series), self.last_s, self.full_s, self.refresh_s), key, grid)

    def keep(self, key: tuple[object, ...], fresh: dict[str, pd.DataFrame], grid: Grid, first: float | None
             ) -> dict[str, pd.DataFrame]:
        """What a collection over ``grid`` read from ``first`` on (None: all of it, from :meth:`fresh_start`),
        joined to the cached steps before, and kept for the next collection."""
        series = fresh if first is None else join_usage(self.series, fresh, grid, first)
        last = grid.start_s + (grid.n - 1) * grid.step_s
        self.key, self.series, self.last_s = digest(key), dict(series), last
        self.full_s = self.full_s if first is not None else last
        return series


def join_usage(cached: Mapping[str, pd.DataFrame], fresh: dict[str, pd.DataFrame], grid: Grid, fresh_start: float
               ) -> dict[str, pd.DataFrame]:
    """The cached steps before ``fresh_start`` that are still in ``grid``, then the fresh ones, per metric.

    Pods are the columns with a value in the window, as a full collection's answers would hold them (a pod
    whose only points in the window are NaN is left out: it says nothing either way). A metric read with no
    column at all stays, without columns: the next collection then reads only new steps of it too.
    Each frame is put together in one array where both sides are float64 on the grid (:func:`_joined`), else
    by pandas (:func:`_join_frames`): the same frame either way."""
    index = grid.index()
    cut = pd.Timestamp(fresh_start, unit="s", tz="UTC")
    out: dict[str, pd.DataFrame] = {}
    for metric in sorted(cached.keys() | fresh.keys()):
        old = cached.get(metric)
        new = fresh.get(metric)
        if old is not None and new is not None:
            new = same_as_cached(old, new)
        frame = _as_cached(old, new, index, cut)
        if frame is None:
            frame = _joined(old, new, index, cut)
        if frame is None:
            frame = _join_frames(old, new, index, cut)
        if frame is not None:
            out[metric] = frame
    return out


def _join_frames(old: pd.DataFrame | None, new: pd.DataFrame | None, index: pd.DatetimeIndex, cut: pd.Timestamp
                 ) -> pd.DataFrame | None:
    """One metric's joined frame by pandas (any dtypes, any index); None where it has no column and none was
    read with no column."""
    kept = None if old is None else old[(old.index >= index[0]) & (old.index < cut)].dropna(axis=1, how="all")
    parts = [f for f in (kept, new) if f is not None and len(f.columns)]
    if not parts:
        if any(f is not None and f.columns.empty for f in (old, new)):  # no column read at all
            return pd.DataFrame(index=index, dtype="float64")  # (no replica counts): still read
        return None
    frame = pd.concat(parts, axis=0).reindex(index=index)
    return frame[sorted(frame.columns)]


def _joined(old: pd.DataFrame | None, new: pd.DataFrame | None, index: pd.DatetimeIndex, cut: pd.Timestamp
            ) -> pd.DataFrame | None:
    """:func:`_join_frames`' frame written straight into one float64 array (no boolean take, concat, reindex and
    column take, each a copy of the frame): only where both sides are float64 frames over a time index with
    unique, unnamed string columns, every kept and fresh step on the grid and the fresh ones from ``cut`` on; None
    otherwise (the caller then joins with pandas)."""
    if old is None or new is None or not len(old.columns) or not len(new.columns):
        return None
    if not all(isinstance(f.index, pd.DatetimeIndex) and f.index.is_unique and _plain(f) for f in (old, new)):
        return None
    if (new.index < cut).any():
        return None
    kept_at = np.flatnonzero((old.index >= index[0]) & (old.index < cut))
    old_at = index.get_indexer(old.index[kept_at])
    new_at = index.get_indexer(new.index)
    if (old_at < 0).any() or (new_at < 0).any():  # a step off the grid: pandas drops it
        return None
    values = old.to_numpy()
    values = values[kept_at[0]:kept_at[-1] + 1] if _run(kept_at) else values[kept_at]
    kept_cols = ~np.isnan(values).all(axis=0) if len(values) else np.zeros(len(old.columns), dtype=bool)
    if not kept_cols.all():
        values = values[:, kept_cols]
    columns = pd.Index(sorted(set(old.columns[kept_cols]) | set(new.columns)))
    out = np.full((len(index), len(columns)), np.nan, order="F")  # each column contiguous, as pandas holds it
    _put(out, old_at, columns.get_indexer(old.columns[kept_cols]), values)
    _put(out, new_at, columns.get_indexer(new.columns), new.to_numpy())
    return pd.DataFrame(out, index=index, columns=columns, copy=False)


def _as_cached(old: pd.DataFrame | None, new: pd.DataFrame | None, index: pd.DatetimeIndex, cut: pd.Timestamp
               ) -> pd.DataFrame | None:
    """The cached frame itself (its array shared, the grid's index set on it) where the joined frame would hold
    exactly it: the same window again, every cached pod with a value before ``cut``, and the fresh steps
    bit for bit what the cache holds from ``cut`` on (NaN where the fresh answer has no step or pod). Only the
    steps from ``cut`` on are compared: no frame-sized array is made. Either side may be float32 (a family read
    compact, ``collect.COMPACT``): where pandas' join has the cached frame's dtype (float64 cached, or both
    float32, and some cached pod with a value before ``cut``: else pandas' frame would be the fresh one alone),
    fresh steps are compared as the cached dtype they widen to. None otherwise."""
    if old is None or new is None or not len(old.columns) or not len(new.columns) or len(old) != len(index):
        return None
    if old.index.dtype != index.dtype or not old.index.equals(index) or new.index.dtype != index.dtype:
        return None
    kind = next((dt for dt in (np.float64, np.float32) if _plain(old, dt)), None)
    fresh = next((dt for dt in (np.float64, np.float32) if _plain(new, dt)), None)
    if kind is None or fresh is None or np.dtype(fresh).itemsize > np.dtype(kind).itemsize:
        return None
    read = set(new.columns)
    if not old.columns.is_monotonic_increasing or not read <= set(old.columns):
        return None
    first = int(index.searchsorted(cut))
    new_at = index.get_indexer(new.index)
    if (new_at < first).any() or not new.index.is_unique:  # off the grid or before the cut: not this case
        return None
    values = old.to_numpy()
    empty = np.isnan(values[:first]).all(axis=0)  # a pod with no value before the cut: dropped unless read fresh
    if any(c not in read for c in old.columns[empty]) or (fresh is not kind and empty.all()):
        return None
    tail = np.full((len(index) - first, len(old.columns)), np.nan, dtype=kind)
    _put(tail, new_at - first, old.columns.get_indexer(new.columns), new.to_numpy())
    bits = np.int64 if kind is np.float64 else np.int32
    if not np.array_equal(tail.view(bits), np.ascontiguousarray(values[first:]).view(bits)):
        return None
    return old.set_axis(index, axis=0)


def _plain(f: pd.DataFrame, dtype: type[np.floating] = np.float64) -> bool:
    """Whether a frame is ``dtype`` throughout, with unique, unnamed string columns (what the array joins take)."""
    return (f.columns.name is None and f.columns.is_unique and bool((f.dtypes == dtype).all())
            and all(isinstance(c, str) for c in f.columns))


def _run(at: np.ndarray) -> bool:
    """Whether positions are one ascending run (a slice of them is a view)."""
    return len(at) > 0 and int(at[-1]) - int(at[0]) == len(at) - 1 and bool((np.diff(at) == 1).all())


def _put(out: np.ndarray, rows: np.ndarray, cols: np.ndarray, values: np.ndarray) -> None:
    """``out[rows, cols] = values``, as slices where rows or columns are runs (the usual case)."""
    if not len(rows) or not len(cols):
        return
    r: slice | np.ndarray = slice(rows[0], rows[-1] + 1) if _run(rows) else rows
    c: slice | np.ndarray = slice(cols[0], cols[-1] + 1) if _run(cols) else cols
    if isinstance(r, slice) or isinstance(c, slice):
        out[r, c] = values
    else:
        out[np.ix_(r, c)] = values


def same_as_cached(cached: pd.DataFrame, fresh: pd.DataFrame, rtol: float = REORDER_RTOL) -> pd.DataFrame:
    """``fresh`` with each value that equals the cached one of its step and pod to within ``rtol`` (relative;
    float summation reordering, :data:`REORDER_RTOL`) replaced by the cached one, so that what is derived from
    the series (the pipeline memo's digests) sees the same bits. A step the cache holds as NaN or not at all
    (filled in since), a value now NaN, or any change beyond the bound keeps the fresh value."""
    if fresh.empty or cached.empty:
        return fresh
    old = cached.reindex(index=fresh.index, columns=fresh.columns).to_numpy(dtype="float64")
    now = fresh.to_numpy(dtype="float64")
    with np.errstate(invalid="ignore"):
        close = np.isfinite(old) & np.isfinite(now) & (np.abs(now - old) <= rtol * np.maximum(np.abs(now), np.abs(old)))
    if not close.any() or np.array_equal(np.where(close, old, now), now, equal_nan=True):
        return fresh
    return pd.DataFrame(np.where(close, old, now), index=fresh.index, columns=fresh.columns)
