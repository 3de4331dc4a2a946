"""Run:ai GPU fractions: pod annotations ``gpu-fraction`` (of one GPU's memory, (0, 1]) or ``gpu-memory`` (MiB),
on pods scheduled by ``runai-scheduler`` (names from ``data/schedulers.yaml``, unverified: not in reference.md;
the same annotations under ``kai-scheduler`` are KAI's, read by :mod:`recommender.mechanisms.kai`).

Report-only: the fraction is sized and recommended, but the tool writes nothing (Run:ai's scheduler and its
workload objects own these annotations), so :meth:`Runai.pod_edits` is empty and ``how_to_apply`` says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from recommender.core.catalogue import GpuModel
from recommender.core.inventory import Allocation, Share, Sharing
from recommender.mechanisms import MECHANISMS
from recommender.mechanisms.base import Base, Need, NoFit, PodEdits, PodView, ReadBack, Sized, number
from recommender.mechanisms.memfraction import MemoryFraction, finish_fraction, size_fraction, unresolved_fraction
from recommender.mechanisms.schedulers import runai_names, unverified

NAMES = runai_names()
REPORT_ONLY = "report-only: set it through Run:ai yourself; the rightsizer never writes Run:ai fractions"


@dataclass(frozen=True)
class RunaiShare(MemoryFraction):
    """Run:ai's fraction of one GPU's memory (0-1]; None: asked by ``gpu-memory`` (pending) or unreadable."""

    sharing: ClassVar[Sharing] = Sharing.RUNAI
    FLAT: ClassVar[tuple[str, ...]] = ("runai_gpu_fraction",)


class Runai(Base):
    name, sharing, read_rank = "runai", Sharing.RUNAI, 15  # before KAI: same annotations, other scheduler
    share_type: type[Share] | None = RunaiShare
    report_only = True

    def size(self, need: Need, gpu: GpuModel) -> Sized | NoFit:
        return size_fraction(need, gpu, RunaiShare, "the need is a whole GPU: no fraction smaller than one holds it")

    def gpu_equivalents(self, alloc: Allocation, gpu: GpuModel | None) -> tuple[float, str | None] | None:
        if alloc.runai_gpu_fraction:
            return alloc.runai_gpu_fraction, None
        return 1.0, f"Run:ai fraction unreadable: counted as a whole GPU{unverified(NAMES.verified)}"

    def fraction(self, alloc: Allocation) -> tuple[float, float] | None:
        return alloc.gpu_equivalents, alloc.gpu_equivalents * (alloc.device_memory_mib or 0.0)

    def label(self, alloc: Allocation) -> str:
        frac = f" {alloc.runai_gpu_fraction:g}" if alloc.runai_gpu_fraction is not None else ""
        return f"runai{frac} gpu (report-only)"

    def sm_share(self, alloc: Allocation, gpu: GpuModel | None) -> tuple[float, str | None]:
        return 1.0, "engine activity is per device under GPU sharing: it includes the other tenants"

    def compute_held(self, alloc: Allocation, gpu: GpuModel | None) -> float | None:
        """Its time share of the device (the fraction), as for KAI."""
        return alloc.gpu_equivalents or None

    def not_applied(self, alloc: Allocation) -> str | None:
        return "runai: report-only: Run:ai's scheduler hands out its fractions; the controller never writes them"

    def leave(self, gpus: int) -> PodEdits:
        """Nothing: a Run:ai workload is report-only."""
        return PodEdits()

    def how_to_apply(self, alloc: Allocation) -> dict[str, Any]:
        annotations = {NAMES.fraction: f"{alloc.runai_gpu_fraction:g}"} if alloc.runai_gpu_fraction else {}
        return {"report_only": REPORT_ONLY + unverified(NAMES.verified), "annotations": annotations,
                "scheduler_name": NAMES.scheduler_name}

    def pod_edits(self, alloc: Allocation) -> PodEdits:
        return PodEdits()  # report-only: nothing is ever written

    def read(self, pod: PodView) -> ReadBack | None:
        """The fraction now, ``gpu-memory`` MiB pending the device memory; None off Run:ai's scheduler or
        without either annotation. A figure that does not parse or is out of range is a note and left unset."""
        a = pod.annotations
        if pod.scheduler_name != NAMES.scheduler_name or (NAMES.fraction not in a and NAMES.memory_mib not in a):
            return None
        fraction = number(a, NAMES.fraction, pod.notes)
        if fraction is not None and not 0 < fraction <= 1:
            pod.notes.append(f"Run:ai {NAMES.fraction}={fraction:g} is outside (0, 1]; ignored")
            fraction = None
        memory = number(a, NAMES.memory_mib, pod.notes)
        if memory is not None and memory <= 0:
            pod.notes.append(f"Run:ai {NAMES.memory_mib}={memory:g} is not a memory size; ignored")
            memory = None
        return ReadBack(RunaiShare(fraction), 1, memory if fraction is None else None)

    def finish(self, read: ReadBack, device_memory_mib: float | None, notes: list[str]) -> ReadBack:
        """gpu-memory becomes a fraction once the device memory is known (a whole GPU at most)."""
        return finish_fraction(read, device_memory_mib, notes, RunaiShare, f"Run:ai {NAMES.memory_mib}",
                               say_whole=True)

    def unresolved(self, read: ReadBack) -> str | None:
        return unresolved_fraction(read, RunaiShare, f"Run:ai {NAMES.memory_mib}")


MECHANISMS.add("runai", Runai())
