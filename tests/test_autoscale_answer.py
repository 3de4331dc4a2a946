"""One autoscaling answer: the scaling plan's threshold, min/max and replicas are those of the recommended shape,
made once in the plan; every format prints the same numbers; the KEDA trigger reads the Prometheus the
settings name (credentials never in it); the JSON gives an HPA beside the KEDA fragment from the same numbers.

Run on the bundled demo, whose translate moves from a whole A100 to MIG 4g.40gb (a smaller compute share)."""

from __future__ import annotations

import csv
import json
import re
from io import StringIO
from typing import Any

import pytest

from collectors.files import read_snapshot
from policies.compute import compute_held
from policies.replicas import hpa_behavior
from recommender.core.catalogue import load_catalogue
from recommender.core.plan import Plan
from recommender.core.settings import PrometheusSettings, ScalingSettings, Settings
from recommender.core.usage import Snapshot
from recommender.demo import demo_path
from recommender.outputs import get_formatter
from recommender.outputs.table import render_table
from recommender.pipeline.run import run_once
from recommender.serve.extmetrics import parse_selector, workload_of

TRANSLATE = "chat/Deployment/translate"


@pytest.fixture(scope="module")
def demo() -> Snapshot:
    return read_snapshot(demo_path())


def _plan(demo: Snapshot, **kw: Any) -> Plan:
    return run_once(demo, Settings(**kw), demo.end)


@pytest.fixture(scope="module")
def plan(demo: Snapshot) -> Plan:
    return _plan(demo)


def _doc(plan: Plan) -> dict[str, Any]:
    return json.loads(get_formatter("json")(plan, None))


def _workload(doc: dict[str, Any], key: str) -> dict[str, Any]:
    return next(w for w in doc["workloads"] if f"{w['namespace']}/{w['kind']}/{w['name']}" == key)


def _addresses(doc: dict[str, Any]) -> set[str]:
    return {t["metadata"]["serverAddress"] for w in doc["workloads"] if w["scaling"]
            for t in w["scaling"]["keda"]["triggers"]}


# --- the KEDA trigger's Prometheus ---------------------------------------------------------------------------

def test_keda_trigger_reads_the_prometheus_url_given(demo: Snapshot) -> None:
    doc = _doc(_plan(demo, prometheus=PrometheusSettings(url="https://thanos.example:10902/")))
    assert _addresses(doc) == {"https://thanos.example:10902"}


def test_the_setting_overrides_the_url_the_cli_used(demo: Snapshot) -> None:
    """The CLI may reach Prometheus through a port-forward; KEDA runs in the cluster."""
    doc = _doc(_plan(demo, prometheus=PrometheusSettings(url="http://localhost:9090"),
                     scaling=ScalingSettings(keda_prometheus_url="http://prometheus-operated.monitoring.svc:9090")))
    assert _addresses(doc) == {"http://prometheus-operated.monitoring.svc:9090"}
    assert doc["autoscaler_prometheus"]["source"] == "scaling.keda_prometheus_url"


@pytest.mark.parametrize("kw", [
    {"prometheus": PrometheusSettings(url="https://alice:s3cret@prom.example:9090/api")},
    {"prometheus": PrometheusSettings(url="https://prom.example:9090/api", username="alice", password="s3cret")},
])
def test_credentials_never_reach_the_trigger(demo: Snapshot, kw: dict[str, Any]) -> None:
    plan = _plan(demo, **kw)
    text = get_formatter("json")(plan, None)
    assert "s3cret" not in text and "alice" not in text
    assert _addresses(json.loads(text)) == {"https://prom.example:9090/api"}
    assert any("TriggerAuthentication" in w for w in plan.warnings)


def test_without_a_url_the_address_is_a_placeholder_that_says_so(plan: Plan) -> None:
    doc = _doc(plan)
    assert _addresses(doc) == {"http://prometheus.invalid:9090"}  # .invalid never resolves (RFC 2606)
    assert "scaling.keda_prometheus_url" in doc["autoscaler_prometheus"]["source"]


# --- one answer, on the recommended shape --------------------------------------------------------------------

def test_translate_is_scaled_on_its_recommended_shape(plan: Plan) -> None:
    rec = next(r for r in plan.recommendations if r.ref.key == TRANSLATE)
    assert rec.recommended is not None and rec.scaling is not None
    catalogue = load_catalogue()
    today, after = compute_held(rec.workload.allocation, catalogue), compute_held(rec.recommended, catalogue)
    assert today and after and after < today  # the demo's premise: a smaller slice
    s = rec.scaling
    assert s.capacity_scale == pytest.approx(after / today)
    assert s.per_replica_capacity == pytest.approx(s.basis_capacity * after / today)
    assert s.target_per_replica == pytest.approx(s.per_replica_capacity * (1 - s.headroom_frac), rel=1e-3)
    assert any("estimated" in r and "4g.40gb" in r for r in s.reasons)
    doc = _workload(_doc(plan), TRANSLATE)["scaling"]
    assert doc["capacity_estimated"] is True
    assert float(doc["keda"]["triggers"][0]["metadata"]["threshold"]) == doc["target_per_replica"]
    assert doc["keda"]["minReplicaCount"] == doc["min_replicas"]
    assert doc["keda"]["maxReplicaCount"] == doc["max_replicas"]


def test_an_unchanged_shape_keeps_its_measured_capacity(plan: Plan) -> None:
    for rec in plan.recommendations:
        s = rec.scaling
        if s is not None and rec.recommended is not None and rec.recommended == rec.workload.allocation:
            assert s.capacity_scale == 1.0 and s.per_replica_capacity == s.basis_capacity


def test_the_hpa_example_uses_the_same_numbers(plan: Plan) -> None:
    doc = _doc(plan)
    for w in doc["workloads"]:
        s = w["scaling"]
        if s is None:
            continue
        hpa = s["hpa"]
        assert hpa["apiVersion"] == "autoscaling/v2" and hpa["kind"] == "HorizontalPodAutoscaler"
        spec = hpa["spec"]
        assert (spec["scaleTargetRef"]["kind"], spec["scaleTargetRef"]["name"]) == (w["kind"], w["name"])
        assert (spec["minReplicas"], spec["maxReplicas"]) == (max(1, s["min_replicas"]), s["max_replicas"])
        (metric,) = spec["metrics"]
        ext = metric["external"]
        assert metric["type"] == "External" and ext["metric"]["name"] == s["metric"]
        labels = ext["metric"]["selector"]["matchLabels"]
        assert workload_of(parse_selector(",".join(f"{k}={v}" for k, v in labels.items()))) == \
            f"{w['kind']}/{w['name']}"
        assert float(ext["target"]["averageValue"]) == s["target_per_replica"]
        assert spec["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == \
            s["keda"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"]
    rec = next(r for r in plan.recommendations if r.scaling is not None)
    assert rec.scaling is not None
    assert _workload(doc, rec.ref.key)["scaling"]["hpa"]["spec"]["behavior"] == hpa_behavior(rec.scaling)


def test_csv_has_one_replica_answer_per_meaning(plan: Plan) -> None:
    """``recommended_replicas`` is the recommended allocation's (today's count: what GPUs needed and savings are
    costed at); the scaling plan's count for the peak is ``scaling_peak_replicas``: no two columns that read as
    the same answer."""
    header = next(csv.reader(StringIO(get_formatter("csv")(plan, None))))
    assert "scaling_recommended_replicas" not in header
    assert {"recommended_replicas", "scaling_peak_replicas", "scaling_min_replicas", "scaling_max_replicas"} <= \
        set(header)


# --- every format prints the same numbers --------------------------------------------------------------------

SCALING_LINE = (r" autoscaling: (?P<peak>\d+) replicas? at peak \(min (?P<min>\d+), max (?P<max>\d+)\), "
                r"threshold (?P<threshold>[0-9.e+-]+) req/s per replica")


def _from_text(text: str, key: str) -> dict[str, float]:
    """The numbers of the one scaling line a format prints for the workload ``key`` (namespace/Kind/name)."""
    found = re.findall(re.escape(key) + SCALING_LINE, text)
    assert len(found) == 1, f"{len(found)} scaling lines for {key}"
    return dict(zip(("peak", "min", "max", "threshold"), map(float, found[0]), strict=True))


def test_every_format_agrees_on_replicas_and_thresholds(plan: Plan, demo: Snapshot) -> None:
    doc = _doc(plan)
    rows = {r["name"]: r for r in csv.DictReader(StringIO(get_formatter("csv")(plan, demo)))}
    texts = {"markdown": get_formatter("markdown")(plan, demo), "html": get_formatter("html")(plan, demo),
             "table": render_table(plan, demo, width=200)}
    scaled = [w for w in doc["workloads"] if w["scaling"]]
    assert len(scaled) >= 5
    for w in scaled:
        s = w["scaling"]
        want = {"peak": s["peak_replicas"], "min": s["min_replicas"], "max": s["max_replicas"],
                "threshold": s["target_per_replica"]}
        trig = s["keda"]
        assert (trig["minReplicaCount"], trig["maxReplicaCount"]) == (want["min"], want["max"])
        assert float(trig["triggers"][0]["metadata"]["threshold"]) == want["threshold"]
        row = rows[w["name"]]
        assert {k: float(row[f"scaling_{c}"]) for k, c in (("peak", "peak_replicas"), ("min", "min_replicas"),
                ("max", "max_replicas"), ("threshold", "target_per_replica"))} == want
        key = f"{w['namespace']}/{w['kind']}/{w['name']}"
        for fmt, text in texts.items():
            assert _from_text(text, key) == want, fmt


def test_the_demo_json_keeps_the_contract(plan: Plan) -> None:
    """Every scaling field (shape, estimate, HPA, the Prometheus address) is in the schema, and so in JSON.md."""
    from jsonschema import Draft202012Validator

    from tests.test_outputs_formats import SCHEMA, strict
    Draft202012Validator(strict(SCHEMA)).validate(_doc(plan))


# --- Auto follows the plan for the shape it applies ----------------------------------------------------------

def test_auto_uses_todays_figures_where_it_does_not_apply_the_shape(plan: Plan) -> None:
    """A policy that allows replicas but not MIG keeps translate on its whole GPU: the autoscaler must then follow
    the plan on today's shape, not the slice's lower thresholds (made once, in the same scaling_plan call)."""
    from policies.replicas import trigger_thresholds
    from recommender.controller.changes import desired_from

    rec = next(r for r in plan.recommendations if r.ref.key == TRANSLATE)
    s = rec.scaling
    assert s is not None and s.on_today is not None and s.on_today.target_per_replica > s.target_per_replica
    moved = desired_from(rec, ["replicas", "mig"])
    assert dict(moved.edits.resources) == {"nvidia.com/mig-4g.40gb": "1"}
    assert dict(moved.keda_thresholds) == trigger_thresholds(s)
    assert (moved.replicas, moved.keda_min, moved.keda_max) == (s.recommended_replicas, s.min_replicas, s.max_replicas)
    kept = desired_from(rec, ["replicas", "vllm"])
    today = s.on_today
    assert not kept.edits.resources and dict(kept.keda_thresholds) == trigger_thresholds(today)
    assert (kept.replicas, kept.keda_min, kept.keda_max) == (today.recommended_replicas, today.min_replicas,
                                                             today.max_replicas)
    assert any("sized for today's shape" in r for r in kept.reasons)
    assert today.per_replica_capacity == s.basis_capacity and not today.capacity_estimated


def test_a_policys_replica_bounds_hold_on_both_shapes(plan: Plan) -> None:
    from policies.bounds import within_replica_bounds
    from recommender.core.plan import WorkloadConstraints

    rec = next(r for r in plan.recommendations if r.ref.key == TRANSLATE)
    assert rec.scaling is not None and rec.scaling.on_today is not None
    bounded = within_replica_bounds(rec.scaling, WorkloadConstraints(min_replicas=1, max_replicas=2))
    assert bounded.on_today is not None
    for p in (bounded, bounded.on_today):
        assert 1 <= p.min_replicas <= p.recommended_replicas <= p.max_replicas <= 2
