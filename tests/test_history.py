"""Short history: provisional recommendations between a floor of usable data and ``policy.min_history_s``,
nothing below the floor, and never scale to zero on less than the full minimum."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from collectors.files import read_snapshot
from policies.estimators import confidence_multiplier
from recommender.core import usage as m
from recommender.core.inventory import VllmArgs
from recommender.core.plan import Recommendation
from recommender.core.settings import ForecastSettings, PolicySettings, Settings
from recommender.core.usage import Snapshot
from recommender.demo import demo_path
from recommender.pipeline.run import run_once
from tests.builders import END, snapshot, whole_gpu, workload

H = 3600.0
DAY_H = 23 / 24  # builders.snapshot(days=...): 23 h is 138 steps of 600 s = 82,800 s of history
PROVISIONAL = "provisional: 23.0 h of history, under the 24 h a firm recommendation needs: upper bounds widened x2.0"
RT = {"rightsizer.io/class": "real-time"}
VLLM = VllmArgs(model="meta-llama/Meta-Llama-3-8B-Instruct", gpu_memory_utilization=0.9, max_model_len=8192)


def _fleet(days: float) -> Snapshot:
    """Three clean workloads, as the issue's pods: each under 12% busy, under 47 GiB of an 80 GB GPU."""
    n = int(days * 86_400 / 600)
    wave = np.sin(np.arange(n) * 2 * np.pi / 144)  # one cycle a day of 600 s steps
    ws = [workload("embed", whole_gpu(), annotations=RT), workload("rank", whole_gpu(), annotations=RT),
          workload("chat", whole_gpu(vllm=VLLM), kv_capacity_tokens=300_000.0, served_model=VLLM.model,
                   annotations=RT)]
    series = {
        m.FB_USED_MIB: {"embed": 30_000 + 2_000 * wave, "rank": 9_000 + 500 * wave, "chat": 16_000 + 37_500.0},
        m.GR_ENGINE_ACTIVE_FRAC: {"embed": 0.08 + 0.03 * wave, "rank": 0.05 + 0.02 * wave, "chat": 0.10},
        m.KV_USAGE_FRAC: {"chat": 0.20},
    }
    return snapshot(ws, series, days=days)


def test_23_hours_of_clean_data_gives_provisional_recommendations() -> None:
    snap = _fleet(DAY_H)
    plan = run_once(snap, Settings(), END)
    full = {r.ref.name: r for r in run_once(_fleet(14), Settings(), END).recommendations}
    for rec in plan.recommendations:
        assert rec.history_s == pytest.approx(23 * H)
        assert rec.recommended is not None, rec.reasons  # was "no recommendation: not enough history"
        assert rec.provisional and rec.reasons[0].startswith(PROVISIONAL)
        assert rec.confidence <= 0.25 and rec.risk != "low"  # low confidence, never a low-risk call
        assert not full[rec.ref.name].provisional and full[rec.ref.name].confidence > rec.confidence
    embed = next(r for r in plan.recommendations if r.ref.name == "embed")
    assert embed.memory_need_mib is not None
    # upper = peak 32,000 MiB x 1.15 margin x (1 + 24/23) for 23 h of history = 75,200 MiB: widened as with_confidence
    # widens every short history
    assert embed.memory_need_mib.upper == pytest.approx(32_000 * 1.15 * confidence_multiplier(23 * H), rel=1e-3)
    assert confidence_multiplier(23 * H) == pytest.approx(1 + 24 / 23)


def test_below_the_floor_no_recommendation_says_how_much_history_each_needs() -> None:
    plan = run_once(_fleet(5 / 24), Settings(), END)  # 5 h < the 6 h floor
    for rec in plan.recommendations:
        assert rec.recommended is None and not rec.provisional
        assert rec.reasons[0] == ("no recommendation: not enough history (5.0 h of usage, need 6 h for a "
                                  "provisional recommendation, 24 h for a firm one)")


def test_the_floor_is_a_setting_and_never_above_the_minimum() -> None:
    lower = Settings(policy=PolicySettings(provisional_min_history_s=4 * H))
    assert all(r.provisional for r in run_once(_fleet(5 / 24), lower, END).recommendations)
    off = Settings(policy=PolicySettings(provisional_min_history_s=24 * H))  # floor = minimum: no provisional band
    assert all(r.recommended is None for r in run_once(_fleet(DAY_H), off, END).recommendations)
    short_min = Settings(policy=PolicySettings(min_history_s=4 * H))  # the minimum under the 6 h floor: it rules
    firm = run_once(_fleet(5 / 24), short_min, END).recommendations
    assert all(r.recommended is not None and not r.provisional for r in firm)


def test_scale_to_zero_still_needs_the_full_minimum() -> None:
    def idle(days: float) -> Recommendation:
        w = workload("idle", whole_gpu(replicas=2))
        snap = snapshot([w], {m.FB_USED_MIB: {"idle": 600.0}, m.GR_ENGINE_ACTIVE_FRAC: {"idle": 0.0},
                              m.REQUESTS_RUNNING: {"idle": 0.0}}, days=days)
        return run_once(snap, Settings(), END).recommendations[0]

    short = idle(DAY_H)  # idle for all of its 23 h: sized, provisionally, never taken to zero
    assert short.recommended is not None and short.recommended.replicas == 2 and short.provisional
    assert not any("scale to zero" in r for r in short.reasons)
    week = idle(7)
    assert week.recommended is not None and week.recommended.replicas == 0 and not week.provisional


def _last(snap: Snapshot, hours: float) -> Snapshot:
    """The demo cut to its last ``hours``: what a report over a young cluster reads."""
    cut = pd.Timestamp(snap.end) - pd.Timedelta(hours=hours)
    usage = {k: f[f.index > cut] for k, f in snap.usage.items()}
    return replace(snap, usage=usage, start=cut.to_pydatetime())


def test_a_day_of_the_demo_recommends_provisionally_and_says_so() -> None:
    demo = read_snapshot(demo_path())
    plan = run_once(_last(demo, 23), Settings(forecast=ForecastSettings(enabled=False)), demo.end)
    made = [r for r in plan.recommendations if r.recommended is not None]
    assert len(made) >= len(plan.recommendations) - 2, [r.reasons[0] for r in plan.recommendations]
    for rec in made:
        assert rec.provisional and rec.reasons[0].startswith(PROVISIONAL)
        assert rec.confidence <= 0.25
    unknown = [r for r in plan.recommendations if r.recommended is None]
    assert all(r.reasons[0].startswith("no recommendation: unknown GPU model") for r in unknown)


def test_every_format_marks_a_provisional_recommendation() -> None:
    import csv
    import io
    import json

    from jsonschema import Draft202012Validator

    from recommender.outputs import get_formatter
    from recommender.outputs.table import render_table
    from tests import planfixture as pf
    from tests.test_outputs_formats import SCHEMA, strict

    recs = tuple(replace(r, provisional=True, confidence=0.12) if r.ref.name == "llama-3-8b-chat" else r
                 for r in pf.recommendations())
    plan = replace(pf.plan(), recommendations=recs)
    snap = pf.snapshot()
    doc = json.loads(get_formatter("json")(plan, snap))
    Draft202012Validator(strict(SCHEMA)).validate(doc)
    assert {w["name"]: w["provisional"] for w in doc["workloads"]}["llama-3-8b-chat"] is True
    assert sum(w["provisional"] for w in doc["workloads"]) == 1
    rows = {r["name"]: r for r in csv.DictReader(io.StringIO(get_formatter("csv")(plan, snap)))}
    assert rows["llama-3-8b-chat"]["provisional"] == "true" and rows["detector-mig"]["provisional"] == "false"
    assert "| 12% (provisional) |" in get_formatter("markdown")(plan, snap)
    assert '<td class="num">12% (provisional)</td>' in get_formatter("html")(plan, snap)
    for width in (160, 80):  # wide and narrow layouts: the mark under the confidence, explained in the caption
        text = render_table(plan, snap, width=width)
        assert "prov.: provisional, on less history than --min-history" in " ".join(text.split())
        assert text.count("prov.") == 2, text
    assert "prov." not in render_table(pf.plan(), snap)  # no provisional row: no mark, no caption
