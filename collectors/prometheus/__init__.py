"""The Prometheus source: DCGM and vLLM usage, devices, and (without the Kubernetes API) the inventory
from kube-state-metrics, read with a few batched range queries per metric family; then kube-state-metrics'
replica counts of the workloads found (which steps each spent at zero).

The names below are imported on first use (PEP 562): a module of this package that plans the census
(``chunks``, ``queries``, ``rules``, ``window``) loads without the collector and pandas behind it."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collectors.prometheus.chunks import step_for
    from collectors.prometheus.client import PromClient, PrometheusLimitError, QueryStats
    from collectors.prometheus.collect import collect_pod_usage, collect_workload_replicas
    from collectors.prometheus.window import window_for

_HOMES = {"PromClient": "client", "PrometheusLimitError": "client", "QueryStats": "client",
          "collect_pod_usage": "collect", "collect_workload_replicas": "collect", "step_for": "chunks",
          "window_for": "window"}
__all__ = ["PromClient", "PrometheusLimitError", "QueryStats", "collect_pod_usage", "collect_workload_replicas",
           "step_for", "window_for"]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_HOMES[name]}"), name)
