"""run_once gives every workload a class and forecasts its demand, within the bounds the settings set."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import numpy as np
import pytest

from recommender.analysis.demand import demand_series
from recommender.core import usage as m
from recommender.core.inventory import VllmArgs
from recommender.core.plan import Plan, Recommendation, WorkloadClass
from recommender.core.settings import ForecastSettings, Settings
from recommender.pipeline.run import run_once
from tests.builders import END, index, snapshot, whole_gpu, workload

DAYS = 4
N = len(index(DAYS))
T = np.arange(N, dtype=float)
DAILY = 5 + 3 * np.sin(2 * np.pi * T * 600 / 86_400)  # requests/s, one cycle a day


def plan(forecast: ForecastSettings | None = None, days: float = DAYS) -> Plan:
    n = len(index(days))
    chat = workload("chat", whole_gpu(vllm=VllmArgs("meta-llama/Meta-Llama-3-8B-Instruct", 0.9, 8192)),
                    kv_capacity_tokens=400_000)
    job = workload("embed", whole_gpu(), kind="Job")
    snap = snapshot([chat, job], {
        m.FB_USED_MIB: {"chat": 70_000.0, "embed": 20_000.0},
        m.GR_ENGINE_ACTIVE_FRAC: {"chat": 0.3, "embed": 0.6},
        m.REQUEST_RATE: {"chat": DAILY[:n], "embed": np.full(n, 1.0)},
        m.PROMPT_TOKENS_RATE: {"chat": DAILY[:n] * 500},
        m.GENERATION_TOKENS_RATE: {"chat": DAILY[:n] * 200},
        m.KV_USAGE_FRAC: {"chat": DAILY[:n] / 20},
    }, days=days)
    return run_once(snap, Settings(forecast=forecast or ForecastSettings()), END)


def rec(p: Plan, name: str) -> Recommendation:
    return next(r for r in p.recommendations if r.ref.name == name)


def test_every_workload_has_a_class() -> None:
    p = plan()
    job = rec(p, "embed").classification
    assert job is not None and (job.workload_class, job.source) == (WorkloadClass.BATCH, "rule")
    chat = rec(p, "chat").classification
    assert chat is not None and chat.evidence and 0 < chat.confidence <= 1
    assert {"classify", "forecast"} <= set(p.timings_s)


def test_demand_forecasts_cover_the_horizon_with_bands() -> None:
    forecasts = {f.metric: f for f in rec(plan(), "chat").forecasts}
    assert list(forecasts) == [m.REQUEST_RATE, m.TOKENS_RATE, m.KV_TOKENS]
    rate = forecasts[m.REQUEST_RATE].frame
    # 24 h at the snapshot's 600 s step = 144 steps, starting one step after the window's end
    assert len(rate) == 144 and rate.index[0] == END + (rate.index[1] - rate.index[0])
    assert (rate["lo_95"] <= rate["lo_80"]).all() and (rate["lo_80"] <= rate["mean"]).all()
    assert (rate["mean"] <= rate["hi_80"]).all() and (rate["hi_80"] <= rate["hi_95"]).all()
    # the daily wave between 2 and 8 requests/s continues: the forecast stays within that range, give or take
    assert rate["mean"].min() >= 1.5 and rate["mean"].max() <= 8.5
    # tokens/s = prompt + generation = 700 x the rate; KV tokens = usage x the 400,000-token pool
    assert forecasts[m.TOKENS_RATE].frame["mean"].max() == pytest.approx(700 * rate["mean"].max(), rel=0.15)
    assert forecasts[m.KV_TOKENS].frame["mean"].max() == pytest.approx(400_000 / 20 * rate["mean"].max(), rel=0.15)


def test_derived_series() -> None:
    chat = workload("chat", whole_gpu(), kv_capacity_tokens=1000)
    snap = snapshot([chat], {m.PROMPT_TOKENS_RATE: {"chat": 3.0}, m.GENERATION_TOKENS_RATE: {"chat": 2.0},
                             m.KV_USAGE_FRAC: {"chat": 0.25}}, days=1)
    assert (demand_series(snap, chat, m.TOKENS_RATE) == 5.0).all()  # 3 + 2
    assert (demand_series(snap, chat, m.KV_TOKENS) == 250.0).all()  # 0.25 x 1,000
    assert demand_series(snap, chat, m.REQUEST_RATE) is None
    no_pool = workload("chat", whole_gpu())
    assert demand_series(snap, no_pool, m.KV_TOKENS) is None


def test_forecasts_are_bounded_and_can_be_switched_off() -> None:
    p = plan(ForecastSettings(max_workloads=1))  # chat holds 1 GPU, embed 1: the tie goes by name → chat
    assert rec(p, "chat").forecasts and not rec(p, "embed").forecasts
    assert any("--forecast-max" in r for r in rec(p, "embed").reasons)
    off = plan(ForecastSettings(enabled=False))
    assert all(not r.forecasts for r in off.recommendations)
    assert not any("forecast" in r for x in off.recommendations for r in x.reasons)


def test_a_short_history_still_forecasts_with_a_wider_band_and_says_so() -> None:
    f = rec(plan(days=0.25), "chat").forecasts[0]  # 6 h: no daily season to learn
    assert any("widened" in r for r in f.reasons)
    full = rec(plan(), "chat").forecasts[0]
    assert (f.frame["hi_95"] - f.frame["lo_95"]).mean() > (full.frame["hi_95"] - full.frame["lo_95"]).mean()


def test_a_loop_carries_a_lower_bound_capacity_from_its_previous_plan() -> None:
    """The controller passes its last plan: a capacity that is only a lower bound keeps the previous one where
    that was higher (under our own autoscaling the rates served sit at the last target)."""
    chat = workload("chat", whole_gpu())
    snap = snapshot([chat], {m.REQUEST_RATE: {"chat": DAILY}, m.TTFT_P95_S: {"chat": 0.5}}, days=DAYS)
    settings = Settings(forecast=ForecastSettings(enabled=False))
    first = run_once(snap, settings, END)
    was = rec(first, "chat").scaling
    assert was is not None and was.capacity_source == "lower bound"  # never missed the objective: no knee
    raised = replace(was, per_replica_capacity=2 * was.per_replica_capacity, basis_capacity=2 * was.measured_capacity)
    before = replace(first, recommendations=tuple(replace(r, scaling=raised) for r in first.recommendations))
    again = rec(run_once(snap, settings, END, previous=before), "chat").scaling
    assert again is not None and again.per_replica_capacity == pytest.approx(2 * was.per_replica_capacity)
    other = replace(before, recommendations=tuple(replace(r, workload=replace(r.workload, ref=replace(
        r.ref, name="other"))) for r in before.recommendations))
    alone = rec(run_once(snap, settings, END, previous=other), "chat").scaling  # another workload's plan: ignored
    assert alone is not None and alone.per_replica_capacity == pytest.approx(was.per_replica_capacity)


def test_a_previous_plan_from_before_the_replicas_changed_shape_is_not_carried() -> None:
    """Its capacity was per replica of the shape before (a slice serves fewer requests than a whole GPU)."""
    since = END - timedelta(days=1)
    chat = workload("chat", whole_gpu(), shape_since=since)
    snap = snapshot([chat], {m.REQUEST_RATE: {"chat": DAILY}, m.TTFT_P95_S: {"chat": 0.5}}, days=DAYS)
    settings = Settings(forecast=ForecastSettings(enabled=False))
    first = run_once(snap, settings, END)
    was = rec(first, "chat").scaling
    assert was is not None and was.capacity_source == "lower bound"
    raised = replace(was, per_replica_capacity=2 * was.per_replica_capacity, basis_capacity=2 * was.measured_capacity)
    after = replace(first, recommendations=tuple(replace(r, scaling=raised) for r in first.recommendations))
    carried = rec(run_once(snap, settings, END, previous=after), "chat").scaling
    assert carried is not None and carried.per_replica_capacity == pytest.approx(2 * was.per_replica_capacity)
    before = replace(after, generated_at=since - timedelta(minutes=5))
    fresh = rec(run_once(snap, settings, END, previous=before), "chat").scaling
    assert fresh is not None and fresh.per_replica_capacity == pytest.approx(was.per_replica_capacity)
    assert any(r.startswith("capacity and error budget read from 2026-10-31 00:00 UTC on") for r in fresh.reasons)
