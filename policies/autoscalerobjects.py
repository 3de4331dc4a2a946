"""Autoscaler objects beside KEDA's fragment: the HPA on this project's external metrics adapter, and the
Prometheus address the generated KEDA triggers read (never with credentials). Pure: no I/O."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from policies.replicas import hpa_behavior
from recommender.core.plan import PLACEHOLDER_PROMETHEUS, PrometheusAddress, ScalingPlan
from recommender.core.settings import PrometheusSettings


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
