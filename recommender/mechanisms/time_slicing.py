"""Time-slicing: the device plugin hands each GPU to N clients in turn, with no memory or fault isolation,
so N clients' memory must fit side by side. Set in the node's device-plugin config (the controller does not
change it); read back from ``nvidia.com/gpu.shared`` (renameByDefault) or a node's labels."""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction
from typing import Any

from recommender.core.catalogue import GpuModel
from recommender.core.inventory import Allocation, Sharing
from recommender.mechanisms import MECHANISMS
from recommender.mechanisms.base import (
    GPU,
    GPU_SHARED,
    PER_DEVICE_ACTIVITY,
    Base,
    Need,
    NoFit,
    PodEdits,
    PodView,
    ReadBack,
    Sized,
    count,
    whole_gpus,
)
from recommender.mechanisms.mps import MPS_MEM_ENV, MPS_THREADS_ENV

NOT_APPLIED = ("time-slicing: set in the node's device-plugin config, which the controller does not change: "
               "recommended only")


def time_slices(compute_frac: float, memory_mib: float, device_memory_mib: float) -> int:
    """Time-slicing replicas per GPU this workload can live with: compute and memory both must fit.

    Time-slicing isolates nothing, so memory is the hard limit: N clients must fit side by side.
    """
    by_compute = math.floor(1 / max(compute_frac, 1e-6))
    by_memory = math.floor(device_memory_mib / max(memory_mib, 1.0))
    return max(1, min(by_compute, by_memory))


class TimeSlicing(Base):
    name, sharing, read_rank = "time-slicing", Sharing.TIME_SLICING, 80
    isolates_memory = isolates_faults = False  # no memory or fault isolation (reference.md §3)
    node_wide = True

    def not_applied(self, alloc: Allocation) -> str | None:
        return NOT_APPLIED

    def leave(self, gpus: int) -> PodEdits:
        """Whole GPUs; MPS client limits left in the env (from an MPS share before) go too."""
        return replace(whole_gpus(gpus), drop_env=(MPS_THREADS_ENV, MPS_MEM_ENV))

    def size(self, need: Need, gpu: GpuModel) -> Sized | NoFit:
        n = time_slices(need.compute_frac, need.memory_mib, gpu.memory_mib)
        if n < 2:
            return NoFit("compute or memory need leaves no room for a second time-sliced client")
        return Sized(None, 1, 1 / n, float(gpu.memory_mib))

    def gpu_equivalents(self, alloc: Allocation, gpu: GpuModel | None) -> tuple[float, str | None] | None:
        return (alloc.gpu_equivalents, None) if alloc.gpu_equivalents else None  # measured: pods per device

    def fraction(self, alloc: Allocation) -> tuple[float, float] | None:
        return alloc.gpu_equivalents, alloc.gpu_equivalents * (alloc.device_memory_mib or 0.0)

    def label(self, alloc: Allocation) -> str:
        frac = Fraction(alloc.gpu_equivalents).limit_denominator(64)  # 0.25 → 1/4
        return f"ts {frac.numerator}/{frac.denominator}" if frac else "ts 0"

    def sm_share(self, alloc: Allocation, gpu: GpuModel | None) -> tuple[float, str | None]:
        return 1.0, PER_DEVICE_ACTIVITY

    def compute_held(self, alloc: Allocation, gpu: GpuModel | None) -> float | None:
        """Its time share: the GPU-equivalents measured (pods per device)."""
        return alloc.gpu_equivalents or None

    def how_to_apply(self, alloc: Allocation) -> dict[str, Any]:
        return {"resources": {GPU: "1"}, "device_plugin_time_slicing_replicas":
                round(1 / alloc.gpu_equivalents) if alloc.gpu_equivalents else None}

    def pod_edits(self, alloc: Allocation) -> PodEdits:
        return PodEdits(resources=((GPU_SHARED, str(max(1, alloc.gpus))),), drop_resources=(GPU,))

    def read(self, pod: PodView) -> ReadBack | None:
        n = pod.resources.get(GPU_SHARED, 0.0)
        shared = count(n, GPU_SHARED, pod.notes) if n > 0 else 0
        return ReadBack(None, shared) if shared else None  # none, or a count no pod holds


MECHANISMS.add("time-slicing", TimeSlicing())
