"""Compute need as a share of one whole GPU's SMs.

``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` is relative to the device or slice the pod sees (it works on MIG,
where ``GPU_UTIL`` does not), so it is scaled by the share of SMs the workload held.
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.estimators import percentile, with_confidence, with_margin
from recommender.analysis.features import Quantiles, WorkloadFeatures
from recommender.core.catalogue import Catalogue
from recommender.core.inventory import Allocation
from recommender.core.plan import Bound
from recommender.core.settings import PolicySettings
from recommender.mechanisms import for_sharing


@dataclass(frozen=True)
class ComputeNeed:
    bound: Bound | None
    reasons: tuple[str, ...]


def sm_share_held(alloc: Allocation, catalogue: Catalogue) -> tuple[float, str | None]:
    """Share of one whole GPU's SMs a replica's device/slice gives it, with a caveat if approximate (its
    mechanism's :meth:`~recommender.mechanisms.base.Mechanism.sm_share`; no GPU: 1)."""
    mechanism = for_sharing(alloc.sharing)
    return mechanism.sm_share(alloc, catalogue.get(alloc.gpu_model)) if mechanism is not None else (1.0, None)


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
    mechanism = for_sharing(alloc.sharing)
    return mechanism.compute_held(alloc, catalogue.get(alloc.gpu_model)) if mechanism is not None else None
