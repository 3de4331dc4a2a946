"""external.metrics.k8s.io/v1beta1 documents, exactly as the HPA and the aggregator read them.

Pure: discovery (``APIGroupList``, ``APIGroup``, ``APIResourceList``), ``ExternalMetricValueList``,
Kubernetes ``Status`` errors and resource.Quantity strings. Metric names are the plan's scaling
metrics (e.g. ``request_rate_per_s``, target ``AverageValue`` = the plan's target per replica) and
``desired_replicas`` (target ``AverageValue: 1``). The workload is picked by ``labelSelector``:
``workload=<name>`` and, when names repeat across kinds, ``kind=<Kind>``.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Any

from recommender.serve.targets import DESIRED_REPLICAS, ErrorKind, TargetError, WorkloadTarget

GROUP = "external.metrics.k8s.io"
VERSION = "v1beta1"
GROUP_VERSION = f"{GROUP}/{VERSION}"
_SELECTOR_TERM = re.compile(r"^\s*([A-Za-z0-9._/-]+)\s*(==|=)\s*([A-Za-z0-9._-]*)\s*$")
HTTP_STATUS = {ErrorKind.NOT_FOUND: 404, ErrorKind.INVALID: 400, ErrorKind.NO_SCALING: 404, ErrorKind.UNAVAILABLE: 503}
_REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 429: "TooManyRequests",
            503: "ServiceUnavailable"}


def quantity(value: float) -> str:
    """A resource.Quantity string: whole numbers plain (``"2"``), others in milli-units (``"1500m"``).

    Negative or non-finite values become ``"0"`` (what KEDA sends the HPA for them, too)."""
    if not math.isfinite(value) or value <= 0:
        return "0"
    milli = math.ceil(round(value * 1000, 6))  # round up: never report less demand than we have
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def group_list() -> dict[str, Any]:
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group()]}


def group() -> dict[str, Any]:
    version = {"groupVersion": GROUP_VERSION, "version": VERSION}
    return {"kind": "APIGroup", "apiVersion": "v1", "name": GROUP, "versions": [version],
            "preferredVersion": version}


def resource_list(metrics: list[str]) -> dict[str, Any]:
    """Discovery: one namespaced, get-only resource per metric name."""
    resources = [{"name": m, "singularName": "", "namespaced": True, "kind": "ExternalMetricValueList",
                  "verbs": ["get"]} for m in sorted(set(metrics) | {DESIRED_REPLICAS})]
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": GROUP_VERSION, "resources": resources}


def parse_selector(text: str) -> dict[str, str]:
    """``workload=llama,kind=Deployment`` → dict; only equality terms (the HPA sends matchLabels so)."""
    terms: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        match = _SELECTOR_TERM.match(part)
        if match is None:
            raise TargetError(ErrorKind.INVALID, f"labelSelector term {part!r} is not key=value")
        terms[match.group(1)] = match.group(3)
    return terms


def workload_of(selector: dict[str, str]) -> str:
    """The ``Kind/name`` or ``name`` a selector names; it must name one workload."""
    name = selector.get("workload")
    if not name:
        raise TargetError(ErrorKind.INVALID, "labelSelector must name the workload: workload=<name>[,kind=<Kind>]")
    kind = selector.get("kind")
    return f"{kind}/{name}" if kind else name


def value_list(metric: str, target: WorkloadTarget, now: datetime, window_s: int) -> dict[str, Any]:
    """The ExternalMetricValueList for one workload: one item (the HPA sums all items)."""
    if metric == DESIRED_REPLICAS:
        value = target.desired_replicas
    elif metric == target.metric:
        value = target.value
    else:
        raise TargetError(ErrorKind.NOT_FOUND, f"metric {metric!r} is not served for {target.ref}: "
                                               f"use {target.metric!r} or {DESIRED_REPLICAS!r}")
    labels = {"namespace": target.ref.namespace, "kind": target.ref.kind, "workload": target.ref.name,
              "state": str(target.state)}
    item = {"metricName": metric, "metricLabels": labels, "timestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "window": window_s, "value": quantity(value)}
    return {"kind": "ExternalMetricValueList", "apiVersion": GROUP_VERSION, "metadata": {}, "items": [item]}


def status(code: int, message: str) -> dict[str, Any]:
    """A Kubernetes Status error body, as an aggregated API server answers."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": _REASONS.get(code, "InternalError"), "code": code}
