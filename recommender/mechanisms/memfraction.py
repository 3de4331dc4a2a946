"""A share of one GPU's memory as a fraction (0-1], asked either as that fraction or in MiB: KAI's and Run:ai's
``gpu-fraction`` / ``gpu-memory`` annotations. A MiB figure stays pending until a node says the device's memory."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from recommender.core.catalogue import GpuModel
from recommender.core.inventory import Share
from recommender.mechanisms.base import Need, NoFit, ReadBack, Sized
from recommender.mechanisms.sizing import size_share


@dataclass(frozen=True)
class MemoryFraction(Share):
    """The fraction of one GPU's memory (0-1]; None: asked in MiB and not yet read as a fraction, or unreadable."""

    gpu_fraction: float | None = None


def size_fraction(need: Need, gpu: GpuModel, share_type: type[MemoryFraction], whole: str) -> Sized | NoFit:
    """The smallest share of ``gpu`` that holds ``need``, its fraction rounded up to a percent; ``whole``: why
    not, when only the whole GPU does."""
    share = size_share(need.compute_frac, need.memory_mib, gpu.memory_mib)
    if share is None:
        return NoFit(whole)
    frac = math.ceil(share.memory_frac * 100 - 1e-9) / 100
    return Sized(share_type(frac), 1, share.gpu_equivalents, float(gpu.memory_mib))


def finish_fraction(read: ReadBack, device_memory_mib: float | None, notes: list[str],
                    share_type: type[MemoryFraction], what: str, *, say_whole: bool = False) -> ReadBack:
    """``read``'s pending MiB as a fraction of ``device_memory_mib`` (a whole GPU at most), said in ``notes``
    under ``what`` (the annotation, e.g. "KAI gpu-memory"); ``say_whole``: say so where it is over the device."""
    share = read.share
    if read.pending is None or not isinstance(share, share_type) or share.gpu_fraction is not None \
            or not device_memory_mib:
        return read
    if not read.pending > 0:  # the tenant's annotation: no fraction of a device is negative or nothing
        notes.append(f"{what}={read.pending:g} MiB is not a memory size: ignored")
        return replace(read, pending=None)
    if say_whole and read.pending > device_memory_mib:
        notes.append(f"{what}={read.pending:g} MiB is larger than the device ({device_memory_mib:g} MiB): read as "
                     "the whole GPU")
    else:
        notes.append(f"{what}={read.pending:g} MiB of {device_memory_mib:g} MiB read as a fraction")
    return replace(read, share=replace(share, gpu_fraction=min(1.0, read.pending / device_memory_mib)))


def unresolved_fraction(read: ReadBack, share_type: type[MemoryFraction], what: str) -> str | None:
    """What stays unknown of ``read`` without a node's device memory: its fraction, asked in MiB."""
    if read.pending is not None and isinstance(read.share, share_type) and read.share.gpu_fraction is None:
        return f"{what}={read.pending:g} MiB: fraction unknown without GPU memory"
    return None
