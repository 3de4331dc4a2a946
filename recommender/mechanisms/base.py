"""The protocol every GPU sharing mechanism implements, and the typed values it hands over.

A mechanism (whole GPUs, MIG, MPS, HAMi, KAI, time-slicing; DRA or Volcano vGPU next) knows about its
share of a GPU: how to size a need (memory MiB, compute as a share of one GPU's SMs) on a GPU model into a
share or a reason it does not fit; how many GPU-equivalents and how much of the SMs a share holds; how a
person applies it; the pod edits that apply it, and those that leave it for whole GPUs; and how to read it
back from a pod. Policies size, collectors read back, the controller applies and the outputs describe, all
through :data:`recommender.mechanisms.MECHANISMS`, so adding a mechanism is one module here plus its
registration.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from recommender.core.annotations import cut
from recommender.core.catalogue import GpuModel
from recommender.core.inventory import MAX_DEVICES, Allocation, Share, Sharing

GPU = "nvidia.com/gpu"
GPU_SHARED = "nvidia.com/gpu.shared"  # time-slicing or MPS with renameByDefault (reference.md §3)
MIG_PREFIX = "nvidia.com/mig-"
# engine activity (DCGM_FI_PROF_GR_ENGINE_ACTIVE) is per device: shared, it counts the other tenants' work too
PER_DEVICE_ACTIVITY = "engine activity is per device under GPU sharing: it includes the other tenants"


@dataclass(frozen=True)
class Need:
    """What one replica needs of one GPU: memory in MiB and compute as a share of the GPU's SMs (0-1)."""

    memory_mib: float
    compute_frac: float


@dataclass(frozen=True)
class Sized:
    """A need sized into a mechanism's share: the parameters, devices per replica, the share of whole GPUs it
    holds and the memory the process sees (MiB)."""

    share: Share | None
    gpus: int
    gpu_equivalents: float
    device_memory_mib: float


@dataclass(frozen=True)
class NoFit:
    """Why a need gets no share of this mechanism on this GPU model."""

    reason: str


@dataclass(frozen=True)
class PodEdits:
    """What applying a share writes on the pod template: resources set on the GPU container's limits (and
    its requests where they hold a GPU resource) and those ``drop_resources`` names removed (a trailing ``*``
    names a prefix); literal env values set and removed; keys set in the pod's node selector; pod-template
    annotations set and removed. ``share_container``: the pod annotation naming the container that holds a
    share no GPU resource shows (KAI's; absent, the first), where no container requests a GPU."""

    resources: tuple[tuple[str, str], ...] = ()
    drop_resources: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    drop_env: tuple[str, ...] = ()
    node_selector: tuple[tuple[str, str], ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()
    drop_annotations: tuple[str, ...] = ()
    share_container: str | None = None

    def drops(self, resource: str) -> bool:
        """Whether ``resource`` is one ``drop_resources`` removes."""
        return any(resource.startswith(d[:-1]) if d.endswith("*") else resource == d for d in self.drop_resources)

    @property
    def on_container(self) -> bool:
        """Whether any of it is written on the GPU container (resources or env)."""
        return bool(self.resources or self.env or self.drop_env)

    @property
    def empty(self) -> bool:
        return not (self.resources or self.env or self.annotations or self.drop_env or self.drop_annotations)


def whole_gpus(gpus: int) -> PodEdits:
    """``gpus`` whole ``nvidia.com/gpu`` devices in place of any shared GPU or MIG slice."""
    return PodEdits(resources=((GPU, str(gpus)),), drop_resources=(GPU_SHARED, MIG_PREFIX + "*"))


@dataclass(frozen=True)
class Claim:
    """One GPU request of a DRA ResourceClaim a pod uses, as the collector resolved it
    (``collectors.kubernetes.claims``): its DeviceClass and device count, the MIG profile (the allocated device's,
    else the one its selector asks for), the driver's ``GpuConfig`` sharing (strategy and MPS limits), and what the
    allocated device's ResourceSlice says of it (product name, memory in MiB); None where unknown."""

    device_class: str | None
    count: int = 1
    profile: str | None = None
    strategy: str | None = None  # "MPS" | "TimeSlicing"; None: exclusive
    thread_pct: float | None = None
    pinned_mem_mib: float | None = None
    product: str | None = None
    memory_mib: float | None = None
    shared: bool = False  # a named ResourceClaim (pods may share it), not one of a pod's own from a template


@dataclass(frozen=True)
class PodView:
    """What reading a share back sees of one pod: the GPU resources it holds (summed by the scheduler's rule),
    its whole ``nvidia.com/gpu`` devices (rounded up), its containers (for their literal env), its
    annotations, its resolved DRA claims and its ``schedulerName``; caveats found go to ``notes``."""

    resources: Mapping[str, float]
    gpus: int = 0
    containers: Sequence[Mapping[str, Any]] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    claims: Sequence[Claim] = ()  # its DRA ResourceClaims' GPU requests, resolved
    scheduler_name: str | None = None


@dataclass(frozen=True)
class ReadBack:
    """A share read from a pod: its parameters, devices per replica, and a figure only the node can finish
    (HAMi's memory percentage, KAI's gpu-memory MiB: see :meth:`Mechanism.finish`)."""

    share: Share | None
    gpus: int
    pending: float | None = None


class Mechanism(Protocol):
    """One way of handing out a GPU. ``name`` is the settings' name (``mechanisms.allowed``); ``sharing``
    the tag on allocations; ``read_rank`` orders read-back (lower first: a pod with a MIG slice and an MPS
    env is a MIG pod); ``node_wide``: the node's device plugin shares every GPU of the node this way, so whole
    GPUs are only found on other nodes (``mechanisms.exclusive_node_selector``). ``isolates_memory``: a client
    cannot reach past its share of device memory, whatever it does in its own container; ``isolates_faults``:
    one client's fault leaves the GPU's other clients running.
    Only a mechanism with both (:func:`isolates`) may put two tenants on one GPU (``mechanisms.tenancy``)."""

    name: str
    sharing: Sharing
    read_rank: int
    node_wide: bool
    share_type: type[Share] | None  # its share's parameters; None: the allocation's device count says it all
    isolates_memory: bool
    isolates_faults: bool

    def size(self, need: Need, gpu: GpuModel) -> Sized | NoFit:
        """The smallest share of ``gpu`` that holds ``need``, or why there is none."""
        ...

    def gpu_equivalents(self, alloc: Allocation, gpu: GpuModel | None) -> tuple[float, str | None] | None:
        """Whole GPUs one replica holds and a caveat when guessed; None where the share does not say."""
        ...

    def fraction(self, alloc: Allocation) -> tuple[float, float] | None:
        """(compute share, memory MiB) one replica takes of a GPU it is packed on beside others; None: not a
        fraction (whole GPUs, MIG slices: packed by count or by layout)."""
        ...

    def label(self, alloc: Allocation) -> str:
        """A replica's share in the fewest words, for tables ("mig 3g.40gb", "mps 50%")."""
        ...

    def sm_share(self, alloc: Allocation, gpu: GpuModel | None) -> tuple[float, str | None]:
        """Share of one whole GPU's SMs a replica's device or slice gives it (0-1], with a caveat where guessed
        or where engine activity counts other tenants too."""
        ...

    def compute_held(self, alloc: Allocation, gpu: GpuModel | None) -> float | None:
        """Whole GPUs' worth of compute one replica can use; None where that is unknown."""
        ...

    def how_to_apply(self, alloc: Allocation) -> dict[str, Any]:
        """What to write where, in the mechanism's own terms (the report's ``how_to_apply``)."""
        ...

    def pod_edits(self, alloc: Allocation) -> PodEdits:
        """The pod-template edits that give a replica ``alloc``'s share."""
        ...

    def not_applied(self, alloc: Allocation) -> str | None:
        """Why the controller does not write ``alloc``'s share on a pod (set elsewhere, or not sized), in words
        beginning with the mechanism's name; None where :meth:`pod_edits` says it all."""
        ...

    def leave(self, gpus: int) -> PodEdits:
        """The pod-template edits that move a replica off this mechanism onto ``gpus`` whole GPUs."""
        ...

    def read(self, pod: PodView) -> ReadBack | None:
        """The share ``pod`` holds by this mechanism, None when it holds none of it."""
        ...

    def finish(self, read: ReadBack, device_memory_mib: float | None, notes: list[str]) -> ReadBack:
        """``read`` completed with the device memory a node reports (no-op for most mechanisms)."""
        ...

    def unresolved(self, read: ReadBack) -> str | None:
        """What stays unknown of ``read`` without a node's device memory, in words; None: nothing."""
        ...


class Base:
    """Defaults for the optional parts of :class:`Mechanism`: no share to finish or size; the SMs of its
    devices, each of them; isolates nothing (the safe default: its clients are packed with their own tenant
    only). ``report_only``: the mechanism is recommended, never applied (its ``pod_edits`` are empty and the
    controller leaves it alone). ``writes_claims``: applied as a DRA claim object the controller creates and the
    pod template's reference to it, not by pod edits."""

    share_type: type[Share] | None = None
    name: str
    node_wide = False
    isolates_memory: bool = False
    isolates_faults: bool = False
    report_only: bool = False
    writes_claims: bool = False

    def label(self, alloc: Allocation) -> str:
        return self.name

    def fraction(self, alloc: Allocation) -> tuple[float, float] | None:
        return None

    def not_applied(self, alloc: Allocation) -> str | None:
        return None

    def leave(self, gpus: int) -> PodEdits:
        """Whole GPUs in place of whatever GPU resource the container asks for."""
        return whole_gpus(gpus)

    def sm_share(self, alloc: Allocation, gpu: GpuModel | None) -> tuple[float, str | None]:
        return 1.0, None

    def compute_held(self, alloc: Allocation, gpu: GpuModel | None) -> float | None:
        """The SM share of each device times the devices."""
        return self.sm_share(alloc, gpu)[0] * max(alloc.gpus, 1)

    def finish(self, read: ReadBack, device_memory_mib: float | None, notes: list[str]) -> ReadBack:
        return read

    def unresolved(self, read: ReadBack) -> str | None:
        """What stays unknown of ``read`` without a node's device memory, in words; None: nothing."""
        return None


def isolates(mechanism: Mechanism) -> bool:
    """Whether clients of different tenants may share one GPU through ``mechanism``: memory and faults both
    isolated (whole GPUs, MIG slices)."""
    return bool(mechanism.isolates_memory and mechanism.isolates_faults)


def count(n: float, name: str, notes: list[str]) -> int:
    """Devices requested, rounded up with a note when not a whole number; a count no pod holds (not finite,
    negative, above ``MAX_DEVICES``) is none, with a note."""
    if not (math.isfinite(n) and 0 <= n <= MAX_DEVICES):
        notes.append(f"{name}={n:.6g} is not a device count from 0 to {MAX_DEVICES:,}: ignored")
        return 0
    if n != int(n):
        notes.append(f"{name}={n:g} is not a whole number; rounded up")
    return math.ceil(n)


def number(values: Mapping[str, Any], key: str, notes: list[str]) -> float | None:
    """A finite number from ``values[key]``; None when absent, with a note when it does not parse."""
    raw = values.get(key)
    if raw is None:
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value):
        notes.append(f"could not parse {key}={cut(raw)}")
        return None
    return value
