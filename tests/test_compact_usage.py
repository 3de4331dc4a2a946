"""FB used held at float32 where exact: readers see the same float64 numbers, reports the same answers."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd
import pytest

from collectors import usageframes
from collectors.prometheus import chunks, collect, parse, store
from collectors.prometheus.cache import UsageCache
from collectors.prometheus.collect import exact_float32
from collectors.usageframes import aggregate_usage
from recommender.core import usage as m
from recommender.core.inventory import WorkloadRef
from recommender.core.usage import Snapshot
from tests.promcluster import Cluster, report_json


def index(n: int) -> pd.DatetimeIndex:
    return pd.date_range("2026-01-01", periods=n, freq="60s", tz="UTC")


def _same_float64(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal as float64, NaN where NaN, and the same sign of zero."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return bool(np.array_equal(a, b, equal_nan=True) and np.array_equal(np.signbit(a), np.signbit(b)))


def test_whole_mib_are_held_at_float32_and_read_back_the_same() -> None:
    rng = np.random.default_rng(7)
    values = rng.integers(0, 81_920, size=(48, 600)).astype(np.float64)  # more columns than one slice
    values[::5, 3] = np.nan
    values[1, 4], values[2, 5] = -0.0, 2.0**24 - 1
    frame = pd.DataFrame(values, index=index(48), columns=[f"a/p-{i}" for i in range(600)])
    out = exact_float32(frame)
    assert set(out.dtypes) == {np.dtype(np.float32)}
    assert out.index.equals(frame.index) and out.columns.equals(frame.columns)
    assert _same_float64(out.to_numpy(), values)


@pytest.mark.parametrize("odd", [0.1, 2.0**24 + 1, 1e39, 123.456])
def test_a_value_float32_cannot_hold_keeps_the_frame_at_float64(odd: float) -> None:
    values = np.ones((10, 300))
    values[4, 299] = odd  # in the last slice only
    frame = pd.DataFrame(values, index=index(10), columns=[f"c{i}" for i in range(300)])
    assert exact_float32(frame) is frame


def test_a_snapshot_reads_a_float32_frame_as_float64() -> None:
    ref = WorkloadRef("a", "Deployment", "w")
    values = np.array([1024.0, np.nan, 2048.0])
    frame = pd.DataFrame({ref.key: values}, index=index(3)).astype(np.float32)
    t = datetime(2026, 1, 1, tzinfo=UTC)
    s = Snapshot(workloads=(), usage={m.FB_USED_MIB: frame}, start=t, end=t, step_s=60.0).series(m.FB_USED_MIB, ref)
    assert s is not None and s.dtype == np.float64 and _same_float64(s.to_numpy(), values)


def test_a_float32_frame_is_cached_at_float32(monkeypatch: pytest.MonkeyPatch) -> None:
    """A compact frame is kept in the cache file at float32 (half the bytes to decompress, and read back compact:
    no float64 copy for ``exact_float32`` to narrow again) and reads back as the same numbers; its float64 twin is
    kept at float64."""
    monkeypatch.setattr(store, "_ROWS", 7)  # several chunks
    values = np.arange(60, dtype=np.float64).reshape(12, 5) * 3.0
    values[2, 1], values[3, 2] = np.nan, -0.0
    frame = pd.DataFrame(values, index=index(12), columns=[f"p{i}" for i in range(5)])
    compact = exact_float32(frame)
    assert set(compact.dtypes) == {np.dtype(np.float32)}
    back = store.loads(store.dumps(UsageCache(key="k", series={"wide": frame, "small": compact}))).series
    assert set(back["small"].dtypes) == {np.dtype(np.float32)} and set(back["wide"].dtypes) == {np.dtype(np.float64)}
    assert _same_float64(back["small"].to_numpy(), values) and _same_float64(back["wide"].to_numpy(), values)
    wide, small = io.BytesIO(), io.BytesIO()
    sizes = store._write_values(compact, small)
    assert store._write_values(frame, wide) and sizes
    import pyarrow as pa

    codec, rows = pa.Codec("zstd"), store._ROWS
    raw = np.frombuffer(codec.decompress(small.getvalue()[:sizes[0]], decompressed_size=rows * 4), dtype=np.float32)
    assert _same_float64(raw, values.ravel(order="F")[:rows])  # the first chunk: float32 values, column after column


def test_a_report_over_real_prometheus_is_the_same_with_fb_used_at_float64(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    def report(*cache: str) -> dict[str, Any]:
        return report_json(cluster, *(cache or ("--no-cache",)))

    held: list[np.dtype[Any]] = []
    real = collect.exact_float32

    def spy(frame: pd.DataFrame) -> pd.DataFrame:
        out = real(frame)
        held.extend(out.dtypes)
        return out

    monkeypatch.setattr(collect, "exact_float32", spy)
    compact = report()
    cold = report("--cache-dir", str(tmp_path))  # the cache written from the float32 frame
    warm = report("--cache-dir", str(tmp_path))  # and read back
    assert held and set(held) == {np.dtype(np.float32)}  # the cluster's FB used is whole MiB
    monkeypatch.setattr(collect, "exact_float32", lambda frame: frame)
    monkeypatch.setattr(collect, "COMPACT", frozenset())  # read at float64 from the start, and kept so
    wide = report()
    assert compact["workloads"] and wide == compact == cold == warm


def _answers(values: np.ndarray, pods: list[str], parts: int) -> list[list[dict[str, Any]]]:
    """``values`` (steps x pods) as ``parts`` range answers, each a slice of the pods and of the steps (as chunks
    of a collection arrive), NaN steps left out as Prometheus leaves them."""
    out = []
    for cols in np.array_split(np.arange(len(pods)), parts):
        for rows in np.array_split(np.arange(values.shape[0]), 2):
            out.append([{"metric": {"namespace": "n", "pod": pods[j]},
                         "values": [[1000 + 60 * int(i), repr(float(values[i, j]))] for i in rows
                                    if not np.isnan(values[i, j])]} for j in cols])
    return out


def _frames(values: np.ndarray, expected: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The frame of ``values`` read into a compact accumulator and into a float64 one."""
    pods = [f"p-{j:03d}" for j in range(values.shape[1])]
    grid = chunks.Grid(1000.0, 60.0, values.shape[0])
    compact, wide = parse.Accumulator(grid, expected, compact=True), parse.Accumulator(grid, expected)
    for answer in _answers(values, pods, parts=4):
        compact.add(answer, "namespace", "pod")
        wide.add(answer, "namespace", "pod")
    return compact.frame(), wide.frame()


@pytest.mark.parametrize("expected", [70, 3])  # one block; a block per few pods (a census that counted fewer)
def test_whole_mib_are_read_into_float32_and_hold_the_float64_readings(expected: int) -> None:
    rng = np.random.default_rng(3)
    values = rng.integers(0, 81_920, size=(30, 70)).astype(np.float64)
    values[::4, 2] = np.nan
    values[3, 5], values[4, 6], values[5, 7] = -0.0, np.inf, 2.0**24 - 1
    small, wide = _frames(values, expected)
    assert set(small.dtypes) == {np.dtype(np.float32)} and set(wide.dtypes) == {np.dtype(np.float64)}
    assert small.index.equals(wide.index) and small.columns.equals(wide.columns)
    assert _same_float64(small.to_numpy(), wide.to_numpy())  # +Inf → NaN in both


@pytest.mark.parametrize("odd", [0.1, 2.0**24 + 1, 1e39, 123.456])
@pytest.mark.parametrize("expected", [70, 3])
def test_a_value_float32_cannot_hold_turns_what_was_read_to_float64(odd: float, expected: int) -> None:
    values = np.arange(30 * 70, dtype=np.float64).reshape(30, 70)
    values[::3, 60] = np.nan
    values[20, 60] = odd  # in the last answer but one: most columns were read at float32 before it
    small, wide = _frames(values, expected)
    assert set(small.dtypes) == {np.dtype(np.float64)}
    assert _same_float64(small.to_numpy(), wide.to_numpy()) and small.columns.equals(wide.columns)


@pytest.mark.parametrize(("most", "dtype"), [(2048, np.float16), (1, np.float32)])
def test_serving_replicas_are_held_compactly_and_read_as_the_float64_counts(
        most: int, dtype: type, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(usageframes, "WHOLE_IN_FLOAT16", most)  # 1: a workload of 2 pods has more than float16 may
    refs = {"n/a-1": WorkloadRef("n", "Deployment", "a"), "n/a-2": WorkloadRef("n", "Deployment", "a"),
            "n/b-1": WorkloadRef("n", "Deployment", "b")}
    running = pd.DataFrame({"n/a-1": [1.0, np.nan, 3.0, np.nan], "n/a-2": [2.0, 1.0, np.nan, np.nan],
                            "n/b-1": [np.nan, 0.0, 5.0, np.nan]}, index=index(4))
    count = aggregate_usage({m.REQUESTS_RUNNING: running}, refs)[m.SERVING_REPLICAS]
    assert set(count.dtypes) == {np.dtype(dtype)}
    t = datetime(2026, 1, 1, tzinfo=UTC)
    snap = Snapshot(workloads=(), usage={m.SERVING_REPLICAS: count}, start=t, end=t, step_s=60.0)
    read = {r.key: snap.series(m.SERVING_REPLICAS, r) for r in set(refs.values())}
    expected = (running.T.groupby(pd.Index([refs[c].key for c in running.columns])).count().T  # pods reporting
                .replace(0, np.nan).astype(np.float64))
    for key, s in read.items():
        assert s is not None and s.dtype == np.float64
        assert _same_float64(s.to_numpy(), expected[key].to_numpy())
