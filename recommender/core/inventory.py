"""What a workload is and what it holds today: identity, GPU allocation, engine arguments, GPU nodes.

Frozen dataclasses, units in the field names (``_mib``, ``_frac``, ``_s``). Collectors build them;
nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar

from recommender.core.devplugin import DevicePluginConfig


class Sharing(StrEnum):
    """How a workload's GPU is handed out today (or should be)."""

    EXCLUSIVE = "exclusive"  # whole nvidia.com/gpu devices
    MIG = "mig"  # nvidia.com/mig-<profile> (mixed) or a MIG-single node
    TIME_SLICING = "time-slicing"  # nvidia.com/gpu.shared or a time-sliced nvidia.com/gpu
    MPS = "mps"  # CUDA MPS (device plugin / DRA / env)
    HAMI = "hami"  # HAMi gpumem / gpucores
    KAI = "kai"  # KAI scheduler gpu-fraction / gpu-memory
    DRA = "dra"  # ResourceClaims of the NVIDIA DRA driver's device classes (whole GPU, MIG, MPS, time-slicing)
    VOLCANO = "volcano-vgpu"  # Volcano vGPU volcano.sh/vgpu-number / vgpu-memory / vgpu-cores
    RUNAI = "runai"  # Run:ai gpu-fraction / gpu-memory under runai-scheduler (report-only)
    NONE = "none"  # no GPU found in the spec


@dataclass(frozen=True, order=True)
class WorkloadRef:
    """Identity of a workload: its top-level owner (Deployment, StatefulSet, Job, CronJob, ...)."""

    namespace: str
    kind: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.kind}/{self.name}"

    def __str__(self) -> str:
        return self.key


# Tokens an engine holds (context, sequences at once, KV cache): far above any model's. A tenant's larger figure
# (container args, vLLM's own labels) is unknown, not a size every later sum would overflow on.
MAX_TOKENS = 2**32
# Devices one pod or node holds (nvidia.com/gpu, MIG slices, shared replicas): far above any node's. A larger count,
# or one not finite, is no device count: read as none, with a note, not summed into the fleet's GPUs.
MAX_DEVICES = 1024
MAX_GROUP_DEVICES = 2**20  # devices one replica holds (a LeaderWorkerSet group adds its pods'): above any fleet's
MAX_REPLICAS = 10**6  # pods of one workload: far above any cluster's
MAX_DEVICE_MIB = float(2**30)  # a device's memory limit, MiB: a pebibyte, far above any GPU's


@dataclass(frozen=True)
class VllmArgs:
    """The vLLM engine arguments that bound its GPU memory, as found in the container args."""

    model: str | None = None
    gpu_memory_utilization: float | None = None  # fraction of the memory the process sees
    max_model_len: int | None = None  # tokens
    max_num_seqs: int | None = None
    tensor_parallel_size: int = 1


class Share:
    """One sharing mechanism's parameters for a replica (a MIG profile, an MPS thread and memory cap, ...).

    The concrete shares live beside their mechanism in :mod:`recommender.mechanisms` (the core cannot import
    them); ``sharing`` tags which one it is. ``flat`` gives the share as the snapshot's and the report's flat
    fields (``mig_profile``, ``mps_active_thread_pct``, ...), the names the on-disk formats keep.
    """

    sharing: ClassVar[Sharing]
    FLAT: ClassVar[tuple[str, ...]] = ()  # the flat name of each of the subclass's fields, in field order

    def flat(self) -> Mapping[str, Any]:
        return dict(zip(self.FLAT, (getattr(self, f.name) for f in fields(self)), strict=True))  # type: ignore[arg-type]

    @classmethod
    def from_flat(cls, values: Mapping[str, Any]) -> Share | None:
        """The share the flat fields describe; None when they say nothing (all absent or 0)."""
        got = [values.get(k) for k in cls.FLAT]
        return cls(*got) if any(v not in (None, 0) for v in got) else None


@dataclass(frozen=True)
class Allocation:
    """What one replica holds today (or is recommended to hold).

    ``gpu_equivalents`` is the share of whole physical GPUs one replica occupies, so that workloads of
    every sharing mechanism add up in one unit: a whole GPU is 1, a 3g MIG slice of a 7-slice GPU 3/7
    (by SM slices; 4/8 by memory: the larger counts), a time-sliced replica 1/replicas of the device.
    ``share`` holds the mechanism's own parameters (None for whole GPUs, time-slicing and none); the
    read-only ``mig_profile`` ... ``kai_gpu_fraction`` read them back by their flat names.
    """

    sharing: Sharing
    gpus: int = 0  # whole devices requested (nvidia.com/gpu, or gpu.shared replicas)
    share: Share | None = None
    gpu_equivalents: float = 0.0
    gpu_model: str | None = None  # canonical model key, e.g. "A100-80GB"; None when unknown
    gpu_product: str | None = None  # raw product label as found (GFD nvidia.com/gpu.product, DCGM modelName)
    device_memory_mib: float | None = None  # memory one device/slice shows the process
    vllm: VllmArgs | None = None
    replicas: int = 1

    @property
    def total_gpu_equivalents(self) -> float:
        return self.gpu_equivalents * self.replicas

    def _flat(self, name: str) -> Any:
        return self.share.flat().get(name) if self.share is not None else None

    @property
    def mig_profile(self) -> str | None:  # e.g. "3g.40gb"
        return self._flat("mig_profile")

    @property
    def mig_count(self) -> int:
        return self._flat("mig_count") or 0

    @property
    def mps_active_thread_pct(self) -> float | None:
        return self._flat("mps_active_thread_pct")

    @property
    def mps_pinned_mem_mib(self) -> float | None:
        return self._flat("mps_pinned_mem_mib")

    @property
    def hami_gpumem_mib(self) -> float | None:
        return self._flat("hami_gpumem_mib")

    @property
    def hami_gpucores_pct(self) -> float | None:
        return self._flat("hami_gpucores_pct")

    @property
    def kai_gpu_fraction(self) -> float | None:
        return self._flat("kai_gpu_fraction")

    @property
    def dra_device_class(self) -> str | None:  # e.g. "mig.nvidia.com"
        return self._flat("dra_device_class")

    @property
    def dra_shared_claim(self) -> bool:  # one ResourceClaim several pods name (else each pod's own, from a template)
        return bool(self._flat("dra_shared_claim"))

    @property
    def dra_sharing(self) -> str | None:  # the GpuConfig sharing strategy: "MPS", "TimeSlicing"; None: none
        return self._flat("dra_sharing")

    @property
    def volcano_vgpu_memory_mib(self) -> float | None:
        return self._flat("volcano_vgpu_memory_mib")

    @property
    def volcano_vgpu_cores_pct(self) -> float | None:
        return self._flat("volcano_vgpu_cores_pct")

    @property
    def runai_gpu_fraction(self) -> float | None:
        return self._flat("runai_gpu_fraction")


@dataclass(frozen=True)
class Workload:
    """A GPU workload as discovered, with the pods that belong to it."""

    ref: WorkloadRef
    allocation: Allocation
    pods: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    source: str = "unknown"  # which collector found it: kubernetes, kube-state-metrics, dcgm, file
    notes: tuple[str, ...] = ()  # caveats found while discovering it (e.g. owner inferred from pod name)
    kv_capacity_tokens: float | None = None  # vLLM num_gpu_blocks x block_size, per replica
    served_model: str | None = None  # vLLM model_name label
    nodes: tuple[str, ...] = ()  # nodes its pods run on now (for the per-node MIG plan)
    cold_start_s: float | None = None  # measured pod start → ready, when known
    # when its pods took the GPU resources and serving arguments they have now (the rollout that started it, from
    # a Deployment's ReplicaSets or a StatefulSet's or LeaderWorkerSet's ControllerRevisions); None: unknown, or no
    # other shape among what the API keeps. Capacity measured before it was another shape's.
    shape_since: datetime | None = None
    # what owns its replica count besides people: "HorizontalPodAutoscaler/<name>", "ScaledObject/<name>" (several,
    # comma-separated: autoscalers that fight); None: none found, or not read (no Kubernetes API, not allowed)
    autoscaler: str | None = None
    # pods dcgm-exporter attributes its GPU to at once (>1: time-slicing or MPS, whatever the spec says); None:
    # unknown or one. Its per-device figures are then every tenant's (policies.attribution)
    device_shared_with: int | None = None
    # where the GPU pod template sits in its owner when not at spec.template (a Volcano Job's task, a training
    # job's replica spec: ``spec.tasks[1].template``); None: spec.template, or no template (read from pods)
    template_path: str | None = None


@dataclass(frozen=True)
class GpuNode:
    """A GPU node as found: model, device count and its MIG state (for per-node MIG plans)."""

    name: str
    gpu_model: str | None  # canonical key; None when unknown
    gpus: int
    mig_config: str | None = None  # current nvidia.com/mig.config label value
    # current per-GPU MIG devices when known (one {profile: count} per GPU index); empty: unknown/none
    mig_devices: tuple[Mapping[str, int], ...] = ()
    device_plugin_config: str | None = None  # current nvidia.com/device-plugin.config label value (None: unset)
    # what that config shares, as read from the device plugin's ConfigMap; None: unknown (not read, or the key is
    # missing or does not parse: ``device_plugin_unknown`` says why)
    device_plugin: DevicePluginConfig | None = None
    device_plugin_unknown: str | None = None
