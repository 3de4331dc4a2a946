"""What a recommendation that saves nothing must justify: it keeps the GPUs held, so a setting it changes has to
gain something the policy can name (:mod:`policies.vllmargs` for vLLM's arguments, :func:`share_gain` for a
fractional share resized within the GPU-equivalents it holds), or today's settings stay."""

from __future__ import annotations

import math
from dataclasses import dataclass

from recommender.core.inventory import Allocation, Sharing
from recommender.core.settings import MechanismSettings

WORTH = ": worth it: "  # joins a change to the gain that justifies it where nothing is saved
NO_SAVING = "no saving: settings unchanged"
_SHARE = ("mps_active_thread_pct", "mps_pinned_mem_mib", "hami_gpumem_mib", "hami_gpucores_pct", "kai_gpu_fraction",
          "volcano_vgpu_memory_mib", "volcano_vgpu_cores_pct", "runai_gpu_fraction")
# what decides the GPUs a replica holds: equal on both sides, only engine settings would change
_PLACEMENT = ("sharing", "gpus", "mig_profile", "mig_count", "replicas", *_SHARE)
# a share's limits in words: (field, what it limits, unit, scale to the unit)
_LIMITS = (("mps_active_thread_pct", "SMs", "%", 1.0), ("hami_gpucores_pct", "SMs", "%", 1.0),
           ("mps_pinned_mem_mib", "pinned memory", " MiB", 1.0), ("hami_gpumem_mib", "memory", " MiB", 1.0),
           ("kai_gpu_fraction", "gpu-fraction", "%", 100.0), ("volcano_vgpu_cores_pct", "vGPU cores", "%", 1.0),
           ("volcano_vgpu_memory_mib", "vGPU memory", " MiB", 1.0), ("runai_gpu_fraction", "gpu-fraction", "%", 100.0))


@dataclass(frozen=True)
class Held:
    """``same``: the recommendation keeps the GPUs held today, so it saves nothing; ``shared_memory``: other
    clients use the memory the process sees, so what vLLM gives back is theirs."""

    same: bool = False
    shared_memory: bool = False


def _same_total(current: Allocation, recommended: Allocation) -> bool:
    return math.isclose(current.total_gpu_equivalents, recommended.total_gpu_equivalents)


def held(current: Allocation, recommended: Allocation, ms: MechanismSettings) -> Held:
    """Whether ``recommended`` keeps what ``current`` holds, and whether its device memory is shared."""
    same = all(getattr(current, k) == getattr(recommended, k) for k in _PLACEMENT) and _same_total(current, recommended)
    backend = ms.fraction_backend if recommended.sharing is Sharing.MPS else recommended.sharing.value
    shared = recommended.sharing is Sharing.TIME_SLICING or (
        recommended.sharing in (Sharing.MPS, Sharing.HAMI, Sharing.KAI, Sharing.VOLCANO, Sharing.RUNAI)
        and ms.memory_seen.get(backend) == "device")
    return Held(same, shared)


def share_gain(current: Allocation, recommended: Allocation) -> str | None:
    """Where a share's limits change but the GPU-equivalents held do not (the other limit binds), what the change
    gains: a smaller limit leaves room to the other clients of the GPU, a larger one holds a need today's is under.
    None where nothing of the kind changes."""
    if current.sharing is not recommended.sharing or not _same_total(current, recommended):
        return None
    parts = []
    for name, what, unit, scale in _LIMITS:
        was, now = getattr(current, name), getattr(recommended, name)
        if was is None or now is None or math.isclose(was, now):
            continue
        gain = (f"leaves {(was - now) * scale:,.0f}{unit} to the other clients of the GPU" if now < was
                else "holds a need over today's limit")
        parts.append(f"{what} {was * scale:,.0f}{unit} → {now * scale:,.0f}{unit} {gain}")
    if not parts:
        return None
    return (f"{recommended.sharing.value} share resized within the {recommended.total_gpu_equivalents:.2f} "
            f"GPU-equivalents held (nothing saved){WORTH}{'; '.join(parts)}")
