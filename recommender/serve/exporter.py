"""Prometheus ``/metrics``: a custom collector that renders the latest plan at scrape time.

Registered on a registry the caller passes in (never the global default), so two servers or two
tests never share series. Labels ``namespace``, ``kind``, ``workload`` name a workload everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import pandas as pd
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from recommender.core.plan import Plan, Recommendation
from recommender.serve.lookup import Lookup
from recommender.serve.targets import PlanState, TargetError, forecast_rows, plan_state, target_for

WL = ["namespace", "kind", "workload"]


def _wl(rec: Recommendation) -> list[str]:
    return [rec.ref.namespace, rec.ref.kind, rec.ref.name]


class PlanCollector(Collector):
    """Plan age and staleness, fleet totals, and per-workload recommendations and forecast demand."""

    def __init__(self, lookup: Lookup) -> None:
        self.lookup = lookup

    def collect(self) -> Iterator[GaugeMetricFamily | InfoMetricFamily]:
        published, age_s = self.lookup.store.latest(), self.lookup.store.age_s()
        has = GaugeMetricFamily("rightsizer_plan_available", "1 once a plan has been published")
        has.add_metric([], float(published is not None))
        yield has
        if published is None or age_s is None:
            return
        state = plan_state(age_s, self.lookup.settings)
        yield _gauge("rightsizer_plan_age_seconds", "Seconds since the latest plan was published", age_s)
        yield _gauge("rightsizer_plan_stale", "1 when the plan is older than the stale warning age",
                     float(state is not PlanState.FRESH))
        yield _gauge("rightsizer_plan_fallback", "1 when the scaler serves safe values (plan past the fallback age)",
                     float(state is PlanState.FALLBACK))
        yield _gauge("rightsizer_plan_generated_timestamp_seconds", "Plan clock at generation (unix seconds)",
                     published.plan.generated_at.timestamp())
        yield from fleet_metrics(published.plan)
        yield from workload_metrics(published.plan)
        yield from scaling_metrics(self.lookup, published.plan, age_s)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def fleet_metrics(plan: Plan) -> Iterator[GaugeMetricFamily]:
    s = plan.summary
    gpus = GaugeMetricFamily("rightsizer_fleet_gpu_equivalents", "GPU equivalents held today and needed after "
                             "(right_sized_autoscaled: on average, with the scaling plans on the recommended shapes)",
                             labels=["state"])
    gpus.add_metric(["held"], s.gpus_held)
    gpus.add_metric(["needed"], s.gpus_needed)
    if s.gpu_hours_right_sized_autoscaled is not None:
        gpus.add_metric(["right_sized_autoscaled"], sum(r.gpus_right_sized_autoscaled_or_needed
                                                        for r in plan.recommendations))
    yield gpus
    yield _gauge("rightsizer_fleet_monthly_savings_usd", "Money the plan saves a month, USD", s.monthly_savings_usd)


def workload_metrics(plan: Plan) -> Iterator[GaugeMetricFamily | InfoMetricFamily]:
    """What each workload should get: GPU equivalents, MIG profile, MPS share, vLLM memory, savings."""
    gpus = GaugeMetricFamily("rightsizer_gpu_equivalents", "GPU equivalents (all replicas) held and recommended "
                             "(right_sized_autoscaled: on average, the recommended shape under the scaling plan)",
                             labels=[*WL, "state"])
    mig = InfoMetricFamily("rightsizer_recommended_mig_profile", "Recommended MIG profile per replica",
                           labels=WL)
    mps = GaugeMetricFamily("rightsizer_recommended_mps_active_thread_percent", "Recommended MPS thread %",
                            labels=WL)
    vllm = GaugeMetricFamily("rightsizer_recommended_vllm_gpu_memory_utilization",
                             "Recommended vLLM --gpu-memory-utilization", labels=WL)
    savings = GaugeMetricFamily("rightsizer_monthly_savings_usd", "Money this recommendation saves a month, USD",
                                labels=WL)
    for rec in plan.recommendations:
        gpus.add_metric([*_wl(rec), "held"], rec.gpus_held)
        gpus.add_metric([*_wl(rec), "recommended"], rec.gpus_needed)
        if (both := rec.gpus_right_sized_autoscaled) is not None:
            gpus.add_metric([*_wl(rec), "right_sized_autoscaled"], both)
        if rec.monthly_savings_usd is not None:
            savings.add_metric(_wl(rec), rec.monthly_savings_usd)
        after = rec.recommended
        if after is None:
            continue
        if after.mig_profile:
            mig.add_metric(_wl(rec), {"profile": after.mig_profile, "gpu_model": after.gpu_model or "unknown",
                                      "count": str(after.mig_count)})
        if after.mps_active_thread_pct is not None:
            mps.add_metric(_wl(rec), after.mps_active_thread_pct)
        if after.vllm is not None and after.vllm.gpu_memory_utilization is not None:
            vllm.add_metric(_wl(rec), after.vllm.gpu_memory_utilization)
    yield from (gpus, mig, mps, vllm, savings)


def scaling_metrics(lookup: Lookup, plan: Plan, age_s: float) -> Iterator[GaugeMetricFamily]:
    """Replicas, the scaler's value and forecast demand now, one series per band (``mean``, ``hi_80``, ...)."""
    replicas = GaugeMetricFamily("rightsizer_recommended_replicas", "Replicas: min, max and recommended",
                                 labels=[*WL, "bound"])
    value = GaugeMetricFamily("rightsizer_scaler_value", "What KEDA/the HPA is served, in the metric's units",
                              labels=[*WL, "metric"])
    target = GaugeMetricFamily("rightsizer_scaler_target_per_replica", "AverageValue target per replica",
                               labels=[*WL, "metric"])
    active = GaugeMetricFamily("rightsizer_scaler_active", "1 when the scaler says active", labels=WL)
    demand = GaugeMetricFamily("rightsizer_forecast_demand", "Forecast demand at now, by band",
                               labels=[*WL, "metric", "band"])
    now = plan.generated_at.timestamp() + age_s
    for rec in plan.recommendations:
        for f in rec.forecasts:
            for band, v in forecast_now(f.frame, now).items():
                demand.add_metric([*_wl(rec), f.metric, band], v)
        try:
            t = target_for(plan, rec, age_s, lookup.settings)
        except TargetError:
            continue
        for bound, n in (("min", t.min_replicas), ("max", t.max_replicas), ("recommended", t.recommended_replicas)):
            replicas.add_metric([*_wl(rec), bound], n)
        value.add_metric([*_wl(rec), t.metric], t.value)
        target.add_metric([*_wl(rec), t.metric], t.target_per_replica)
        active.add_metric(_wl(rec), float(t.active))
    yield from (replicas, value, target, active, demand)


def forecast_now(frame: pd.DataFrame, now_unix: float) -> dict[str, float]:
    """The forecast row that holds ``now`` (the first before it starts), finite values only; empty once
    it has run out."""
    rows = forecast_rows(frame, pd.Timestamp(now_unix, unit="s", tz="UTC"))
    if rows is None:
        return {}
    row = frame.iloc[rows[0]]
    return {str(k): float(v) for k, v in row.items() if isinstance(v, int | float) and math.isfinite(v)}
