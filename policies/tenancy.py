"""Fractional shares grouped by tenant before packing, and the GPUs keeping tenants apart costs.

A fractional share (MPS, time-slicing, HAMi, KAI) shares a GPU with other clients; a mechanism that isolates
neither memory nor faults (``recommender.mechanisms.base.isolates``) may only share it with clients of the
same tenant (:func:`recommender.analysis.tenancy.tenant_of`, ``mechanisms.tenancy``). Shares are therefore
packed per (GPU model, tenant); a mechanism that isolates (none of today's fractional ones) packs across
tenants. :func:`tenancy_cost` packs each model's shares once more as if every tenant could share, and says
which workloads the difference is about. Pure: no I/O.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from policies.fractions import Share, pack_fractions
from recommender.analysis.tenancy import tenant_of
from recommender.core.catalogue import Catalogue
from recommender.core.plan import Recommendation
from recommender.core.settings_tenancy import TenancySettings
from recommender.mechanisms import for_sharing
from recommender.mechanisms.base import isolates

ANY_TENANT = ""  # the tenant key of shares whose mechanism isolates: they pack with anyone


@dataclass(frozen=True)
class ShareGroup:
    """Recommended fractional replicas that may be packed onto the same GPUs: one GPU model, one tenant (or
    ``ANY_TENANT``); ``tenant`` in words and the workloads (keys) the shares belong to."""

    model: str
    tenant_key: str
    tenant: str
    shares: tuple[Share, ...]
    workloads: tuple[str, ...]


@dataclass(frozen=True)
class TenancyCost:
    """Whole GPUs the packed figure holds because tenants are kept apart, per GPU model, and the reason to put
    on each workload whose shares were kept apart on a model where that cost GPUs."""

    gpus: int
    by_model: Mapping[str, int] = field(default_factory=dict)
    reasons: Mapping[str, str] = field(default_factory=dict)  # workload key -> reason

    @property
    def warning(self) -> str | None:
        """The fleet-level statement, None when tenancy costs nothing."""
        if not self.gpus:
            return None
        where = ", ".join(f"{n} {model}" for model, n in sorted(self.by_model.items()))
        return (f"tenancy: fractional shares are packed one tenant per GPU (MPS, time-slicing, HAMi and KAI isolate "
                f"neither memory nor faults; settings mechanisms.tenancy): {self.gpus} more GPU(s) than packing "
                f"every tenant together ({where})")


def fraction(rec: Recommendation, catalogue: Catalogue) -> tuple[str, float, float] | None:
    """(GPU model, compute share, memory MiB) of one recommended fractional replica; None when the workload
    is not packed as a fraction (MIG slices, whole GPUs, no recommendation, unknown model)."""
    alloc = rec.recommended
    gpu = catalogue.get(alloc.gpu_model) if alloc is not None else None
    mechanism = for_sharing(alloc.sharing) if alloc is not None else None
    got = mechanism.fraction(alloc) if mechanism is not None and alloc is not None else None
    return (gpu.key, *got) if gpu is not None and got is not None else None


def share_groups(recs: Sequence[Recommendation], catalogue: Catalogue, tenancy: TenancySettings
                 ) -> list[ShareGroup]:
    """The fleet's recommended fractional replicas, grouped by GPU model and tenant (sorted, deterministic)."""
    shares: dict[tuple[str, str], list[Share]] = defaultdict(list)
    names: dict[tuple[str, str], str] = {}
    owners: dict[tuple[str, str], list[str]] = defaultdict(list)
    for r in recs:
        got = fraction(r, catalogue)
        if got is None or r.recommended is None:
            continue
        model, compute, memory = got
        mechanism = for_sharing(r.recommended.sharing)
        if mechanism is not None and isolates(mechanism):
            key, words = (model, ANY_TENANT), "any tenant"
        else:
            tenant = tenant_of(r.workload, tenancy)
            key, words = (model, tenant.key), tenant.why
        names[key] = words
        owners[key].append(r.ref.key)
        shares[key].extend(Share(f"{r.ref.key}#{i}", compute, memory) for i in range(r.recommended.replicas))
    return [ShareGroup(k[0], k[1], names[k], tuple(shares[k]), tuple(owners[k])) for k in sorted(shares)]


def packed_fraction_gpus(groups: Sequence[ShareGroup], catalogue: Catalogue) -> int:
    """Whole GPUs the groups' shares take, each group packed on GPUs of its own."""
    return sum(pack_fractions(g.shares, catalogue.gpus[g.model].memory_mib).n_gpus for g in groups)


def tenancy_cost(recs: Sequence[Recommendation], catalogue: Catalogue, tenancy: TenancySettings) -> TenancyCost:
    """GPUs keeping tenants apart costs: per model, the groups packed apart against all of them packed together."""
    by_model: dict[str, list[ShareGroup]] = defaultdict(list)
    for g in share_groups(recs, catalogue, tenancy):
        by_model[g.model].append(g)
    cost: dict[str, int] = {}
    reasons: dict[str, str] = {}
    for model, groups in sorted(by_model.items()):
        kept = [g for g in groups if g.tenant_key != ANY_TENANT]
        if len(kept) < 2:
            continue
        apart = packed_fraction_gpus(groups, catalogue)
        together = pack_fractions([s for g in groups for s in g.shares], catalogue.gpus[model].memory_mib).n_gpus
        if apart <= together:
            continue
        cost[model] = apart - together
        for g in kept:
            for w in g.workloads:
                reasons[w] = (f"tenancy: shares a {model} only with workloads of {g.tenant} ({len(kept)} tenants hold "
                              f"fractional {model} shares, kept on separate GPUs: {apart - together} more GPU(s) than "
                              "packing them together)")
    return TenancyCost(sum(cost.values()), cost, reasons)


def with_tenancy_reasons(recs: Sequence[Recommendation], cost: TenancyCost) -> list[Recommendation]:
    """The recommendations, with the tenancy reason on each workload it concerns."""
    return [replace(r, reasons=(*r.reasons, cost.reasons[r.ref.key])) if r.ref.key in cost.reasons else r
            for r in recs]
