"""The device table keeps each pod's instants on a device as arrays (collectors/prometheus/devices.py): checked
against the set per device and instant it replaced (the model below, as it was), over random answers, re-read
steps, forgetting and a cache file's restore."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from typing import Any

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.pods import PodDevices, pod_key
from collectors.prometheus.collect import _device_memory
from collectors.prometheus.devices import DeviceTable, _device_id
from collectors.prometheus.points import decode


class _Model:
    """The table as it was: one set of pods per (device, instant), and the pods' shared count from those."""

    def __init__(self) -> None:
        self.on_device: dict[tuple[str, float], set[str]] = defaultdict(set)

    def add(self, result: list[dict[str, Any]]) -> None:
        for item in result:
            labels = item["metric"]
            key, dev = pod_key(labels["namespace"], labels["pod"]), _device_id(labels)
            for t, v in item["values"]:
                if math.isfinite(float(v)):
                    self.on_device[(dev, float(t))].add(key)

    def forget(self, before_s: float) -> None:
        self.on_device = defaultdict(set, {k: v for k, v in self.on_device.items() if k[1] >= before_s and len(v) > 1})

    def shared(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(lambda: 1)
        for pods in self.on_device.values():
            for key in pods:
                out[key] = max(out[key], len(pods))
        return dict(out)


_SERIES = st.tuples(st.sampled_from(["p1", "p2", "p3", "p4"]), st.sampled_from(["GPU-a", "GPU-b", "GPU-c"]),
                    st.lists(st.tuples(st.integers(0, 12), st.sampled_from(["81559", "NaN", "1", "+Inf"])),
                             min_size=1, max_size=8, unique_by=lambda x: x[0]))
_STEP = st.one_of(st.lists(_SERIES, min_size=1, max_size=5), st.integers(0, 12))  # an answer, or forget before t


def _answer(series: list[tuple[str, str, list[tuple[int, str]]]], raw: bool) -> list[dict[str, Any]]:
    out = []
    for pod, uuid, points in series:
        pairs = [[60.0 * t, v] for t, v in sorted(points)]
        labels = {"namespace": "ns", "pod": pod, "UUID": uuid, "modelName": "H100"}
        out.append({"metric": labels, "values": decode(json.dumps(pairs).encode()) if raw else pairs})
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(_STEP, min_size=1, max_size=8), st.booleans())
def test_shared_counts_and_forgetting_match_a_set_per_device_and_instant(steps: list[Any], raw: bool) -> None:
    table, model = DeviceTable("namespace", "pod"), _Model()
    for step in steps:
        if isinstance(step, int):
            table.forget(60.0 * step)
            model.forget(60.0 * step)
        else:
            table.add(_answer(step, raw))
            model.add(_answer(step, False))
        got = {r.namespace + "/" + r.pod: r.shared_with for r in table.records()}
        assert {k: v for k, v in got.items() if v > 1} == {k: v for k, v in model.shared().items() if v > 1}
        shared = {k: v for k, v in model.on_device.items() if len(v) > 1}
        assert table.on_device == shared  # what a cache file keeps
        restored = DeviceTable("namespace", "pod")
        restored.on_device = table.on_device
        assert restored.on_device == shared


def test_a_pod_seen_with_no_finite_sample_holds_its_device_alone() -> None:
    table = DeviceTable("namespace", "pod").add(_answer([("p1", "GPU-a", [(0, "NaN")]),
                                                         ("p2", "GPU-a", [(0, "1"), (1, "1")])], raw=True))
    got = {r.pod: (r.shared_with, r.device_memory_mib) for r in table.records()}
    assert got == {"p1": (1, None), "p2": (1, 1.0)} and not table.on_device
    assert np.array_equal(table.seen[_device_id({"UUID": "GPU-a"})]["ns/p2"][0], [0.0, 60.0])


def test_device_memory_is_the_pods_total_wherever_framebuffer_used_has_a_value() -> None:
    rng = np.random.default_rng(5)
    keys = [f"ns/p{i:03d}" for i in range(600)]  # more columns than one slice of the fill
    used = pd.DataFrame(np.where(rng.random((40, 600)) < 0.3, np.nan, 1000.0), columns=pd.Index(keys))
    devices = tuple(PodDevices("ns", k.split("/")[1], "H100", 1, None, float(80_000 + i) if i % 7 else None, 1, ())
                    for i, k in enumerate(keys))
    total = _device_memory(used, devices)
    assert total is not None
    known = [k for i, k in enumerate(keys) if i % 7]
    want = np.where(used[known].notna().to_numpy(), [80_000.0 + keys.index(k) for k in known], np.nan)
    assert list(total.columns) == known and total.index.equals(used.index)
    assert set(total.dtypes) == {np.dtype("float32")}  # whole MiB below 2**24: held exactly at half the memory
    assert total.to_numpy(dtype="float64").tobytes() == want.tobytes()
    assert _device_memory(used, ()) is None and _device_memory(None, devices) is None
    odd = (*devices[:-1], PodDevices("ns", keys[-1].split("/")[1], "H100", 1, None, 2.0**24 + 1, 1, ()))
    exact = _device_memory(used, odd)  # a size float32 cannot hold: every column float64
    assert exact is not None and set(exact.dtypes) == {np.dtype("float64")} and exact[keys[-1]].max() == 2.0**24 + 1
