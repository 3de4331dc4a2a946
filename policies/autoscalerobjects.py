"""The autoscaler objects a scaling plan renders to, in one place for the reports and the controller: KEDA's
ScaledObject fragment (its Prometheus triggers, their thresholds and the arrival-rate query), the HPA
``behavior``, an HPA on this project's external metrics adapter, and the Prometheus address the generated
KEDA triggers read (never with credentials). Thresholds in the plan's units (req/s or requests waiting per
replica), windows in seconds. Pure: no I/O."""

from __future__ import annotations

import math
from urllib.parse import urlsplit, urlunsplit

from recommender.core.advice import AutoscalerObjects
from recommender.core.plan import PLACEHOLDER_PROMETHEUS, PrometheusAddress, ScalingPlan
from recommender.core.settings import PrometheusSettings
from recommender.core.usage import within_objective

RATE_TRIGGER_METRIC = "vllm:request_success_total"  # the KEDA triggers' queries read these (keda_parameters)
WAITING_TRIGGER_METRIC = "vllm:num_requests_waiting"
RUNNING_METRIC = "vllm:num_requests_running"
TTFT_BUCKET_METRIC = "vllm:time_to_first_token_seconds_bucket"
QUEUE_BUCKET_METRIC = "vllm:request_queue_time_seconds_bucket"  # time in WAITING, reference.md §9.1
QUEUED_S = 0.3  # the queue-time histogram's first bound (s): a request over it waited for a replica
HPA_MAX_WINDOW_S = 3600  # stabilizationWindowSeconds limit, reference.md §12
HPA_SYNC_S = 15  # the HPA controller's sync period (reference.md §12): one scale-up step per sync


def autoscaler_objects(plan: ScalingPlan, namespace: str, name: str, kind: str = "Deployment",
                       server_address: str = PLACEHOLDER_PROMETHEUS.url) -> AutoscalerObjects:
    """The KEDA ScaledObject spec fragment and the HPA (External metric) that carry ``plan`` for one workload:
    Prometheus triggers on its arrival rate and requests waiting, its pods matched by name prefix."""
    pods = f'namespace="{namespace}",pod=~"{name}-.*"'
    return AutoscalerObjects(keda_parameters(plan, pods, server_address), hpa_external(plan, namespace, kind, name))


def keda_parameters(plan: ScalingPlan, matchers: str = 'namespace="NS"',
                    server_address: str = PLACEHOLDER_PROMETHEUS.url, polling_interval_s: int = 30
                    ) -> dict[str, object]:
    """A KEDA ScaledObject ``spec`` fragment (reference.md §10): a Prometheus trigger on request rate and,
    where the plan sets ``waiting_per_replica``, one on requests waiting, and, where it has a TTFT objective and
    error budget, one on the objective being missed (:func:`objective_missed_query`); the HPA follows the
    largest. All read the series ``matchers`` select (the workload's pods).

    Trigger metadata values are strings, as KEDA expects; each query must return exactly one element.
    """
    query = arrival_rate_query(matchers, plan.rate_window_s)
    waiting_query = f"sum({WAITING_TRIGGER_METRIC}{{{matchers}}})"
    thresholds = trigger_thresholds(plan)
    triggers: list[dict[str, object]] = [{
        "type": "prometheus",
        "metricType": "AverageValue",
        "metadata": {"serverAddress": server_address, "query": query,
                     "threshold": thresholds[RATE_TRIGGER_METRIC],
                     "activationThreshold": f"{plan.activation_threshold:.6g}"},
    }]
    if WAITING_TRIGGER_METRIC in thresholds:
        triggers.append({"type": "prometheus", "metricType": "AverageValue",
                         "metadata": {"serverAddress": server_address, "query": waiting_query,
                                      "threshold": thresholds[WAITING_TRIGGER_METRIC]}})
    if plan.ttft_objective_s is not None and plan.ttft_error_budget is not None:
        triggers.append({"type": "prometheus", "metricType": "AverageValue",
                         "metadata": {"serverAddress": server_address, "threshold": "1",
                                      "query": objective_missed_query(matchers, plan.rate_window_s,
                                                                      plan.ttft_objective_s, plan.ttft_error_budget)}})
    return {
        "pollingInterval": polling_interval_s,
        "cooldownPeriod": plan.cooldown_s,
        "minReplicaCount": plan.min_replicas,
        "maxReplicaCount": plan.max_replicas,
        "advanced": {"horizontalPodAutoscalerConfig": {"behavior": hpa_behavior(plan)}},
        "triggers": triggers,
    }


def arrival_rate_query(matchers: str, window_s: int) -> str:
    """PromQL for the requests/s arriving at the pods ``matchers`` select: finished + growth of running +
    growth of waiting (every request that arrives either finished, runs or waits).

    vLLM exports no arrival counter, and the finished rate alone stops at the capacity being served: an
    overloaded service would read as a busy one, and the HPA would add replicas only as the new ones finish
    more. The growth terms (``deriv`` per pod) carry the excess. Each term is 0 where its series are absent
    (a pod with one sample yet), so the query always returns one element; clamped at 0: a queue drained
    faster than the window's finished count reads negative, and KEDA has passed negative values on to the
    HPA (kedacore/keda#7880).
    """
    def term(expr: str) -> str:
        return f"(sum({expr}) or vector(0))"

    window = f"[{window_s}s]"
    return (f"clamp_min({term(f'rate({RATE_TRIGGER_METRIC}{{{matchers}}}{window})')} + "
            f"{term(f'deriv({RUNNING_METRIC}{{{matchers}}}{window})')} + "
            f"{term(f'deriv({WAITING_TRIGGER_METRIC}{{{matchers}}}{window})')}, 0)")


def trigger_thresholds(plan: ScalingPlan) -> dict[str, str]:
    """The plan's per-replica thresholds by the metric each Prometheus trigger reads, as KEDA's metadata strings
    (one place for the report's fragment and the actuator that keeps a live ScaledObject in step)."""
    out = {RATE_TRIGGER_METRIC: f"{plan.target_per_replica:.6g}"}
    if plan.waiting_per_replica is not None:
        out[WAITING_TRIGGER_METRIC] = f"{plan.waiting_per_replica:.6g}"
    return out


def scale_down_window_s(plan: ScalingPlan, default_cold_start_s: float = 180.0) -> int:
    """The HPA scale-down stabilisation window: at least the HPA default of 300 s and at least the cold
    start (releasing a replica needed again within a cold start costs more than keeping it), longer where the
    plan holds its replicas through short gaps (``plan.scale_down_window_s``, policies/replicas/hold.py), at
    most 3600 s."""
    return int(min(HPA_MAX_WINDOW_S, max(base_scale_down_window_s(plan.cold_start_s, default_cold_start_s),
                                         plan.scale_down_window_s or 0)))


def base_scale_down_window_s(cold_start_s: float | None, default_cold_start_s: float = 180.0) -> int:
    """The scale-down window without a hold: the HPA default of 300 s, or one cold start (s) where longer."""
    return int(min(HPA_MAX_WINDOW_S, max(300, math.ceil(cold_start_s or default_cold_start_s))))


def hpa_behavior(plan: ScalingPlan, default_cold_start_s: float = 180.0) -> dict[str, object]:
    """HPA ``behavior`` (reference.md §12): scale up at once to whatever the triggers ask (a Pods policy of
    the plan's max replicas a sync: the HPA's default, +4 pods or x2 a sync, takes seven syncs from 1 to 200 while
    the burst that asked for them queues), scale down only after one cold start (:func:`scale_down_window_s`):
    scale-in slower than scale-out. A rate limit on scale-in after the window (the headroom per cold start) was
    tried and not kept (benchmarks/REPLAY.md, Closed loop)."""
    window = scale_down_window_s(plan, default_cold_start_s)
    return {
        "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                    "policies": [{"type": "Pods", "value": max(4, plan.max_replicas), "periodSeconds": HPA_SYNC_S},
                                 {"type": "Percent", "value": 100, "periodSeconds": HPA_SYNC_S}]},
        "scaleDown": {"stabilizationWindowSeconds": window, "selectPolicy": "Max",
                      "policies": [{"type": "Percent", "value": 100, "periodSeconds": HPA_SYNC_S}]},
    }


def objective_missed_query(matchers: str, window_s: int, objective_s: float, budget: float) -> str:
    """PromQL for the objective trigger (AverageValue 1): the replicas that served through the last
    ``window_s`` x (1 + the share of requests that missed the objective for want of a replica in it), only while
    that share exceeds ``budget`` (else no value: KEDA reads 0, and the other triggers decide). So while the
    objective is missed the HPA asks for the replicas that missed it plus that share more, whatever the
    plan's capacity said: feedback, not a model. Only pods serving now and a window ago count: the misses
    in the window are those replicas' (a step taken is not taken again for the misses the histogram records
    after it, as a drained backlog's; a wake from zero, whose pod served no window yet, asks nothing), and a
    miss that outlasts the window steps again.

    The share is the lesser of two read from vLLM's histograms: the requests whose TTFT exceeded ``objective_s``
    (``within_objective``: the buckets around an objective that is no bound, linearly, as the collector reads
    them) and those that waited in the queue over :data:`QUEUED_S`. A request that did not wait missed on its own
    prefill, which no replica more shortens: counted, such misses grew a steady pool by their share every window
    up to its max. Where vLLM exports no queue-time histogram, the TTFT share alone. Serving pods are those
    reporting vLLM's running gauge. It reads no waiting gauge, so the actuator never takes it for the waiting
    trigger."""
    window = f"[{window_s}s]"

    def bucket(metric: str, bound: float) -> str:
        return f"sum(rate({metric}{{{matchers},{_le(bound)}}}{window}))"

    def share_over(metric: str, within: str) -> str:
        total = bucket(metric, math.inf)
        return f"(clamp_min({total} - ({within}), 0) / {total})"

    ttft = share_over(TTFT_BUCKET_METRIC, " + ".join(
        bucket(TTFT_BUCKET_METRIC, b) if w == 1.0 else f"{bucket(TTFT_BUCKET_METRIC, b)} * {w:.6g}"
        for b, w in within_objective(objective_s)))
    queued = share_over(QUEUE_BUCKET_METRIC, bucket(QUEUE_BUCKET_METRIC, QUEUED_S))
    # the lesser, each share named once (a label tells them apart for ``or``); ``min`` ignores a NaN share (no
    # requests in the window) beside a number, and the TTFT share stands alone without the other
    share = f'min({_tagged(ttft, "ttft")} or {_tagged(queued, "queued")})'
    now, then = (f"count by (pod) ({RUNNING_METRIC}{{{matchers}}}{at})" for at in ("", f" offset {window_s}s"))
    # the share filtered by the budget once: with no value over it the product has none (both sides carry no labels)
    return f"count({now} and {then}) * (1 + ({share} > {budget:.6g}))"


def _tagged(expr: str, name: str) -> str:
    """``expr`` with a label ``share="<name>"``, so two label-free vectors can be joined by ``or``."""
    return f'label_replace({expr}, "share", "{name}", "", "")'


def _le(bound: float) -> str:
    """A matcher for one bucket bound however the exporter wrote it (prometheus_client: "1.0"; Go: "1")."""
    if bound == math.inf:
        return 'le="+Inf"'
    text = repr(float(bound))
    return f'le=~"{text.removesuffix(".0")}|{text.replace(".", "[.]")}"' if text.endswith(".0") else f'le="{text}"'


def hpa_external(plan: ScalingPlan, namespace: str, kind: str, name: str) -> dict[str, object]:
    """An autoscaling/v2 HorizontalPodAutoscaler on this project's external metrics adapter
    (recommender/serve/extmetrics.py): the plan's metric at its target per replica (``AverageValue``), the
    workload picked by ``workload=<name>,kind=<Kind>`` (the adapter's selector; KEDA's external scaler takes
    ``Kind/name`` in its metadata instead), the plan's min/max (at least 1: 0 needs the alpha HPAScaleToZero
    gate) and :func:`hpa_behavior`. The same numbers as :func:`keda_parameters`."""
    return {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": kind, "name": name},
            "minReplicas": max(1, plan.min_replicas), "maxReplicas": max(1, plan.max_replicas),
            "metrics": [{"type": "External", "external": {
                "metric": {"name": plan.metric, "selector": {"matchLabels": {"workload": name, "kind": kind}}},
                "target": {"type": "AverageValue", "averageValue": f"{plan.target_per_replica:g}"}}}],
            "behavior": hpa_behavior(plan),
        },
    }


def trigger_prometheus(keda_url: str | None, prometheus: PrometheusSettings
                       ) -> tuple[PrometheusAddress, tuple[str, ...]]:
    """The Prometheus the generated KEDA triggers read: ``scaling.keda_prometheus_url`` (the cluster's address),
    else the URL the report read, else a placeholder that never resolves; and a warning where credentials were
    given. Credentials never go into the trigger (user:pass@, query and fragment are dropped): the report's
    output is shared and committed, and KEDA reads them from a TriggerAuthentication instead."""
    url, source = (keda_url, "scaling.keda_prometheus_url") if keda_url else (prometheus.url, "prometheus.url")
    if not url:
        return PLACEHOLDER_PROMETHEUS, ()
    parts = urlsplit(url.strip())
    had = "@" in parts.netloc or bool(parts.query)
    given = source == "prometheus.url" and any((prometheus.bearer_token, prometheus.username, prometheus.password,
                                                prometheus.client_cert))
    clean = urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path.rstrip("/"), "", ""))
    warn = (f"KEDA triggers read {clean} ({source}) without its credentials: give them a TriggerAuthentication "
            "(authenticationRef; authModes basic, bearer or tls) holding them",) if had or given else ()
    return PrometheusAddress(clean, source, needs_auth=had or given), warn
