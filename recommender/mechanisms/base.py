"""The protocol every GPU sharing mechanism implements, and the typed values it hands over.

A mechanism (whole GPUs, MIG, MPS, HAMi, KAI, time-slicing; DRA or Volcano vGPU next) knows five things
about its share of a GPU: how to size a need (memory MiB, compute as a share of one GPU's SMs) on a GPU
model into a share or a reason it does not fit; how many GPU-equivalents a share holds; how a person
applies it; the pod edits that apply it; and how to read it back from a pod. Policies size, collectors
read back, the controller applies and the outputs describe, all through :data:`recommender.mechanisms.MECHANISMS`,
so adding a mechanism is one module here plus its registration.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from recommender.core.catalogue import GpuModel
from recommender.core.inventory import Allocation, Share, Sharing

GPU = "nvidia.com/gpu"
GPU_SHARED = "nvidia.com/gpu.shared"  # time-slicing or MPS with renameByDefault (reference.md §3)
MIG_PREFIX = "nvidia.com/mig-"


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
    names a prefix); literal env values set and removed; pod-template annotations set and removed."""

    resources: tuple[tuple[str, str], ...] = ()
    drop_resources: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    drop_env: tuple[str, ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()
    drop_annotations: tuple[str, ...] = ()

    def drops(self, resource: str) -> bool:
        """Whether ``resource`` is one ``drop_resources`` removes."""
        return any(resource.startswith(d[:-1]) if d.endswith("*") else resource == d for d in self.drop_resources)

    @property
    def empty(self) -> bool:
        return not (self.resources or self.env or self.annotations or self.drop_env or self.drop_annotations)


@dataclass(frozen=True)
class PodView:
    """What reading a share back sees of one pod: the GPU resources it holds (summed by the scheduler's rule),
    its whole ``nvidia.com/gpu`` devices (rounded up), its containers (for their literal env), its
    annotations and ``schedulerName``; caveats found go to ``notes``."""

    resources: Mapping[str, float]
    gpus: int = 0
    containers: Sequence[Mapping[str, Any]] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
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
    env is a MIG pod)."""

    name: str
    sharing: Sharing
    read_rank: int
    share_type: type[Share] | None  # its share's parameters; None: the allocation's device count says it all

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

    def how_to_apply(self, alloc: Allocation) -> dict[str, Any]:
        """What to write where, in the mechanism's own terms (the report's ``how_to_apply``)."""
        ...

    def pod_edits(self, alloc: Allocation) -> PodEdits:
        """The pod-template edits that give a replica ``alloc``'s share."""
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
    """Defaults for the optional parts of :class:`Mechanism`: no share to finish or size. ``report_only``: the
    mechanism is recommended, never applied (its ``pod_edits`` are empty and the controller leaves it alone)."""

    share_type: type[Share] | None = None
    report_only: bool = False

    def fraction(self, alloc: Allocation) -> tuple[float, float] | None:
        return None

    def finish(self, read: ReadBack, device_memory_mib: float | None, notes: list[str]) -> ReadBack:
        return read

    def unresolved(self, read: ReadBack) -> str | None:
        """What stays unknown of ``read`` without a node's device memory, in words; None: nothing."""
        return None


def count(n: float, name: str, notes: list[str]) -> int:
    """Devices requested, rounded up with a note when not a whole number."""
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
        notes.append(f"could not parse {key}={raw}")
        return None
    return value if math.isfinite(value) else None
