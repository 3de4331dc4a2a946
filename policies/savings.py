"""Savings: GPUs and GPU-hours held vs needed, and money from the price table."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import MutableMapping, Sequence
from dataclasses import replace
from typing import Any

from policies.packing import pack_optimal
from policies.tenancy import fraction, packed_fraction_gpus, share_groups
from recommender.core.catalogue import Catalogue, MigProfile
from recommender.core.inventory import Sharing
from recommender.core.plan import Recommendation, Summary
from recommender.core.settings import PriceSettings
from recommender.core.settings_tenancy import TenancySettings


def with_money(rec: Recommendation, prices: PriceSettings) -> Recommendation:
    """Monthly USD saved by the recommendation (negative when it asks for more)."""
    if rec.recommended is None:
        return replace(rec, monthly_savings_usd=0.0)
    saved = rec.gpus_held - rec.gpus_needed
    price = prices.price(rec.workload.allocation.gpu_model)
    return replace(rec, monthly_savings_usd=round(saved * price * prices.hours_per_month, 2))


def packed_gpus(recs: Sequence[Recommendation], catalogue: Catalogue, tenancy: TenancySettings | None = None,
                memo: MutableMapping[str, Any] | None = None) -> int:
    """Whole GPUs the recommended fleet needs: MIG slices packed into valid layouts (exact MILP, fewest
    GPUs), fractional shares packed per GPU model and tenant (``mechanisms.tenancy``: by default a namespace;
    MPS, time-slicing, HAMi and KAI isolate neither memory nor faults), the rest whole.

    Workloads without a recommendation keep what they hold (rounded up to whole GPUs per model).
    """
    slices: dict[str, list[MigProfile]] = defaultdict(list)
    whole = 0.0
    for r in recs:
        alloc = r.recommended or r.workload.allocation
        gpu = catalogue.get(alloc.gpu_model)
        prof = gpu.profile(alloc.mig_profile) if gpu and alloc.mig_profile else None
        if alloc.sharing is Sharing.MIG and gpu is not None and prof is not None:
            slices[gpu.key].extend([prof] * (alloc.mig_count * alloc.replicas))
        elif fraction(r, catalogue) is None:
            whole += alloc.total_gpu_equivalents
    packed = sum(len(pack_optimal(catalogue.gpus[k], profs, memo=memo)) for k, profs in slices.items())
    packed += packed_fraction_gpus(share_groups(recs, catalogue, tenancy or TenancySettings()), catalogue)
    return packed + math.ceil(whole - 1e-9)


def autoscaled_gpus(rec: Recommendation) -> float | None:
    """GPU-equivalents today's replicas would hold on average under the scaling plan (today's replica
    shape: the plan's capacity is measured on it), None without a mean replica count."""
    mean = rec.scaling.mean_replicas if rec.scaling is not None else None
    if mean is None:
        return None
    return rec.gpus_held / max(1, rec.workload.allocation.replicas) * mean


def summarize(recs: Sequence[Recommendation], window_s: float, catalogue: Catalogue,
              tenancy: TenancySettings | None = None, memo: MutableMapping[str, Any] | None = None) -> Summary:
    """The fleet's totals; ``memo``: MIG packings remembered (:func:`policies.packing.solved`)."""
    hours = window_s / 3600.0
    held = sum(r.gpus_held for r in recs)
    needed = sum(r.gpus_needed for r in recs)
    scaled = [autoscaled_gpus(r) for r in recs]
    autoscaled = sum(r.gpus_held if a is None else a for r, a in zip(recs, scaled, strict=True))
    n_scaled = sum(a is not None for a in scaled)
    right_sized_autoscaled = sum(r.gpus_right_sized_autoscaled_or_needed for r in recs)
    n_both = sum(r.gpus_right_sized_autoscaled is not None for r in recs)
    return Summary(
        workloads=len(recs),
        with_recommendation=sum(1 for r in recs if r.recommended is not None),
        gpus_held=round(held, 3),
        gpus_needed=round(needed, 3),
        gpus_needed_packed=packed_gpus(recs, catalogue, tenancy, memo),
        monthly_savings_usd=round(sum(r.monthly_savings_usd or 0.0 for r in recs), 2),
        gpu_hours_held=round(held * hours, 1),
        gpu_hours_needed=round(needed * hours, 1),
        gpu_hours_autoscaled=round(autoscaled * hours, 1) if n_scaled else None,
        autoscaled_workloads=n_scaled,
        gpu_hours_right_sized_autoscaled=round(right_sized_autoscaled * hours, 1) if n_both else None,
        right_sized_autoscaled_workloads=n_both,
    )
