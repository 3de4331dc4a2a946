"""Odd input a broken or hostile source can send: in a series, ±Inf and magnitudes no service reaches (dropped by the
data-quality stage and said in the workload's reasons, never sized from, never drawn or written by a format: the
formats read the series as the plan read them); in a tenant's annotations, numbers no model or replica has; in
vLLM's labels or a snapshot, engine figures no engine has. Never a traceback."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from collectors.files import read_snapshot, write_snapshot
from recommender.cli.app import make_reports
from recommender.core import usage as m
from recommender.core.inventory import Workload
from recommender.core.plan import Plan, Recommendation
from recommender.core.settings import Settings
from recommender.core.usage import Snapshot
from recommender.demo import demo_path
from recommender.outputs import register_formatter, unregister_formatter
from recommender.pipeline.run import run_once

SERVICE = "chat/Deployment/translate"  # a demo service with a request rate, a scaling plan and a usage chart
AT = slice(1000, 1010)  # ten steps in the middle of the demo's two weeks


def _with(snap: Snapshot, metric: str, value: float, key: str = SERVICE) -> Snapshot:
    usage = dict(snap.usage)
    frame = usage[metric].astype(np.float64)
    values = frame[key].to_numpy().copy()
    values[AT] = value
    frame[key] = values
    usage[metric] = frame
    return replace(snap, usage=usage)


def _strict_json(text: str) -> object:
    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} in the JSON report")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def demo() -> Snapshot:
    return read_snapshot(demo_path())


@pytest.fixture(scope="module")
def as_is(demo: Snapshot) -> Recommendation:
    """The demo service's recommendation from the demo as it is."""
    return {r.ref.key: r for r in run_once(demo, Settings(), demo.end).recommendations}[SERVICE]


@pytest.mark.parametrize("metric", [m.FB_USED_MIB, m.GR_ENGINE_ACTIVE_FRAC, m.REQUEST_RATE])
@pytest.mark.parametrize("value", [np.inf, -np.inf])
def test_infinite_samples_are_dropped_and_every_format_renders_without_them(demo: Snapshot, tmp_path: Path,
                                                                            metric: str, value: float) -> None:
    write_snapshot(_with(demo, metric, value), tmp_path)
    done = make_reports("file", str(tmp_path), Settings(), demo.end, ("html", "json", "markdown", "table"))
    doc = _strict_json(done["json"][0])
    assert isinstance(doc, dict)
    (rec,) = [w for w in doc["workloads"] if f"{w['namespace']}/{w['kind']}/{w['name']}" == SERVICE]
    assert any(r.startswith("dropped 10 of ") for r in rec["reasons"]), rec["reasons"]
    assert SERVICE.split("/")[-1] in done["html"][0] and "<svg" in done["html"][0]


@pytest.mark.parametrize(("metric", "label"), [(m.REQUEST_RATE, "request rate"),
                                               (m.GENERATION_TOKENS_RATE, "generation token rate"),
                                               (m.REQUESTS_WAITING, "requests waiting")])
@pytest.mark.parametrize("value", [1e200, 1e300])
def test_a_magnitude_no_service_reaches_is_dropped_not_sized_from(demo: Snapshot, as_is: Recommendation,
                                                                 metric: str, label: str, value: float) -> None:
    snap = _with(demo, metric, value)
    plan = run_once(snap, Settings(), snap.end)
    (rec,) = [r for r in plan.recommendations if r.ref.key == SERVICE]
    assert any(r.startswith("dropped 10 of ") and f" {label} samples " in r for r in rec.reasons), rec.reasons
    assert rec.scaling is not None and as_is.scaling is not None
    assert rec.scaling.max_replicas <= as_is.scaling.max_replicas * 2  # sized from what is left, not from 1e200


def test_the_replica_charts_demand_is_read_from_what_the_plan_read(demo: Snapshot, as_is: Recommendation) -> None:
    """Five billion requests a second at ten steps: dropped by the quality stage, so the demand the replica chart
    draws beside the plan (``Advice.replicas``) never holds them either."""
    plan = run_once(_with(demo, m.REQUEST_RATE, 5e9), Settings(), demo.end)
    (rec,) = [r for r in plan.recommendations if r.ref.key == SERVICE]
    assert rec.advice.replicas is not None and as_is.advice.replicas is not None
    assert float(rec.advice.replicas.demand.max()) <= float(as_is.advice.replicas.demand.max())


def test_a_format_is_handed_the_series_as_the_plan_read_them(demo: Snapshot, tmp_path: Path) -> None:
    """Engine activity of 7 (outside 0-1) at ten steps: a format (here a plugin's) sees those steps as missing, as
    the sizing did, not the exporter's 7."""
    seen: list[float] = []

    def probe(plan: Plan, snapshot: Snapshot | None) -> str:
        series = snapshot.series(m.GR_ENGINE_ACTIVE_FRAC, next(r.ref for r in plan.recommendations
                                                                 if r.ref.key == SERVICE)) if snapshot else None
        seen.append(float(series.max()) if series is not None else float("nan"))
        return "probed"

    write_snapshot(_with(demo, m.GR_ENGINE_ACTIVE_FRAC, 7.0), tmp_path)
    register_formatter("odd-values-probe")(probe)
    try:
        done = make_reports("file", str(tmp_path), Settings(), demo.end, ("odd-values-probe",))
    finally:
        unregister_formatter("odd-values-probe")
    assert done["odd-values-probe"][0] == "probed"
    assert len(seen) == 1 and 0.0 < seen[0] <= 1.0


def test_the_html_charts_draw_a_series_holding_infinity_handed_to_them(demo: Snapshot) -> None:
    """A caller of the format API may hand it any snapshot: +Inf in the series it draws is a gap, not an error."""
    from recommender.outputs import get_formatter

    raw = _with(_with(demo, m.FB_USED_MIB, np.inf), m.GR_ENGINE_ACTIVE_FRAC, np.inf)
    page = get_formatter("html")(run_once(demo, Settings(), demo.end), raw)
    assert page.count("<svg") >= len(demo.workloads) // 2


NUMBERS_A_TENANT_MAY_WRITE = ["nan", "inf", "-inf", "-1", "0", "1e-320", "1e-300", "1e300", "1e309", "abc", ""]


@pytest.mark.parametrize("raw", NUMBERS_A_TENANT_MAY_WRITE)
def test_a_number_a_tenant_writes_in_an_annotation_never_breaks_the_report(demo: Snapshot, raw: str) -> None:
    """Annotations are the tenant's to write: the KV bytes a token, the replica capacity and the TTFT objective all
    at ``raw`` (``-1``, NaN, 1e-320, ...) on every vLLM workload of the demo, and the plan is made, every format
    renders, and the JSON holds only numbers."""
    from recommender.outputs import get_formatter

    odd = {name: raw for name in ("rightsizer.io/kv-bytes-per-token", "rightsizer.io/replica-capacity",
                                  "rightsizer.io/ttft-slo-seconds")}
    workloads = tuple(replace(w, annotations={**w.annotations, **odd}) if w.allocation.vllm else w
                      for w in demo.workloads)
    snap = replace(demo, workloads=workloads)
    plan = run_once(snap, Settings(), snap.end)
    assert len(plan.recommendations) == len(demo.workloads)
    _strict_json(get_formatter("json")(plan, snap))
    for fmt in ("html", "markdown", "table", "csv", "yaml"):
        assert get_formatter(fmt)(plan, snap)


def test_a_capacity_annotation_out_of_range_is_named_where_there_is_no_capacity(demo: Snapshot) -> None:
    """1e-320 requests a second a replica (a count that overflows to infinity) is refused, and the reason says it
    was, not that there was no annotation."""
    key = "devtools/Deployment/docs-qa"  # a vLLM workload of the demo with too few steps to measure a capacity
    workloads = tuple(replace(w, annotations={**w.annotations, "rightsizer.io/replica-capacity": "1e-320"})
                      if w.ref.key == key else w for w in demo.workloads)
    plan = run_once(replace(demo, workloads=workloads), Settings(), demo.end)
    (rec,) = [r for r in plan.recommendations if r.ref.key == key]
    assert any("rightsizer.io/replica-capacity='1e-320' is not a number of requests/s from 1e-06 to 1e+09" in r
               for r in rec.reasons), rec.reasons


@pytest.mark.parametrize(("blocks", "size", "fraction"), [
    ("1e200", "1e200", "50"),  # a capacity whose product overflows, a fraction of 50
    ("-5", "16", "-3"),  # negative
    ("nan", "16", "inf"),
    ("4294967296", "16", "0"),  # 2^36 tokens: more than any engine holds; no memory at all
])
def test_cache_config_labels_no_engine_reports_are_unknown_not_sizes(blocks: str, size: str, fraction: str) -> None:
    """vllm:cache_config_info's labels come from the tenant's pod: a KV capacity or memory fraction no engine has
    is unknown (as a missing label is), not a size the memory policy and the report would overflow on."""
    from collectors.prometheus.parse import vllm_info

    labels = {"namespace": "chat", "pod": "a-0", "num_gpu_blocks": blocks, "block_size": size,
              "gpu_memory_utilization": fraction, "model_name": "m"}
    (info,) = vllm_info([(labels, 1.0, 0.0)], [], "namespace", "pod")
    assert (info.kv_capacity_tokens, info.gpu_memory_utilization) == (None, None)
    sane = {**labels, "num_gpu_blocks": "27000", "block_size": "16", "gpu_memory_utilization": "0.9"}
    (info,) = vllm_info([(sane, 1.0, 0.0)], [], "namespace", "pod")
    assert (info.kv_capacity_tokens, info.gpu_memory_utilization) == (432_000.0, 0.9)


@pytest.mark.parametrize(("field", "value"), [("kv_capacity_tokens", np.inf), ("kv_capacity_tokens", np.nan),
                                              ("kv_capacity_tokens", 1e300), ("kv_capacity_tokens", -80.0),
                                              ("gpu_memory_utilization", -3.0), ("gpu_memory_utilization", 50.0),
                                              ("gpu_memory_utilization", np.inf), ("max_model_len", 10**30)])
def test_an_engine_figure_no_engine_has_is_unknown_with_a_note_whatever_the_source(demo: Snapshot, field: str,
                                                                                  value: float) -> None:
    """A snapshot file, or a collector of another version, may carry what the collectors' parsers refuse: the
    quality stage leaves it unknown and says so, and every format renders."""
    from recommender.outputs import get_formatter

    def odd(w: Workload) -> Workload:
        vllm = w.allocation.vllm
        if vllm is None:
            return w
        if field == "kv_capacity_tokens":
            return replace(w, kv_capacity_tokens=value)
        changed: dict[str, Any] = {field: value}
        return replace(w, allocation=replace(w.allocation, vllm=replace(vllm, **changed)))

    snap = replace(demo, workloads=tuple(odd(w) for w in demo.workloads))
    plan = run_once(snap, Settings(), snap.end)
    (rec,) = [r for r in plan.recommendations if r.ref.key == SERVICE]
    assert any("is impossible: left unknown" in n for n in rec.workload.notes), rec.workload.notes
    _strict_json(get_formatter("json")(plan, snap))
    for fmt in ("html", "markdown", "table", "csv", "yaml"):
        assert get_formatter(fmt)(plan, snap)


def test_a_tenants_long_value_is_repeated_in_forty_characters(demo: Snapshot) -> None:
    """An annotation's value may be 256 KiB: a reason that names it repeats 40 characters and an ellipsis."""
    from recommender.outputs import get_formatter

    odd = {"rightsizer.io/class": "x" * 5000, "rightsizer.io/ttft-slo-seconds": "y" * 5000,
           "rightsizer.io/kv-bytes-per-token": "z" * 5000}
    workloads = tuple(replace(w, annotations={**w.annotations, **odd}) if w.ref.key == SERVICE else w
                      for w in demo.workloads)
    snap = replace(demo, workloads=workloads)
    text = get_formatter("json")(run_once(snap, Settings(), snap.end), snap)
    for letter in "xyz":
        assert f"'{letter * 40}'…" in text and letter * 41 not in text


@pytest.mark.parametrize("annotation", ["rightsizer.io/mechanisms", "rightsizer.io/mechanism"])
def test_a_mechanism_annotations_long_value_is_repeated_in_forty_characters(demo: Snapshot, annotation: str) -> None:
    """The mechanisms a workload allows or requires: a 5,000-character value is named by 40 characters of it."""
    from recommender.outputs import get_formatter

    workloads = tuple(replace(w, annotations={**w.annotations, annotation: "mig," + "w" * 5000})
                      if w.ref.key == SERVICE else w for w in demo.workloads)
    snap = replace(demo, workloads=workloads)
    plan = run_once(snap, Settings(), snap.end)
    (rec,) = [r for r in plan.recommendations if r.ref.key == SERVICE]
    said = " ".join(rec.reasons)
    assert annotation + "=" in said, rec.reasons  # the value is still named
    assert "w" * 41 not in get_formatter("json")(plan, snap)
