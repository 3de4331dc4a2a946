"""HAMi: a vGPU with HAMi-core enforcing ``nvidia.com/gpumem`` (MiB, or ``gpumem-percentage``) and
``nvidia.com/gpucores`` (percent) as container limits (reference.md §6). Sized like an MPS share; read back
from those resources, a percentage turned into MiB once a node tells the device memory."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from recommender.core.catalogue import GpuModel
from recommender.core.inventory import MAX_DEVICE_MIB, Allocation, Share, Sharing
from recommender.mechanisms import MECHANISMS
from recommender.mechanisms.base import GPU, MIG_PREFIX, Base, Need, NoFit, PodEdits, PodView, ReadBack, Sized
from recommender.mechanisms.sizing import size_share

HAMI_MEM_MIB = "nvidia.com/gpumem"
HAMI_MEM_PCT = "nvidia.com/gpumem-percentage"  # not both with gpumem
HAMI_CORES_PCT = "nvidia.com/gpucores"


@dataclass(frozen=True)
class HamiShare(Share):
    """A HAMi vGPU's limits: memory in MiB and percent of the cores; None: not set."""

    sharing: ClassVar[Sharing] = Sharing.HAMI
    FLAT: ClassVar[tuple[str, ...]] = ("hami_gpumem_mib", "hami_gpucores_pct")
    gpumem_mib: float | None = None
    gpucores_pct: float | None = None


def hami_resources(alloc: Allocation) -> dict[str, str]:
    """HAMi container limits (reference.md §6): one vGPU, memory in MiB, cores in percent."""
    out = {GPU: "1"}
    if alloc.hami_gpumem_mib is not None:
        out[HAMI_MEM_MIB] = f"{alloc.hami_gpumem_mib:.0f}"
    if alloc.hami_gpucores_pct is not None:
        out[HAMI_CORES_PCT] = f"{alloc.hami_gpucores_pct:.0f}"
    return out


def hami_whole_resources(gpus: int) -> dict[str, str]:
    """HAMi container limits for whole GPUs (reference.md §6: an exclusive GPU is gpucores 100 and
    gpumem-percentage 100): how a HAMi workload moves to whole GPUs without leaving HAMi's scheduler."""
    return {GPU: str(gpus), HAMI_CORES_PCT: "100", HAMI_MEM_PCT: "100"}


def hami_drops(values: Mapping[str, str]) -> tuple[str, ...]:
    """What setting ``values`` removes: MIG slices (a vGPU is an nvidia.com/gpu) and whichever of gpumem and
    gpumem-percentage (exclusive with each other) is not set."""
    return (MIG_PREFIX + "*", *((HAMI_MEM_PCT,) if HAMI_MEM_MIB in values else ()),
            *((HAMI_MEM_MIB,) if HAMI_MEM_PCT in values else ()))


class Hami(Base):
    name, sharing, read_rank = "hami", Sharing.HAMI, 30
    # HAMi-core enforces the limits inside the client's own container (reference.md §6): a client that controls its
    # container can lift them [INF], and a fault is the GPU's
    isolates_memory = isolates_faults = False
    share_type: type[Share] | None = HamiShare

    def size(self, need: Need, gpu: GpuModel) -> Sized | NoFit:
        share = size_share(need.compute_frac, need.memory_mib, gpu.memory_mib)
        if share is None:
            return NoFit("the need is a whole GPU")
        return Sized(HamiShare(float(share.memory_mib), float(share.thread_pct)), 1, share.gpu_equivalents,
                     float(gpu.memory_mib))

    def gpu_equivalents(self, alloc: Allocation, gpu: GpuModel | None) -> tuple[float, str | None]:
        mem = (alloc.hami_gpumem_mib / alloc.device_memory_mib
               if alloc.hami_gpumem_mib and alloc.device_memory_mib else 0.0)
        return max(mem, (alloc.hami_gpucores_pct or 0) / 100) * max(alloc.gpus, 1), None

    def fraction(self, alloc: Allocation) -> tuple[float, float] | None:
        return (alloc.hami_gpucores_pct or 100.0) / 100, alloc.hami_gpumem_mib or 0.0

    def label(self, alloc: Allocation) -> str:
        mem = f" {alloc.hami_gpumem_mib:,.0f} MiB" if alloc.hami_gpumem_mib is not None else ""
        cores = f" {alloc.hami_gpucores_pct:g}%" if alloc.hami_gpucores_pct is not None else ""
        return f"hami{mem}{cores}"

    def sm_share(self, alloc: Allocation, gpu: GpuModel | None) -> tuple[float, str | None]:
        """The gpucores cap; without one, the whole device."""
        return (alloc.hami_gpucores_pct / 100, None) if alloc.hami_gpucores_pct else (1.0, None)

    def how_to_apply(self, alloc: Allocation) -> dict[str, Any]:
        return {"resources": hami_resources(alloc)}

    def pod_edits(self, alloc: Allocation) -> PodEdits:
        if alloc.hami_gpumem_mib is None and alloc.hami_gpucores_pct is None:
            return PodEdits()
        values = hami_resources(alloc)
        return PodEdits(resources=tuple(sorted(values.items())), drop_resources=hami_drops(values))

    def not_applied(self, alloc: Allocation) -> str | None:
        if alloc.hami_gpumem_mib is None and alloc.hami_gpucores_pct is None:
            return "hami: the recommendation sizes neither gpumem nor gpucores"
        return None

    def leave(self, gpus: int) -> PodEdits:
        """HAMi's own whole GPUs (:func:`hami_whole_resources`): the workload stays with HAMi's scheduler."""
        values = hami_whole_resources(gpus)
        return PodEdits(resources=tuple(sorted(values.items())), drop_resources=hami_drops(values))

    def read(self, pod: PodView) -> ReadBack | None:
        res = pod.resources
        if not any(k in res for k in (HAMI_MEM_MIB, HAMI_MEM_PCT, HAMI_CORES_PCT)):
            return None

        def within(name: str, most: float) -> float | None:
            """The resource's value where it is a limit a device can have (0 to ``most``)."""
            value = res.get(name)
            if value is not None and not 0 <= value <= most:  # NaN too
                pod.notes.append(f"{name}={value:.6g} is not a limit from 0 to {most:,.0f}: ignored")
                return None
            return value

        mem = within(HAMI_MEM_MIB, MAX_DEVICE_MIB)
        return ReadBack(HamiShare(mem, within(HAMI_CORES_PCT, 100)), pod.gpus or 1, within(HAMI_MEM_PCT, 100))

    def finish(self, read: ReadBack, device_memory_mib: float | None, notes: list[str]) -> ReadBack:
        """gpumem-percentage becomes MiB once the device memory is known."""
        share = read.share
        if read.pending is None or not isinstance(share, HamiShare) or share.gpumem_mib is not None \
                or not device_memory_mib:
            return read
        return replace(read, share=replace(share, gpumem_mib=device_memory_mib * read.pending / 100))

    def unresolved(self, read: ReadBack) -> str | None:
        if read.pending is not None and isinstance(read.share, HamiShare) and read.share.gpumem_mib is None:
            return f"HAMi {HAMI_MEM_PCT}={read.pending:g}: MiB unknown without GPU memory"
        return None


MECHANISMS.add("hami", Hami())
