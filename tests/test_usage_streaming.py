"""Pod columns reduced to workload columns without holding the fleet twice (``collectors.usageframes``) give
exactly what grouping every pod gave: on random fleets (workloads of one or several pods, columns in any
order, gaps, -0.0) and as a whole report over a real Prometheus."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
import pytest

from collectors import snapshot
from collectors.usageframes import SERVING_FROM, SUM_METRICS, aggregate_usage
from recommender.core import usage as m
from recommender.core.inventory import WorkloadRef
from tests.builders import index
from tests.promcluster import Cluster, report_json


def grouped(series: Mapping[str, pd.DataFrame], mapping: Mapping[str, WorkloadRef]) -> dict[str, pd.DataFrame]:
    """The reduction as it was before it streamed: every pod column transposed and grouped (the reference)."""

    def by_workload(frame: pd.DataFrame) -> Any:
        cols = [c for c in frame.columns if c in mapping]
        return frame[cols].T.groupby(pd.Index([mapping[c].key for c in cols])) if cols else None

    out: dict[str, pd.DataFrame] = {}
    for metric, frame in series.items():
        g = by_workload(frame)
        if g is not None:
            agg = g.sum(min_count=1) if metric in SUM_METRICS else g.max()
            out[metric] = agg.T.astype("float32" if (frame.dtypes == np.float32).all() else "float64")
    source = next((series[x] for x in SERVING_FROM if x in series), None)
    present = None if source is None else by_workload(source.notna())
    if present is not None:
        out[m.SERVING_REPLICAS] = present.sum().T.astype("float16").replace(0.0, np.nan)  # few pods: exact
    return out


def assert_same(got: dict[str, pd.DataFrame], want: dict[str, pd.DataFrame]) -> None:
    assert got.keys() == want.keys()
    for metric, frame in want.items():
        pd.testing.assert_frame_equal(got[metric], frame, check_exact=True, obj=metric)
        assert np.array_equal(np.signbit(got[metric].to_numpy()), np.signbit(frame.to_numpy()))


@pytest.mark.parametrize("seed", range(6))
def test_the_streamed_reduction_is_the_grouped_one(seed: int) -> None:
    rng = np.random.default_rng(seed)
    idx = index(0.2)
    sizes = rng.choice([1, 1, 1, 2, 3], size=12) if seed % 3 else np.ones(12, dtype=int)  # all alone, or mixed
    mapping: dict[str, WorkloadRef] = {}
    for w, n in enumerate(sizes):
        ref = WorkloadRef(f"ns-{w % 3}", "Deployment" if w % 4 else "StatefulSet", f"svc-{(7 * w) % 12:02d}")
        for r in range(n):
            mapping[f"ns-{w % 3}/{chr(122 - w)}-{r}"] = ref  # pod order differs from workload order
    pods = [*mapping, "ns-0/unowned"]
    if seed % 2:
        pods = list(rng.permutation(pods))
    series = {}
    for metric in (m.REQUESTS_RUNNING, m.REQUEST_RATE, m.FB_USED_MIB, m.KV_USAGE_FRAC):
        values = rng.normal(size=(len(idx), len(pods))).round(1)
        values[rng.random(values.shape) < 0.3] = np.nan
        values[rng.random(values.shape) < 0.05] = -0.0
        series[metric] = pd.DataFrame(values, index=idx, columns=pd.Index(pods))
    series[m.POWER_W] = series[m.FB_USED_MIB].iloc[:, :3]  # a family only some pods have
    totals = rng.choice([40_192.0, 81_920.0, np.nan], size=(len(idx), len(pods)))
    series[m.FB_TOTAL_MIB] = pd.DataFrame(totals.astype(np.float32), index=idx, columns=pd.Index(pods))
    got = aggregate_usage(series, mapping)
    assert_same(got, grouped(series, mapping))
    assert set(got[m.FB_TOTAL_MIB].dtypes) == {np.dtype("float32")}  # a float32 family stays float32, same values
    wide = aggregate_usage({m.FB_TOTAL_MIB: series[m.FB_TOTAL_MIB].astype("float64")}, mapping)[m.FB_TOTAL_MIB]
    pd.testing.assert_frame_equal(got[m.FB_TOTAL_MIB].astype("float64"), wide, check_exact=True)


def test_workloads_of_one_pod_in_order_share_their_pods_memory() -> None:
    idx = index(0.1)
    frame = pd.DataFrame({"a/p-1": 1.0, "b/p-2": 2.0}, index=idx)
    mapping = {"a/p-1": WorkloadRef("a", "Deployment", "p"), "b/p-2": WorkloadRef("b", "Deployment", "p")}
    out = aggregate_usage({m.FB_USED_MIB: frame}, mapping)[m.FB_USED_MIB]
    assert np.shares_memory(out.to_numpy(), frame.to_numpy())
    assert list(out.columns) == ["a/Deployment/p", "b/Deployment/p"]


@pytest.mark.prometheus
def test_a_report_over_real_prometheus_is_the_grouped_one(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    def report() -> dict[str, Any]:
        return report_json(cluster, "--no-cache")

    streamed = report()
    seen: list[int] = []

    def reference(series: Mapping[str, pd.DataFrame], mapping: Mapping[str, WorkloadRef]) -> dict[str, pd.DataFrame]:
        want = grouped(series, mapping)
        assert_same(aggregate_usage(series, mapping), want)  # every family of the fleet, frame by frame
        seen.append(len(mapping) - len(set(mapping.values())))  # pods beyond the first of their workload
        return want

    monkeypatch.setattr(snapshot, "aggregate_usage", reference)
    assert report() == streamed and streamed["workloads"]
    assert seen and seen[0] > 0  # workloads of several pods were grouped too, not only the one-pod ones
