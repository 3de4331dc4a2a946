"""Compute need as a share of one whole GPU's SMs.

``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` is relative to the device or slice the pod sees (it works on MIG,
where ``GPU_UTIL`` does not), so it is scaled by the share of SMs the workload held.
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.estimators import percentile, with_confidence, with_margin
from recommender.analysis.features import Quantiles, WorkloadFeatures
from recommender.core.catalogue import Catalogue
from recommender.core.inventory import Allocation, Sharing
from recommender.core.plan import Bound
from recommender.core.settings import PolicySettings


@dataclass(frozen=True)
class ComputeNeed:
    bound: Bound | None
    reasons: tuple[str, ...]


def sm_share_held(alloc: Allocation, catalogue: Catalogue) -> tuple[float, str | None]:
    """Share of one whole GPU's SMs a replica's device/slice gives it, with a caveat if approximate."""
    gpu = catalogue.get(alloc.gpu_model)
    match alloc.sharing:
        case Sharing.MIG:
            prof = gpu.profile(alloc.mig_profile) if gpu and alloc.mig_profile else None
            if gpu and prof:
                return prof.shape.sm_slices / gpu.sm_slices, None
            return alloc.gpu_equivalents / max(alloc.mig_count, 1), "SM share of the MIG slice guessed"
        case Sharing.MPS if alloc.mps_active_thread_pct:
            return alloc.mps_active_thread_pct / 100, None
        case Sharing.HAMI if alloc.hami_gpucores_pct:
            return alloc.hami_gpucores_pct / 100, None
        case Sharing.VOLCANO if alloc.volcano_vgpu_cores_pct:
            return alloc.volcano_vgpu_cores_pct / 100, None
        case Sharing.TIME_SLICING | Sharing.MPS | Sharing.KAI | Sharing.VOLCANO | Sharing.RUNAI:
            return 1.0, "engine activity is per device under GPU sharing: it includes the other tenants"
    return 1.0, None


def compute_need(alloc: Allocation, f: WorkloadFeatures, catalogue: Catalogue, p: PolicySettings) -> ComputeNeed:
    """Per-device compute need (share of a whole GPU) from engine activity scaled by the share held."""
    act = f.gr_engine_active_frac
    if act is None:
        return ComputeNeed(None, ("metric missing: no DCGM_FI_PROF_GR_ENGINE_ACTIVE (or GPU_UTIL) series",))
    share, caveat = sm_share_held(alloc, catalogue)
    scaled = Quantiles(*(v * share for v in (act.p50, act.p95, act.p99, act.max, act.mean)))
    est = with_confidence(f.history_s, with_margin(p.compute_margin_frac, percentile(p.compute_percentile)))
    why = (f"engine active p{p.compute_percentile * 100:g} {act.at(p.compute_percentile):.0%} of a "
           f"{share:.2f}-GPU share = {scaled.at(p.compute_percentile):.2f} GPU, +{p.compute_margin_frac:.0%} margin")
    return ComputeNeed(est(scaled), (why, caveat) if caveat else (why,))


def compute_held(alloc: Allocation, catalogue: Catalogue) -> float | None:
    """Whole GPUs' worth of compute one replica can use: its devices, its MIG slices' SM share, its MPS or
    HAMi core share (of each device; :func:`sm_share_held`), or its time share (time-slicing, KAI). None where
    that is unknown (a MIG profile the catalogue lacks, no GPU): what moving a replica to another shape
    multiplies its throughput by, in the estimate that assumes throughput follows compute."""
    match alloc.sharing:
        case Sharing.EXCLUSIVE:
            return float(alloc.gpus) if alloc.gpus > 0 else None
        case Sharing.TIME_SLICING | Sharing.KAI | Sharing.RUNAI:
            return alloc.gpu_equivalents or None
        case Sharing.NONE:
            return None
    share, caveat = sm_share_held(alloc, catalogue)
    if alloc.sharing is Sharing.MIG:
        return None if caveat else share * max(alloc.mig_count, 1)  # a guessed slice share is no figure
    return share * max(alloc.gpus, 1)
