"""What each report format promises beyond its golden file: the JSON contract, escaping of user
data, the CSV shape, the narrow terminal table, and a self-contained, bounded HTML page."""

from __future__ import annotations

import copy
import csv
import io
import json
import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from jsonschema import Draft202012Validator

from recommender.core.inventory import WorkloadRef
from recommender.core.plan import Bound, Plan
from recommender.core.usage import Snapshot
from recommender.outputs import get_formatter
from recommender.outputs.charts import MAX_POINTS, downsample
from recommender.outputs.csvfmt import COLUMNS
from recommender.outputs.htmlreport import render_html
from recommender.outputs.markdown import md
from recommender.outputs.table import render_table
from tests import planfixture as pf

OUTPUTS = Path(__file__).parents[1] / "recommender" / "outputs"
SCHEMA = json.loads((OUTPUTS / "schema.json").read_text(encoding="utf-8"))
ESCAPED_NASTY = "a&lt;b&gt;&amp;&quot;c&quot;"


@pytest.fixture(scope="module")
def page(plan: Plan, snap: Snapshot) -> str:
    return render_html(plan, snap)


# -- JSON ------------------------------------------------------------------------------------------

def _no_nan(token: str) -> Any:
    raise AssertionError(f"{token} in the JSON output")


def strict(schema: Any) -> Any:
    """The schema with ``additionalProperties: false`` on every object: the output has no field the
    schema (and so JSON.md) does not document. The published schema stays open for minor versions."""
    schema = copy.deepcopy(schema)
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if "properties" in node:
                node["additionalProperties"] = False
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return schema


def test_schema_is_valid_2020_12() -> None:
    Draft202012Validator.check_schema(SCHEMA)


def test_json_validates_against_the_schema(plan: Plan, snap: Snapshot) -> None:
    doc = json.loads(get_formatter("json")(plan, snap), parse_constant=_no_nan)
    Draft202012Validator(SCHEMA).validate(doc)
    Draft202012Validator(strict(SCHEMA)).validate(doc)
    assert doc["schema_version"] == "2.1" and doc["generated_at"] == "2026-11-01T00:00:00Z"
    assert [w["name"] for w in doc["workloads"]] == [r.ref.name for r in plan.recommendations]


def test_demo_plan_with_scaling_and_mig_nodes_validates() -> None:
    """The real pipeline over the demo: MPS and MIG recommendations, scaling plans, a per-node MIG plan."""
    from collectors.files import read_snapshot
    from recommender.core.settings import ForecastSettings, Settings
    from recommender.demo import demo_path
    from recommender.pipeline.run import run_once

    demo = read_snapshot(demo_path())
    real = run_once(demo, Settings(forecast=ForecastSettings(max_workloads=3)), demo.end)
    doc = json.loads(get_formatter("json")(real, demo), parse_constant=_no_nan)
    Draft202012Validator(strict(SCHEMA)).validate(doc)
    assert doc["mig_nodes"] and doc["mig_parted_config"]["version"] == "v1"
    names = {n["config_name"] for n in doc["mig_nodes"]}
    assert names <= set(doc["mig_parted_config"]["mig-configs"]) | {"all-3g.40gb"}
    mechanisms = {w["mechanism"] for w in doc["workloads"] if w["mechanism"]}
    assert {"mig", "exclusive"} <= mechanisms
    scaled = [w for w in doc["workloads"] if w["scaling"]]
    assert scaled, "no scaling plan in the demo"
    autoscaled = both = 0.0
    for w in scaled:
        s = w["scaling"]
        assert s["min_replicas"] <= s["peak_replicas"] <= s["max_replicas"]
        assert s["keda"]["minReplicaCount"] == s["min_replicas"]
        assert w["namespace"] in s["keda"]["triggers"][0]["metadata"]["query"]
        assert (s["mean_replicas"] is None) == (s["capacity_source"] == "lower bound")
        if s["mean_replicas"] is not None:
            assert (0 if s["scale_to_zero"] else 1) <= s["mean_replicas"] <= s["max_replicas"]
            autoscaled += w["gpus_held"] * (s["mean_replicas"] / w["current"]["replicas"] - 1)
        if s["mean_replicas_right_sized"] is not None:
            per_replica = w["recommended"]["gpu_equivalents"]
            both += per_replica * s["mean_replicas_right_sized"] - w["gpus_needed"]
    summary = doc["summary"]
    assert summary["autoscaled_workloads"] == sum(w["scaling"]["mean_replicas"] is not None for w in scaled) > 0
    hours = summary["gpu_hours_held"] / summary["gpus_held"]
    assert summary["gpu_hours_autoscaled"] == pytest.approx(summary["gpu_hours_held"] + autoscaled * hours, abs=1.0)
    assert summary["right_sized_autoscaled_workloads"] == sum(
        w["scaling"]["mean_replicas_right_sized"] is not None for w in scaled) > 0
    assert summary["gpu_hours_right_sized_autoscaled"] == pytest.approx(summary["gpu_hours_needed"] + both * hours,
                                                                        abs=1.0)


def test_nan_and_inf_become_null(plan: Plan) -> None:
    rec = plan.recommendations[0]
    assert rec.recommended is not None
    bad = replace(rec, monthly_savings_usd=math.nan, memory_need_mib=Bound(1.0, math.nan, 2.0),
                  compute_need_frac=Bound(0.1, 0.2, math.inf),
                  recommended=replace(rec.recommended, device_memory_mib=math.inf))
    out = get_formatter("json")(replace(plan, recommendations=(bad,)), None)
    w = json.loads(out, parse_constant=_no_nan)["workloads"][0]
    assert w["monthly_savings_usd"] is None and w["memory_need_mib"] is None and w["compute_need_frac"] is None
    assert w["recommended"]["device_memory_mib"] is None
    Draft202012Validator(SCHEMA).validate(json.loads(out))


def _field_names(node: Any) -> set[str]:
    if isinstance(node, dict):
        names = set(node.get("properties", {}))
        return names.union(*(_field_names(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_field_names(v) for v in node))
    return set()


def test_json_md_documents_every_field() -> None:
    doc = (OUTPUTS / "JSON.md").read_text(encoding="utf-8")
    missing = sorted(n for n in _field_names(SCHEMA) if f"`{n}`" not in doc and f"`window.{n}`" not in doc)
    assert not missing, f"JSON.md does not document {missing}"


# -- CSV, Markdown, table ----------------------------------------------------------------------------

def test_csv_round_trips(plan: Plan, snap: Snapshot) -> None:
    rows = list(csv.DictReader(io.StringIO(get_formatter("csv")(plan, snap))))
    assert list(rows[0]) == list(COLUMNS) and len(rows) == len(plan.recommendations)
    by_name = {r["name"]: r for r in rows}
    assert by_name[pf.NASTY]["current_sharing"] == "exclusive"
    assert by_name["llama-3-8b-chat"]["recommended_mig_profile"] == "3g.40gb"
    assert by_name["detector-mig"]["recommended_sharing"] == ""  # no recommendation: empty, not "None"
    assert by_name["nightly-embed"]["monthly_savings_usd"] == "-1368.75"


def test_csv_defuses_spreadsheet_formulas(plan: Plan) -> None:
    rec = plan.recommendations[0]
    evil = replace(rec, workload=replace(rec.workload, ref=WorkloadRef("ns", "Deployment", "=HYPERLINK(1)")))
    rows = list(csv.DictReader(io.StringIO(get_formatter("csv")(replace(plan, recommendations=(evil,)), None))))
    assert rows[0]["name"] == "'=HYPERLINK(1)"


@pytest.mark.parametrize(("raw", "escaped"), [
    ('a<b>&"c"', 'a&lt;b&gt;&amp;"c"'), ("a|b", r"a\|b"), ("DCGM_FI", r"DCGM\_FI"), ("[x](y)", r"\[x\](y)"),
    ("- item", r"\- item"), ("1. first", r"1\. first"), ("two\nlines", "two lines"), ("$1 $2", r"\$1 \$2"),
])
def test_markdown_escaping(raw: str, escaped: str) -> None:
    assert md(raw) == escaped


def test_markdown_table_rows_keep_their_cells(plan: Plan, snap: Snapshot) -> None:
    rec = plan.recommendations[0]
    piped = replace(rec, workload=replace(rec.workload, ref=WorkloadRef("ns", "Deployment", "a|b")))
    out = get_formatter("markdown")(replace(plan, recommendations=(*plan.recommendations, piped)), snap)
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("| namespace |"))
    rows = lines[head:lines.index("", head)]  # the workloads table (the MIG plan has tables of its own)
    cells = {len(re.findall(r"(?<!\\)\|", row)) for row in rows}
    assert cells == {12}, "every row of the 11-column table has 12 unescaped pipes"
    assert ESCAPED_NASTY.replace("&quot;", '"') in out and "<b>" not in out


def test_narrow_table_is_ascii_and_fits(plan: Plan, snap: Snapshot) -> None:
    out = render_table(plan, snap, width=80)
    assert out.isascii()
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "2.00 ->" in out and "-$1,369" in out and "→" not in out


def test_table_prints_markup_literally(plan: Plan) -> None:
    rec = plan.recommendations[0]
    tagged = replace(rec, workload=replace(rec.workload, ref=WorkloadRef("ns", "Job", "[bold]x[/bold]")))
    out = render_table(replace(plan, recommendations=(tagged,), warnings=("[red]w[/red]",)), None, width=160)
    assert "Job/[bold]x[/bold]" in out and "warning: [red]w[/red]" in out


# -- HTML ------------------------------------------------------------------------------------------

EXTERNAL = re.compile(r"""(?:src|href|xlink:href|action|poster|data)\s*=\s*["']?\s*(?:[a-z][a-z0-9+.-]*:)?//"""
                      r"""|url\(\s*["']?\s*(?:[a-z][a-z0-9+.-]*:)?//|@import""", re.IGNORECASE)


def test_html_is_self_contained(page: str) -> None:
    assert not EXTERNAL.search(page), EXTERNAL.search(page)
    for tag in ("<script", "<link", "<img", "<iframe", "<object"):
        assert tag not in page.lower()
    assert "default-src 'none'" in page  # and the browser refuses anything external anyway


def test_html_has_one_chart_per_charted_workload(page: str, plan: Plan) -> None:
    forecasts = sum(1 for r in plan.recommendations if r.forecasts)
    # fleet chart + every workload's usage (all have series) + a demand-forecast chart where there is a forecast
    assert forecasts == 1 and page.count("<svg") == 1 + len(plan.recommendations) + forecasts
    ids = re.findall(r'\sid="([^"]+)"', page)
    assert len(ids) == len(set(ids)), "ids of inline SVGs must not collide in one page"


def test_html_escapes_user_data(page: str) -> None:
    assert ESCAPED_NASTY in page
    assert pf.NASTY not in page and "<b>" not in page


def test_html_charts_only_the_top_n(plan: Plan, snap: Snapshot) -> None:
    page = render_html(plan, snap, top_n=2)
    assert page.count("<svg") == 1 + 2 + 1  # fleet, the top two's usage, the forecast of the first (llama)
    assert page.count('<article class="workload"') == 2
    assert "3 more are listed in the table above without charts" in page
    assert page.count("<tr data-workload=") == len(plan.recommendations)  # every workload


def test_html_without_usage_series(plan: Plan, snap: Snapshot) -> None:
    no_series = render_html(plan, replace(snap, usage={}))
    # the fleet chart, and llama's forecast (its bands need no history); no usage chart at all
    assert no_series.count("<svg") == 2 and no_series.count("no usage series for this workload") == 5
    no_snapshot = render_html(plan, None)
    assert no_snapshot.count("<svg") == 2 and "rendered without a snapshot" in no_snapshot  # fleet + forecast


def test_html_chart_with_one_series_only(page: str) -> None:
    # the K80 workload has framebuffer data but no engine activity: one panel and a note saying so
    assert "no engine-activity series (gr_engine_active_frac) for this workload" in page


def test_html_is_small(page: str) -> None:
    # 5 charts of 2,016 points per line: downsampled to <= 500 and simplified, about 25 kB each
    assert len(page.encode()) < 250_000


# -- downsampling ----------------------------------------------------------------------------------

def _series(values: np.ndarray) -> pd.Series:
    return pd.Series(values, index=pd.date_range("2026-10-01", periods=len(values), freq="min", tz="UTC"))


def test_downsample_bounds_points_and_keeps_peaks() -> None:
    values = np.zeros(20_160)  # 14 days at 60 s
    values[12_345] = 99.0
    times, out = downsample(_series(values), "max")
    assert len(times) == len(out) <= MAX_POINTS
    assert out.max() == 99.0  # a one-minute peak survives the max
    _, mean = downsample(_series(values), "mean")
    assert mean.max() < 99.0


def test_downsample_keeps_gaps_and_short_series() -> None:
    values = np.r_[np.full(1_000, np.nan), np.ones(1_000)]
    _, out = downsample(_series(values), "max")
    assert np.isnan(out[0]) and out[-1] == 1.0
    times, short = downsample(_series(np.arange(10.0)), "max")
    assert len(times) == 10 and list(short) == list(np.arange(10.0))


# -- every format -----------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["table", "markdown", "html", "json"])
def test_right_sized_autoscaled_gpu_hours_show_only_when_computed(plan: Plan, snap: Snapshot, fmt: str) -> None:
    scaled = replace(plan, summary=replace(plan.summary, gpu_hours_autoscaled=1210.3, autoscaled_workloads=2))
    both = replace(scaled, summary=replace(scaled.summary, gpu_hours_right_sized_autoscaled=987.6,
                                           right_sized_autoscaled_workloads=2))
    shown, hidden = (" ".join(get_formatter(fmt)(p, snap).split()) for p in (both, scaled))
    figure = {"table": "right-sized too: ≥ 988", "markdown": "at least 987.6 GPU-hours", "html": "≥ 988",
              "json": '"gpu_hours_right_sized_autoscaled": 987.6'}[fmt]
    assert figure in shown and figure not in hidden
    if fmt == "html":  # the namespace chart's third bar comes with it
        assert ">right-sized + autoscaled (mean)</text>" in shown and "right-sized + autoscaled" not in hidden


@pytest.mark.parametrize("fmt", ["table", "markdown", "html", "json"])
def test_autoscaled_gpu_hours_show_only_when_computed(plan: Plan, snap: Snapshot, fmt: str) -> None:
    scaled = replace(plan, summary=replace(plan.summary, gpu_hours_autoscaled=1210.3, autoscaled_workloads=2))
    shown, hidden = (" ".join(get_formatter(fmt)(p, snap).split()) for p in (scaled, plan))  # the table wraps
    figure = {"table": "≥ 1,210 GPU-h", "markdown": "at least 1,210.3 GPU-hours", "html": "≥ 1,210",
              "json": '"gpu_hours_autoscaled": 1210.3'}[fmt]
    assert figure in shown and figure not in hidden
    if fmt != "json":
        assert "autoscal" not in hidden.lower().replace("autoscaler", "")


def test_html_charts_the_replicas_of_each_scaling_plan_with_a_mean() -> None:
    """Demo: every charted workload whose plan has a mean gets the replica chart; the others none."""
    from collectors.files import read_snapshot
    from policies.replicas import autoscaled_series, history_from_snapshot
    from recommender.core.settings import ForecastSettings, Settings
    from recommender.demo import demo_path
    from recommender.outputs.replicachart import replica_figure
    from recommender.pipeline.run import run_once

    demo = read_snapshot(demo_path())
    real = run_once(demo, Settings(forecast=ForecastSettings(max_workloads=3)), demo.end)
    with_mean = [r for r in real.recommendations if r.scaling is not None and r.scaling.mean_replicas is not None]
    without = [r for r in real.recommendations if r not in with_mean]
    assert with_mean and without
    page = render_html(real, demo)
    assert page.count('aria-label="replicas under the scaling plan"') == len(with_mean)
    for r in with_mean:
        assert r.scaling is not None
        held = autoscaled_series(history_from_snapshot(demo, r.workload), r.scaling)
        # what the chart draws: the plan on its (recommended) shape
        assert held is not None and held.mean() == pytest.approx(r.scaling.mean_on_shape)
        fig = replica_figure(r, demo)
        assert fig is not None
        step = next(line for line in fig.axes[0].lines if str(line.get_label()).startswith("autoscaled"))
        assert max(step.get_ydata()) == held.max()  # type: ignore[arg-type]
    assert all(replica_figure(r, demo) is None for r in without)
    assert replica_figure(with_mean[0], None) is None


def test_csv_carries_the_scaling_plan(plan: Plan, snap: Snapshot) -> None:
    from recommender.core import usage as m
    from recommender.core.plan import ScalingPlan

    scaling = ScalingPlan(metric=m.REQUEST_RATE, per_replica_capacity=10.0, target_per_replica=7.0, min_replicas=1,
                          max_replicas=9, recommended_replicas=3, activation_threshold=0.0, cooldown_s=300,
                          scale_to_zero=False, headroom_frac=0.3, cold_start_s=None, mean_replicas=1.23456)
    scaled = replace(plan, recommendations=(replace(plan.recommendations[0], scaling=scaling),
                                            *plan.recommendations[1:]))
    rows = list(csv.DictReader(io.StringIO(get_formatter("csv")(scaled, snap))))
    names = ("min_replicas", "max_replicas", "peak_replicas", "mean_replicas", "target_per_replica")
    assert [rows[0][f"scaling_{n}"] for n in names] == ["1", "9", "3", "1.2346", "7.0"]
    assert all(r["scaling_mean_replicas"] == "" for r in rows[1:])
