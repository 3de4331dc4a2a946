"""The Prometheus source: DCGM and vLLM usage, devices, and (without the Kubernetes API) the inventory
from kube-state-metrics, read with a few batched range queries per metric family; then kube-state-metrics'
replica counts of the workloads found (which steps each spent at zero)."""

from __future__ import annotations

from collectors.prometheus.chunks import step_for
from collectors.prometheus.client import PromClient, PrometheusLimitError, QueryStats
from collectors.prometheus.collect import collect_pod_usage, collect_workload_replicas
from collectors.prometheus.window import window_for

__all__ = ["PromClient", "PrometheusLimitError", "QueryStats", "collect_pod_usage", "collect_workload_replicas",
           "step_for", "window_for"]
