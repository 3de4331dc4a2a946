"""The Kubernetes source of the workload inventory: which GPU workloads exist and what each holds.

``discover_workloads`` lists the API (``client``), resolves owners (``discover``) and reads pod specs
with pure functions (``parse``). GPU model normalisation and gpu-equivalents are left to the core.
"""

from __future__ import annotations

from collectors.kubernetes.client import (
    KubernetesDenied,
    KubernetesNotServed,
    make_api_client,
    reachable,
    server_version,
)
from collectors.kubernetes.discover import build_workloads, discover_cluster, discover_workloads, list_cluster
from collectors.kubernetes.parse import parse_pod_spec, with_node

__all__ = [
    "KubernetesDenied",
    "KubernetesNotServed",
    "build_workloads",
    "discover_cluster",
    "discover_workloads",
    "list_cluster",
    "make_api_client",
    "parse_pod_spec",
    "reachable",
    "server_version",
    "with_node",
]
