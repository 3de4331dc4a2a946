"""The pure middle of the servers: plan → target, staleness, identity, Quantity, selectors, APIService."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from recommender.core import usage as m
from recommender.core.inventory import WorkloadRef
from recommender.serve import extmetrics
from recommender.serve.apiservice import conflict
from recommender.serve.ratelimit import RateLimiter, budget, client_of_peer
from recommender.serve.settings import ServeSettings
from recommender.serve.targets import ErrorKind, PlanState, TargetError, find_recommendation, target_for
from tests import servefixture as sf

LONG = ServeSettings(stale_after_s=1e6, fallback_after_s=2e6)  # never stale: isolates the forecast logic


def _target(age_s: float, settings: ServeSettings = LONG, workload: str = "Deployment/llama-3-8b-chat",
            namespace: str = "llm", **scaling: object):  # type: ignore[no-untyped-def]
    plan = sf.plan(**scaling)
    return target_for(plan, find_recommendation(plan, namespace, workload), age_s, settings)


@pytest.mark.parametrize(("age_s", "kw", "settings", "demand"), [
    # plan made at END; first forecast row END+1h: mean 12, hi_80 14 → max(14, 12) = 14
    (0, {}, LONG, 14.0),
    # END+6h is row k=5: mean 12 + 4 sin(2π·5/24) = 15.864, hi_80 17.864; 600 s ahead stays in that row
    (6 * 3600, {}, LONG, 12 + 4 * np.sin(2 * np.pi * 5 / 24) + 2),
    # a 2 h cold start looks at rows k=5..7: the peak k=6 has hi_80 12 + 4 + 2 = 18
    (6 * 3600, {"cold_start_s": 7200.0}, LONG, 18.0),
    # hi_95 = mean + 3.5 = 15.5; a band the forecast lacks falls back to its widest (hi_95)
    (0, {}, ServeSettings(stale_after_s=1e6, fallback_after_s=2e6, band="hi_95"), 15.5),
    (0, {}, ServeSettings(stale_after_s=1e6, fallback_after_s=2e6, band="hi_99"), 15.5),
    (0, {}, ServeSettings(stale_after_s=1e6, fallback_after_s=2e6, band="mean"), 12.0),
])
def test_demand_is_the_band_over_the_cold_start_horizon(age_s: float, kw: dict[str, object],
                                                        settings: ServeSettings, demand: float) -> None:
    t = _target(age_s, settings, **kw)
    assert t.demand == pytest.approx(demand)
    assert t.value == pytest.approx(demand)  # min_replicas 0: no floor
    assert t.active and t.state is PlanState.FRESH
    assert t.desired_replicas == pytest.approx(demand / 8)


def test_min_replicas_floor_the_value() -> None:
    # demand 14 < min 3 × target 8 = 24
    assert _target(0, min_replicas=3).value == pytest.approx(24.0)


def test_idle_forecast_deactivates_a_scale_to_zero_workload() -> None:
    t = _target(0, workload="nightly-embed", namespace="batch")
    assert (t.demand, t.value, t.active) == (0.0, 0.0, False)


def test_idle_but_not_scale_to_zero_stays_active() -> None:
    plan = sf.plan()
    rec = find_recommendation(plan, "batch", "Job/nightly-embed")
    rec = replace(rec, scaling=sf.scaling(scale_to_zero=False, min_replicas=1))
    t = target_for(plan, rec, 0, LONG)
    assert t.active and t.value == pytest.approx(8.0)  # 1 replica × 8


@pytest.mark.parametrize(("age_s", "value"), [
    (1801.0, 14.0),  # END+30m: still before the first row (hi_80 14)
    (7000.0, 12 + 4 * np.sin(2 * np.pi / 24) + 2),  # END+1h57m, 600 s ahead reaches row k=1: hi_80 15.035
])
def test_stale_plan_is_still_served(age_s: float, value: float) -> None:
    t = _target(age_s, ServeSettings())  # stale after 1800 s, fallback after 7200 s
    assert t.state is PlanState.STALE and t.value == pytest.approx(value)


def test_fallback_never_scales_to_zero() -> None:
    # the idle workload would be inactive with value 0; past the fallback age: active, max(1, 0, 1) × 8 = 8
    t = _target(7201.0, ServeSettings(), workload="nightly-embed", namespace="batch")
    assert t.state is PlanState.FALLBACK and t.active and t.value == pytest.approx(8.0)
    # llama: max(recommended 3, min 0, 1) × 8 = 24
    assert _target(7201.0, ServeSettings()).value == pytest.approx(24.0)


def test_forecast_run_out_gives_the_safe_value() -> None:
    t = _target(25 * 3600, workload="nightly-embed", namespace="batch")  # the 24 h forecast ended at END+25h
    assert t.active and t.value == pytest.approx(8.0) and t.demand is None


def test_non_finite_forecast_gives_the_safe_value() -> None:
    plan = sf.plan()
    rec = find_recommendation(plan, "llm", "llama-3-8b-chat")
    broken = replace(rec.forecasts[0], frame=rec.forecasts[0].frame * np.nan)
    t = target_for(plan, replace(rec, forecasts=(broken,)), 0, LONG)
    assert t.active and t.value == pytest.approx(24.0)


@pytest.mark.parametrize(("recommended", "active", "value"), [(3, True, 24.0), (0, False, 0.0)])
def test_without_a_forecast_the_plans_replicas_are_served(recommended: int, active: bool, value: float) -> None:
    t = _target(0, metric=m.REQUESTS_WAITING, recommended_replicas=recommended)  # forecast is of request rate
    assert (t.active, t.value) == (active, value)


def test_a_forecast_the_plan_did_not_act_on_is_not_served_either() -> None:
    """On too little history the plan sizes on the observed rate (``demand_source`` observed); serving its
    widened forecast ahead would have the HPA follow what the plan chose not to."""
    t = _target(0, recommended_replicas=3, demand_source="observed")
    assert t.demand is None and t.value == pytest.approx(24.0) and t.active  # 3 x target 8, not the band's 14
    assert "acted on yet" in t.reason
    assert _target(0, recommended_replicas=3).demand == pytest.approx(14.0)  # acted on: the band


@pytest.mark.parametrize(("namespace", "workload", "kind", "needle"), [
    ("llm", "nope", ErrorKind.NOT_FOUND, "no workload 'nope'"),
    ("other", "llama-3-8b-chat", ErrorKind.NOT_FOUND, "namespace 'other'"),
    ("llm", "StatefulSet/llama-3-8b-chat", ErrorKind.NOT_FOUND, "no workload"),
    ("llm", "a/b/c", ErrorKind.INVALID, "not 'Kind/name' or 'name'"),
    ("llm", "", ErrorKind.INVALID, "not 'Kind/name'"),
    ("", "llama-3-8b-chat", ErrorKind.INVALID, "namespace is empty"),
    ("vision", "detector-mig", ErrorKind.NO_SCALING, "no scaling plan"),
])
def test_bad_identity_is_a_clear_error(namespace: str, workload: str, kind: ErrorKind, needle: str) -> None:
    with pytest.raises(TargetError, match=needle) as info:
        _target(0, workload=workload, namespace=namespace)
    assert info.value.kind is kind


def test_kind_is_case_insensitive_and_names_across_kinds_are_ambiguous() -> None:
    assert _target(0, workload="deployment/llama-3-8b-chat").ref.kind == "Deployment"
    plan = sf.plan()
    rec = find_recommendation(plan, "llm", "llama-3-8b-chat")
    twin = replace(rec, workload=replace(rec.workload, ref=WorkloadRef("llm", "StatefulSet", rec.ref.name)))
    plan = replace(plan, recommendations=(*plan.recommendations, twin))
    with pytest.raises(TargetError, match="ambiguous"):
        find_recommendation(plan, "llm", "llama-3-8b-chat")
    assert find_recommendation(plan, "llm", "StatefulSet/llama-3-8b-chat") is twin


def test_a_non_positive_target_is_refused() -> None:
    with pytest.raises(TargetError, match="no positive target") as info:
        _target(0, target_per_replica=0.0)
    assert info.value.kind is ErrorKind.NO_SCALING


def test_settings_refuse_inconsistent_values() -> None:
    with pytest.raises(ValueError, match="fallback_after_s"):
        ServeSettings(stale_after_s=100, fallback_after_s=50)
    with pytest.raises(ValueError, match="need tls_cert"):
        ServeSettings(external_metrics=True)


@pytest.mark.parametrize(("value", "text"), [
    (1.5, "1500m"), (2.0, "2"), (14.0, "14"), (1.75, "1750m"), (0.0004, "1m"),  # rounded up to a milli
    (0.0, "0"), (-3.0, "0"), (float("nan"), "0"), (float("inf"), "0"),
])
def test_quantity(value: float, text: str) -> None:
    assert extmetrics.quantity(value) == text


def test_selector() -> None:
    sel = extmetrics.parse_selector("workload=llama, kind==Deployment,scaledobject.keda.sh/name=x")
    assert sel == {"workload": "llama", "kind": "Deployment", "scaledobject.keda.sh/name": "x"}
    assert extmetrics.workload_of(sel) == "Deployment/llama"
    with pytest.raises(TargetError, match="key=value"):
        extmetrics.parse_selector("workload in (a,b)")
    with pytest.raises(TargetError, match="must name the workload"):
        extmetrics.workload_of(extmetrics.parse_selector(""))


@pytest.mark.parametrize(("obj", "needle"), [
    (None, None),
    ({"spec": {"service": {"name": "gpu-rightsizer", "namespace": "gpu-rightsizer"}}}, None),
    ({"spec": {"service": {"name": "keda-metrics-apiserver", "namespace": "keda"}}}, "keda/keda-metrics-apiserver"),
    ({"spec": {"service": {"name": "gpu-rightsizer", "namespace": "other"}}}, "other/gpu-rightsizer"),
    ({"spec": {"group": "external.metrics.k8s.io"}}, "served locally"),
])
def test_apiservice_conflict(obj: dict[str, object] | None, needle: str | None) -> None:
    why = conflict(obj, "gpu-rightsizer", "gpu-rightsizer")
    assert why is None if needle is None else (why is not None and needle in why)


def test_rate_limiter_refills_on_its_clock() -> None:
    clock = sf.FakeClock()
    limiter = RateLimiter(rate_per_s=2.0, burst=2, clock=clock)
    assert [limiter.allow("a") for _ in range(3)] == [True, True, False]
    assert limiter.allow("b")  # buckets are per client
    clock.t += 0.5  # 0.5 s × 2/s = 1 token
    assert [limiter.allow("a"), limiter.allow("a")] == [True, False]


def test_a_resized_bucket_keeps_its_tokens_up_to_the_new_burst() -> None:
    clock = sf.FakeClock()
    limiter = RateLimiter(rate_per_s=1.0, burst=3, clock=clock)
    assert [limiter.allow("a") for _ in range(4)] == [True, True, True, False]
    limiter.resize(10.0, 5)
    clock.t += 1.0  # 10 tokens at the new rate, held to the new burst of 5
    assert [limiter.allow("a") for _ in range(6)] == [True] * 5 + [False]
    with pytest.raises(ValueError):
        limiter.resize(0.0, 5)


@pytest.mark.parametrize(("workloads", "expected"), [(0, (20.0, 100)), (10, (20.0, 120)), (200, (100.0, 500))])
def test_budget_grows_with_the_scaled_workloads(workloads: int, expected: tuple[float, int]) -> None:
    assert budget(20.0, 100, 0.5, workloads) == expected


@pytest.mark.parametrize(("peer", "host"), [("ipv4:10.0.0.1:5000", "10.0.0.1"), ("ipv6:[::1]:5000", "::1"),
                                             ("unix:/tmp/s", "unix:/tmp/s")])
def test_client_of_peer(peer: str, host: str) -> None:
    assert client_of_peer(peer) == host


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_any_index_resolution_and_a_fractional_age(unit: str) -> None:
    from recommender.serve.exporter import forecast_now

    plan = sf.plan()
    rec = find_recommendation(plan, "llm", "llama-3-8b-chat")
    frame = rec.forecasts[0].frame
    frame = frame.set_axis(frame.index.as_unit(unit))
    t = target_for(plan, replace(rec, forecasts=(replace(rec.forecasts[0], frame=frame),)), 0.123456789, LONG)
    assert t.demand == pytest.approx(14.0)
    assert forecast_now(frame, sf.pf.END.timestamp() + 0.5)["hi_80"] == pytest.approx(14.0)
    naive = frame.set_axis(frame.index.tz_convert(None))  # a naive index is read as UTC
    assert forecast_now(naive, sf.pf.END.timestamp() + 0.5)["mean"] == pytest.approx(12.0)
