"""Where a need fits: the share each allowed mechanism gives it on one GPU model (a MIG slice, a fraction
of a scheduler or the fleet's backend, a time slice, whole GPUs), the first its class prefers.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

from policies.mechanism import SCHEDULER_FRACTIONS, mechanisms
from policies.mig import bounded_profile, missed_too_often
from policies.replicas import ttft_objective
from recommender.analysis.tenancy import tenant_of
from recommender.core.catalogue import GpuModel, MigProfile
from recommender.core.inventory import Allocation, Sharing
from recommender.core.plan import Bound, WorkloadClass
from recommender.mechanisms import MECHANISMS
from recommender.mechanisms.base import Need, NoFit
from recommender.mechanisms.hami import HamiShare
from recommender.mechanisms.kai import KaiShare
from recommender.mechanisms.mig import MigShare
from recommender.mechanisms.mps import MpsShare
from recommender.mechanisms.sizing import size_share
from recommender.mechanisms.time_slicing import time_slices

if TYPE_CHECKING:
    from policies.rightsize import Context


HOUR_S = 3600.0
FRACTION_MECHANISMS = {"mps": Sharing.MPS, "hami": Sharing.HAMI, "kai": Sharing.KAI}


def _whole(ctx: Context, gpu: GpuModel) -> Allocation:
    alloc = ctx.workload.allocation
    devices = max(alloc.gpus, alloc.vllm.tensor_parallel_size if alloc.vllm else 1, 1)
    return Allocation(Sharing.EXCLUSIVE, gpus=devices, gpu_model=gpu.key, gpu_product=alloc.gpu_product,
                      device_memory_mib=gpu.memory_mib, gpu_equivalents=float(devices), replicas=alloc.replicas)


Placed = tuple[Allocation, str, MigProfile | None]


def placement_memory(ctx: Context, mem: Bound) -> Bound:
    """vLLM never gets more than ``vllm_max_gpu_memory_utilization`` of what it sees, so the slice or share
    must hold need / that fraction, or the capped fraction would fall short of the need."""
    if ctx.workload.allocation.vllm is None:
        return mem
    cap = ctx.settings.policy.vllm_max_gpu_memory_utilization
    return Bound(mem.lower / cap, mem.target / cap, mem.upper / cap)


def _mig(ctx: Context, gpu: GpuModel, mem: Bound, comp: Bound | None, base: Allocation) -> Placed | str:
    if not gpu.supports_mig or not ctx.settings.policy.allow_mig:
        return f"{gpu.key} has no MIG" if not gpu.supports_mig else "MIG not allowed by settings"
    need_frac = comp.target if comp else 1.0
    choice = bounded_profile(gpu, mem.target, need_frac, ctx.constraints)
    prof, bounds = choice.profile, "".join(f"; {r}" for r in choice.reasons)
    if prof is None and choice.reasons:
        return "; ".join(choice.reasons)
    if prof is None or gpu.share(prof) >= 1.0:
        return "no MIG slice smaller than the GPU holds the need" + bounds
    mig = replace(base, sharing=Sharing.MIG, gpus=0, share=MigShare(prof.name, 1),
                  device_memory_mib=prof.usable_mib, gpu_equivalents=gpu.share(prof))
    est = "" if prof.usable_verified else " (usable memory estimated from the name: unverified)"
    which = f"{gpu.key} slice" if choice.raised_from else f"smallest {gpu.key} slice"
    return mig, (f"MIG {prof.name}: {which} with ≥ {mem.target:,.0f} MiB "
                 f"({prof.usable_mib:,.0f} usable{est}) and ≥ {need_frac:.2f} GPU of compute{bounds}"), prof


def _fraction(ctx: Context, mech: str, gpu: GpuModel, mem: Bound, comp: Bound | None, base: Allocation
              ) -> Placed | str:
    if comp is None:
        return "compute need unknown: a share cannot be sized"
    if mech in SCHEDULER_FRACTIONS.values():
        return _scheduler_share(ctx, mech, gpu, Need(mem.target, comp.target), base)
    share = size_share(comp.target, mem.target, gpu.memory_mib)
    if share is None:
        return "the need is a whole GPU"
    ms = ctx.settings.mechanisms
    backend = ms.fraction_backend
    seen = share.memory_mib if ms.memory_seen.get(backend, "device") == "limit" else gpu.memory_mib
    common = dict(gpus=1, device_memory_mib=float(seen), gpu_equivalents=share.gpu_equivalents)
    if mech == "mps":
        alloc = replace(base, sharing=Sharing.MPS, share=MpsShare(float(share.thread_pct), float(share.memory_mib)),
                        **common)  # type: ignore[arg-type]
        how = "DRA GpuConfig" if backend == "dra" else "CUDA MPS"
        why = (f"{how} share: {share.thread_pct}% of the SMs and {share.memory_mib:,} MiB pinned; share the GPU "
               f"only with MPS clients of {tenant_of(ctx.workload, ms.tenancy).why} (an MPS client fault takes down "
               "every client on that GPU)")
    elif mech == "hami":
        alloc = replace(base, sharing=Sharing.HAMI, share=HamiShare(float(share.memory_mib), float(share.thread_pct)),
                        **common)  # type: ignore[arg-type]
        why = f"HAMi share: gpumem {share.memory_mib:,} MiB, gpucores {share.thread_pct}%"
    else:
        frac = math.ceil(share.memory_frac * 100 - 1e-9) / 100
        alloc = replace(base, sharing=Sharing.KAI, share=KaiShare(frac), **common)  # type: ignore[arg-type]
        why = (f"KAI gpu-fraction {frac:.2f} (memory); KAI enforces no limit, so the workload must keep itself "
               "within it")
    return alloc, why, None


def _scheduler_share(ctx: Context, mech: str, gpu: GpuModel, need: Need, base: Allocation) -> Placed | str:
    """A batch scheduler's own fraction (Volcano vGPU, Run:ai), sized by its plugin, in its own words."""
    m = MECHANISMS.get(mech)
    got = m.size(need, gpu)
    if isinstance(got, NoFit):
        return got.reason
    limit = ctx.settings.mechanisms.memory_seen.get(mech, "device") == "limit"
    flat = got.share.flat() if got.share is not None and limit else {}
    seen = next((float(v) for k, v in flat.items() if k.endswith("_mib") and v), None)
    alloc = replace(base, sharing=m.sharing, share=got.share, gpus=got.gpus, gpu_equivalents=got.gpu_equivalents,
                    device_memory_mib=seen or float(gpu.memory_mib))
    how = m.how_to_apply(alloc)
    terms = ", ".join(f"{k}={v}" for k, v in {**how.get("resources", {}), **how.get("annotations", {})}.items())
    only = f" ({how['report_only']})" if how.get("report_only") else ""
    return alloc, f"{mech} share on the workload's own scheduler: {terms}{only}", None


def _time_slicing(gpu: GpuModel, mem: Bound, comp: Bound | None, base: Allocation) -> Placed | str:
    if comp is None:
        return "compute need unknown: time-slices cannot be sized"
    n = time_slices(comp.target, mem.target, gpu.memory_mib)
    if n < 2:
        return "compute or memory need leaves no room for a second time-sliced client"
    alloc = replace(base, sharing=Sharing.TIME_SLICING, gpus=1, gpu_equivalents=1 / n)
    return alloc, (f"time-slicing 1/{n} of a {gpu.key}: no memory or fault isolation, so {n} clients of "
                   f"{mem.target:,.0f} MiB must fit side by side; device plugin replicas apply to every GPU of "
                   "the node (keep time-sliced batch on its own node pool)"), None


def _missed_objective(ctx: Context, cls: WorkloadClass | None) -> str | None:
    """Why a latency-bound service gets whole GPUs (``policies.mig.missed_too_often``), or None. The share is
    collected against the fleet's TTFT objective, so a service annotated with another objective is not judged
    on it."""
    s = ctx.settings.scaling
    objective, _ = ttft_objective(ctx.workload, s, ctx.constraints)
    if cls is WorkloadClass.BATCH or objective != s.ttft_objective_s or s.whole_gpu_over_budget is None:
        return None
    bar = (f"over the {objective:g} s TTFT objective", f"over {s.whole_gpu_over_budget:g}× the error budget "
           f"({s.ttft_error_budget:.0%})")
    share = ctx.features.ttft_over_objective_frac
    if missed_too_often(share, s.ttft_error_budget, s.whole_gpu_over_budget):
        return (f"whole GPU: {share:.1%} of requests {bar[0]} in the last {s.error_budget_window_s / HOUR_S:g} h, "
                f"{bar[1]}: no slice or share while headroom does not keep it within the objective")
    before = ctx.features.shape_before_over_objective_frac
    since = ctx.workload.shape_since
    if ctx.workload.allocation.sharing is Sharing.EXCLUSIVE and since is not None \
            and missed_too_often(before, s.ttft_error_budget, s.whole_gpu_over_budget):
        return (f"whole GPU, kept: on the shape it had until {since:%Y-%m-%d %H:%M} UTC, {before:.1%} of requests were "
                f"{bar[0]} in its last {s.error_budget_window_s / HOUR_S:g} h, {bar[1]}; a slice or share is "
                "offered again once that falls out of the collected window")
    return None


def place(ctx: Context, gpu: GpuModel, mem: Bound, comp: Bound | None
               ) -> tuple[Allocation, list[str], MigProfile | None]:
    """The first mechanism, in the class's order, that holds the need; else whole GPUs (always valid)."""
    base = _whole(ctx, gpu)
    cls = ctx.classification.workload_class if ctx.classification else None
    choice = mechanisms(ctx.workload, cls, ctx.settings.mechanisms)
    if choice.conflict:
        return base, [f"whole GPU: constraints contradict: {choice.conflict}", *choice.reasons], None
    if base.gpus > 1:
        return base, [f"multi-GPU replica ({base.gpus} devices) keeps its GPU count"], None
    missed = _missed_objective(ctx, cls)
    if missed:
        return base, [missed, *choice.reasons], None
    skipped: list[str] = []
    for mech in choice.order:
        if mech == "exclusive":
            why = "whole GPU" + (f" ({'; '.join(skipped)})" if skipped else "")
            return base, [why, *choice.reasons], None
        if mech == "mig":
            got = _mig(ctx, gpu, mem, comp, base)
        elif mech == "time-slicing":
            got = _time_slicing(gpu, mem, comp, base)
        else:
            got = _fraction(ctx, mech, gpu, mem, comp, base)
        if isinstance(got, str):
            skipped.append(f"{mech}: {got}")
            continue
        alloc, why, prof = got
        return alloc, [why, *choice.reasons], prof
    return base, [f"whole GPU: no allowed mechanism fits ({'; '.join(skipped)})", *choice.reasons], None
