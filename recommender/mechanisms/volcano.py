"""Volcano vGPU: per container ``volcano.sh/vgpu-number`` vGPUs, each with ``vgpu-memory`` MiB of device memory
and ``vgpu-cores`` percent of its cores (names and meanings from ``data/schedulers.yaml``, unverified: not in
reference.md). Sized like a HAMi share (the device plugin is HAMi-core's); read back from those resources, and
checked against the device once a node tells its memory: a vGPU larger than its device cannot be granted, so
it is read as the whole device, with the reason."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

from recommender.core.catalogue import GpuModel
from recommender.core.inventory import MAX_DEVICE_MIB, Allocation, Share, Sharing
from recommender.mechanisms import MECHANISMS
from recommender.mechanisms.base import (
    GPU,
    GPU_SHARED,
    MIG_PREFIX,
    Base,
    Need,
    NoFit,
    PodEdits,
    PodView,
    ReadBack,
    Sized,
)
from recommender.mechanisms.base import count as _count
from recommender.mechanisms.schedulers import unverified, volcano_names
from recommender.mechanisms.sizing import size_share

NAMES = volcano_names()
VOLCANO_RESOURCES = (NAMES.number, NAMES.memory_mib, NAMES.cores_pct)


@dataclass(frozen=True)
class VolcanoShare(Share):
    """One Volcano vGPU's limits: device memory in MiB and percent of the cores; None: not set."""

    sharing: ClassVar[Sharing] = Sharing.VOLCANO
    FLAT: ClassVar[tuple[str, ...]] = ("volcano_vgpu_memory_mib", "volcano_vgpu_cores_pct")
    memory_mib: float | None = None
    cores_pct: float | None = None


def volcano_resources(alloc: Allocation) -> dict[str, str]:
    """The container resources of ``alloc``'s vGPUs: how many, memory MiB and cores percent each."""
    out = {NAMES.number: str(max(alloc.gpus, 1))}
    if alloc.volcano_vgpu_memory_mib is not None:
        out[NAMES.memory_mib] = f"{alloc.volcano_vgpu_memory_mib:.0f}"
    if alloc.volcano_vgpu_cores_pct is not None:
        out[NAMES.cores_pct] = f"{alloc.volcano_vgpu_cores_pct:.0f}"
    return out


class Volcano(Base):
    name, sharing, read_rank = "volcano-vgpu", Sharing.VOLCANO, 25
    share_type: type[Share] | None = VolcanoShare

    def size(self, need: Need, gpu: GpuModel) -> Sized | NoFit:
        share = size_share(need.compute_frac, need.memory_mib, gpu.memory_mib)
        if share is None:
            return NoFit("the need is a whole GPU: no vGPU smaller than the device holds it")
        seen = float(share.memory_mib) if NAMES.enforces_memory else float(gpu.memory_mib)
        return Sized(VolcanoShare(float(share.memory_mib), float(share.thread_pct)), 1, share.gpu_equivalents, seen)

    def gpu_equivalents(self, alloc: Allocation, gpu: GpuModel | None) -> tuple[float, str | None] | None:
        device = alloc.device_memory_mib or (gpu.memory_mib if gpu else None)
        mem, cores = alloc.volcano_vgpu_memory_mib, alloc.volcano_vgpu_cores_pct
        if mem is None and cores is None:
            return float(max(alloc.gpus, 1)), "vGPU without memory or cores limits: counted as whole GPUs"
        if mem is not None and not device:
            return None
        per = max(min(mem / device, 1.0) if mem is not None and device else 0.0, min((cores or 0) / 100, 1.0))
        return per * max(alloc.gpus, 1), None

    def fraction(self, alloc: Allocation) -> tuple[float, float] | None:
        return (alloc.volcano_vgpu_cores_pct or 100.0) / 100, alloc.volcano_vgpu_memory_mib or 0.0

    def label(self, alloc: Allocation) -> str:
        mem = f" {alloc.volcano_vgpu_memory_mib:,.0f} MiB" if alloc.volcano_vgpu_memory_mib is not None else ""
        cores = f" {alloc.volcano_vgpu_cores_pct:g}%" if alloc.volcano_vgpu_cores_pct is not None else ""
        return f"{max(alloc.gpus, 1)}× vgpu{mem}{cores}"

    def sm_share(self, alloc: Allocation, gpu: GpuModel | None) -> tuple[float, str | None]:
        """The vGPU's core percentage; without one, the whole device shared with the other clients."""
        if alloc.volcano_vgpu_cores_pct:
            return alloc.volcano_vgpu_cores_pct / 100, None
        return 1.0, "engine activity is per device under GPU sharing: it includes the other tenants"

    def how_to_apply(self, alloc: Allocation) -> dict[str, Any]:
        return {"resources": volcano_resources(alloc),
                "scheduler_name": NAMES.scheduler_name,
                "note": "set on the GPU container of the job's task template; it reaches only pods created "
                "afterwards (running tasks keep their vGPUs)" + unverified(NAMES.verified)}

    def pod_edits(self, alloc: Allocation) -> PodEdits:
        if alloc.volcano_vgpu_memory_mib is None and alloc.volcano_vgpu_cores_pct is None:
            return PodEdits()
        return PodEdits(resources=tuple(sorted(volcano_resources(alloc).items())),
                        drop_resources=(GPU, GPU_SHARED, MIG_PREFIX + "*"))

    def read(self, pod: PodView) -> ReadBack | None:
        """vGPUs, memory MiB and cores percent; an impossible figure is a note and left unset. The memory is
        pending until a node's device memory checks it (:meth:`finish`)."""
        res = pod.resources
        if not any(k in res for k in VOLCANO_RESOURCES):
            return None
        number = res.get(NAMES.number)
        if number is None or number < 1:
            pod.notes.append(f"{NAMES.number} missing or under 1 beside {NAMES.memory_mib}/{NAMES.cores_pct}; "
                             "read as one vGPU")
            number = 1.0
        mem, cores = res.get(NAMES.memory_mib), res.get(NAMES.cores_pct)
        if mem is not None and not 0 < mem <= MAX_DEVICE_MIB:
            pod.notes.append(f"{NAMES.memory_mib}={mem:g} is not a memory size; ignored")
            mem = None
        if cores is not None and not 0 < cores <= 100:
            pod.notes.append(f"{NAMES.cores_pct}={cores:g} is outside (0, 100] percent; ignored")
            cores = None
        return ReadBack(VolcanoShare(mem, cores), _count(number, NAMES.number, pod.notes), mem)

    def finish(self, read: ReadBack, device_memory_mib: float | None, notes: list[str]) -> ReadBack:
        """A vGPU asking more memory than its device has cannot be granted: read as the whole device."""
        share = read.share
        if read.pending is None or not isinstance(share, VolcanoShare) or not device_memory_mib \
                or share.memory_mib is None or share.memory_mib <= device_memory_mib:
            return read
        notes.append(f"{NAMES.memory_mib}={share.memory_mib:g} MiB is larger than the device "
                     f"({device_memory_mib:g} MiB): no such vGPU can be granted; read as the whole device")
        return replace(read, share=replace(share, memory_mib=float(device_memory_mib)))


MECHANISMS.add("volcano-vgpu", Volcano())
