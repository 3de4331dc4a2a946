"""Pod-level facts that collectors report, before pods are grouped into workloads.

Collectors fill these boundary records; :mod:`collectors.snapshot` turns them into
:class:`~recommender.core.inventory.Workload` and workload-level usage. Pure data, no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol, TypeVar

import pandas as pd


class _OfPod(Protocol):
    @property
    def namespace(self) -> str: ...
    @property
    def pod(self) -> str: ...


_R = TypeVar("_R", bound=_OfPod)


def pod_key(namespace: str, pod: str) -> str:
    """Column key of a pod-level usage frame."""
    return f"{namespace}/{pod}"


@dataclass(frozen=True)
class PodDevices:
    """What dcgm-exporter saw attached to one pod (instant view at the end of the window)."""

    namespace: str
    pod: str
    gpu_product: str | None  # DCGM modelName label, e.g. "NVIDIA A100-SXM4-80GB"
    device_count: int  # distinct GPUs / MIG instances attributed to the pod
    mig_profile: str | None  # GPU_I_PROFILE label, e.g. "3g.40gb"
    device_memory_mib: float | None  # FB_USED + FB_FREE of one device/slice
    shared_with: int = 1  # how many pods DCGM attributes the same device to (>1: time-slicing/MPS)
    nodes: tuple[str, ...] = ()  # node label (settings.prometheus.node_labels) of its devices


@dataclass(frozen=True)
class NodeDevices:
    """One GPU node as dcgm-exporter reports it: every GPU it exports, with the MIG devices on each.

    Built without the Kubernetes API, so GPUs with no series (MIG on, no instances yet) after the last
    exported index are not counted.
    """

    name: str
    gpu_product: str | None  # DCGM modelName
    mig_devices: tuple[tuple[tuple[str, int], ...], ...]  # per GPU index: ((profile, count), ...); () no MIG
    # (cluster label, value) pairs its series carry (settings.prometheus.cluster_labels), sorted: two values of
    # one label are two clusters' nodes of one name, read as one
    clusters: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class PodOwner:
    """A pod's top-level owner (ReplicaSet resolved to its Deployment, Job to its CronJob)."""

    namespace: str
    pod: str
    kind: str  # Deployment, StatefulSet, DaemonSet, Job, CronJob, LeaderWorkerSet, Pod (bare)
    name: str
    inferred: bool = False  # True when guessed from the pod name rather than read from the API or KSM


@dataclass(frozen=True)
class PodRequests:
    """GPU resources a pod requests, from kube-state-metrics (resource names sanitised there)."""

    namespace: str
    pod: str
    resources: tuple[tuple[str, float], ...]  # (resource name as in the pod spec, amount)


@dataclass(frozen=True)
class VllmInfo:
    """vLLM's own view of its KV cache, from ``vllm:cache_config_info`` and ``model_name``."""

    namespace: str
    pod: str
    model_name: str | None
    kv_capacity_tokens: float | None  # num_gpu_blocks x block_size
    gpu_memory_utilization: float | None


@dataclass(frozen=True)
class PodUsage:
    """Pod-level usage from a metrics source, before grouping into workloads.

    ``series`` maps a canonical metric name (see recommender.core.usage) to a wide frame: index = UTC
    DatetimeIndex at ``step_s``, columns = :func:`pod_key`.
    """

    series: dict[str, pd.DataFrame]
    devices: tuple[PodDevices, ...] = ()
    owners: tuple[PodOwner, ...] = ()
    requests: tuple[PodRequests, ...] = ()
    vllm: tuple[VllmInfo, ...] = ()
    warnings: tuple[str, ...] = ()
    gpu_nodes: tuple[NodeDevices, ...] = ()  # only without the Kubernetes API
    # per pod, the (label, value) pairs of the labels that name a cluster its series carry, where one API serves
    # several clusters (settings.prometheus.cluster_labels); {} where it serves one
    clusters: Mapping[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)


def without(usage: PodUsage, keys: Collection[str], warning: str) -> PodUsage:
    """``usage`` with none of the pods ``keys`` names (:func:`pod_key`): no frame column, device, owner, request or
    vLLM record of theirs; ``warning`` added to say why."""
    gone = set(keys)

    def kept(records: tuple[_R, ...]) -> tuple[_R, ...]:
        return tuple(r for r in records if pod_key(r.namespace, r.pod) not in gone)

    series = {}
    for metric, frame in usage.series.items():
        drop = [c for c in frame.columns if c in gone]
        series[metric] = frame.drop(columns=drop) if drop else frame
    return replace(usage, series=series, devices=kept(usage.devices), owners=kept(usage.owners),
                   requests=kept(usage.requests), vllm=kept(usage.vllm), warnings=(*usage.warnings, warning))
