"""KAI scheduler: a pod annotation ``gpu-fraction`` (of one GPU's memory) or ``gpu-memory`` (MiB), with
``gpu-fraction-num-devices`` devices (reference.md §7). KAI enforces nothing, so the workload must keep
itself within it (vLLM: --gpu-memory-utilization at most the fraction)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from recommender.core.catalogue import GpuModel
from recommender.core.inventory import Allocation, Share, Sharing
from recommender.mechanisms import MECHANISMS
from recommender.mechanisms.base import (
    PER_DEVICE_ACTIVITY,
    Base,
    Need,
    NoFit,
    PodEdits,
    PodView,
    ReadBack,
    Sized,
    number,
    whole_gpus,
)
from recommender.mechanisms.memfraction import MemoryFraction, finish_fraction, size_fraction, unresolved_fraction

KAI_FRACTION, KAI_MEMORY = "gpu-fraction", "gpu-memory"  # alternatives, one at a time
KAI_DEVICES, KAI_CONTAINER = "gpu-fraction-num-devices", "gpu-fraction-container-name"  # default: container 0


@dataclass(frozen=True)
class KaiShare(MemoryFraction):
    """KAI's fraction of one GPU's memory (0-1]; None: asked by ``gpu-memory`` and not yet read as one."""

    sharing: ClassVar[Sharing] = Sharing.KAI
    FLAT: ClassVar[tuple[str, ...]] = ("kai_gpu_fraction",)


def kai_annotations(alloc: Allocation) -> dict[str, str]:
    """KAI scheduler pod annotation (reference.md §7): the fraction of one GPU's memory."""
    return {KAI_FRACTION: f"{alloc.kai_gpu_fraction:g}"} if alloc.kai_gpu_fraction is not None else {}


class Kai(Base):
    name, sharing, read_rank = "kai", Sharing.KAI, 20
    isolates_memory = isolates_faults = False  # KAI enforces no memory limit (reference.md §7)
    share_type: type[Share] | None = KaiShare

    def size(self, need: Need, gpu: GpuModel) -> Sized | NoFit:
        return size_fraction(need, gpu, KaiShare, "the need is a whole GPU")

    def gpu_equivalents(self, alloc: Allocation, gpu: GpuModel | None) -> tuple[float, str | None] | None:
        return (alloc.kai_gpu_fraction, None) if alloc.kai_gpu_fraction else None

    def fraction(self, alloc: Allocation) -> tuple[float, float] | None:
        return alloc.gpu_equivalents, alloc.gpu_equivalents * (alloc.device_memory_mib or 0.0)

    def label(self, alloc: Allocation) -> str:
        frac = f" {alloc.kai_gpu_fraction:g}" if alloc.kai_gpu_fraction is not None else ""
        return f"kai{frac} gpu"

    def sm_share(self, alloc: Allocation, gpu: GpuModel | None) -> tuple[float, str | None]:
        return 1.0, PER_DEVICE_ACTIVITY

    def compute_held(self, alloc: Allocation, gpu: GpuModel | None) -> float | None:
        """Its time share: KAI's fraction, which caps no SMs."""
        return alloc.gpu_equivalents or None

    def how_to_apply(self, alloc: Allocation) -> dict[str, Any]:
        return {"annotations": kai_annotations(alloc)}

    def pod_edits(self, alloc: Allocation) -> PodEdits:
        values = kai_annotations(alloc)
        return PodEdits(annotations=tuple(sorted(values.items())), drop_annotations=(KAI_MEMORY,) if values else ())

    def not_applied(self, alloc: Allocation) -> str | None:
        return "kai: the recommendation has no gpu-fraction" if alloc.kai_gpu_fraction is None else None

    def leave(self, gpus: int) -> PodEdits:
        """Whole GPUs on the container the share belongs to, KAI's share annotations gone."""
        return replace(whole_gpus(gpus), drop_annotations=(KAI_FRACTION, KAI_MEMORY, KAI_DEVICES),
                       share_container=KAI_CONTAINER)

    def read(self, pod: PodView) -> ReadBack | None:
        """(gpu-fraction, devices) now, gpu-memory MiB pending the device memory; None when neither is asked."""
        a = pod.annotations
        if KAI_FRACTION not in a and KAI_MEMORY not in a:
            return None
        fraction = number(a, KAI_FRACTION, pod.notes)
        if fraction is not None and not 0 < fraction <= 1:
            pod.notes.append(f"{KAI_FRACTION}={fraction:g} is outside (0, 1]; ignored")
            fraction = None
        devices = number(a, KAI_DEVICES, pod.notes) or 1.0
        return ReadBack(KaiShare(fraction), math.ceil(devices), number(a, KAI_MEMORY, pod.notes))

    def finish(self, read: ReadBack, device_memory_mib: float | None, notes: list[str]) -> ReadBack:
        """gpu-memory becomes a fraction once the device memory is known."""
        return finish_fraction(read, device_memory_mib, notes, KaiShare, f"KAI {KAI_MEMORY}")

    def unresolved(self, read: ReadBack) -> str | None:
        return unresolved_fraction(read, KaiShare, f"KAI {KAI_MEMORY}")


MECHANISMS.add("kai", Kai())
