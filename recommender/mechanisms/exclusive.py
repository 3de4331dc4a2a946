"""Whole GPUs: ``nvidia.com/gpu`` devices a replica holds alone. Always fits (as many devices as the memory
needs); read back from an ``nvidia.com/gpu`` request, which a node's labels may turn into a shared one
(:func:`collectors.kubernetes.parse.with_node`)."""

from __future__ import annotations

import math
from typing import Any

from recommender.core.catalogue import GpuModel
from recommender.core.inventory import Allocation, Sharing
from recommender.mechanisms import MECHANISMS
from recommender.mechanisms.base import GPU, Base, Need, PodEdits, PodView, ReadBack, Sized, whole_gpus


class Exclusive(Base):
    name, sharing, read_rank = "exclusive", Sharing.EXCLUSIVE, 90
    isolates_memory = isolates_faults = True  # a device of its own

    def size(self, need: Need, gpu: GpuModel) -> Sized:
        gpus = max(1, math.ceil(need.memory_mib / gpu.memory_mib - 1e-9), math.ceil(need.compute_frac - 1e-9))
        return Sized(None, gpus, float(gpus), float(gpu.memory_mib))

    def gpu_equivalents(self, alloc: Allocation, gpu: GpuModel | None) -> tuple[float, str | None]:
        return float(alloc.gpus), None

    def label(self, alloc: Allocation) -> str:
        model = alloc.gpu_model or (f"unknown GPU ({alloc.gpu_product})" if alloc.gpu_product else "unknown GPU")
        return f"{alloc.gpus}× {model}"

    def compute_held(self, alloc: Allocation, gpu: GpuModel | None) -> float | None:
        return float(alloc.gpus) if alloc.gpus > 0 else None

    def how_to_apply(self, alloc: Allocation) -> dict[str, Any]:
        return {"resources": {GPU: str(alloc.gpus)}}

    def pod_edits(self, alloc: Allocation) -> PodEdits:
        return whole_gpus(max(1, alloc.gpus))

    def read(self, pod: PodView) -> ReadBack | None:
        return ReadBack(None, pod.gpus) if pod.gpus else None


MECHANISMS.add("exclusive", Exclusive())
