"""The GPU right-sizing policy: memory and compute need → MIG slice or whole GPU, vLLM memory fraction.

Each step that cannot be taken says why ("no recommendation: ..."), never a silent default.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from policies.catalogue import Catalogue, GpuModel, MigProfile
from policies.compute import compute_need
from policies.estimators import confidence
from policies.memory import memory_need
from policies.mig import smallest_profile
from policies.modelcards import ModelCards
from policies.registry import register_policy
from recommender.features import WorkloadFeatures
from recommender.model import Allocation, Bound, Recommendation, Sharing, VllmArgs, Workload
from recommender.settings import Settings

HOUR_S = 3600.0


@dataclass(frozen=True)
class Context:
    """What a policy sees of one workload."""

    workload: Workload
    features: WorkloadFeatures
    settings: Settings
    catalogue: Catalogue
    cards: ModelCards


def _none(ctx: Context, *reasons: str, risk: str = "low") -> Recommendation:
    alloc = ctx.workload.allocation
    return Recommendation(ctx.workload, None, (*reasons, *ctx.workload.notes), 0.0,
                          gpus_held=alloc.total_gpu_equivalents, gpus_needed=alloc.total_gpu_equivalents,
                          risk=risk, history_s=ctx.features.history_s)


def _precheck(ctx: Context) -> tuple[str, ...] | GpuModel:
    """The GPU model, or the reasons no recommendation can be made."""
    w, f, p = ctx.workload, ctx.features, ctx.settings.policy
    if w.allocation.sharing is Sharing.NONE:
        return ("no recommendation: no GPU resource found in its spec",)
    if f.history_s < p.min_history_s:
        return (f"no recommendation: not enough history ({f.history_s / HOUR_S:.1f} h of usage, "
                f"need {p.min_history_s / HOUR_S:.0f} h)",)
    gpu = ctx.catalogue.get(w.allocation.gpu_model)
    if gpu is None:
        product = w.allocation.gpu_product or "not reported"
        return (f"no recommendation: unknown GPU model ({product}); add it to the GPU catalogue "
                "(--gpu-catalogue FILE)",)
    return gpu


def _vllm_fraction(ctx: Context, need_mib: float, device_mib: float) -> tuple[VllmArgs | None, str | None]:
    vllm = ctx.workload.allocation.vllm
    if vllm is None:
        return None, None
    p = ctx.settings.policy
    frac = min(max(need_mib / device_mib, p.vllm_min_gpu_memory_utilization), p.vllm_max_gpu_memory_utilization)
    frac = math.ceil(frac * 100) / 100
    was = f"{vllm.gpu_memory_utilization:g}" if vllm.gpu_memory_utilization else "default"
    return (replace(vllm, gpu_memory_utilization=frac),
            f"vLLM --gpu-memory-utilization {was} → {frac:.2f} of {device_mib:,.0f} MiB")


def _placement(ctx: Context, gpu: GpuModel, mem: Bound, comp: Bound | None
               ) -> tuple[Allocation, float, str, MigProfile | None]:
    """Smallest MIG slice that fits (if allowed and useful), else whole GPUs; with the device memory."""
    w, p = ctx.workload, ctx.settings.policy
    alloc = w.allocation
    per_replica_devices = max(alloc.gpus, alloc.vllm.tensor_parallel_size if alloc.vllm else 1, 1)
    need_frac = comp.target if comp else 1.0
    base = Allocation(Sharing.EXCLUSIVE, gpus=per_replica_devices, gpu_model=gpu.key,
                      gpu_product=alloc.gpu_product, device_memory_mib=gpu.memory_mib,
                      gpu_equivalents=float(per_replica_devices), replicas=alloc.replicas)
    if per_replica_devices > 1:
        return base, gpu.memory_mib, f"multi-GPU replica ({per_replica_devices} devices) keeps its GPU count", None
    if not gpu.supports_mig or not p.allow_mig:
        why = f"{gpu.key} has no MIG" if not gpu.supports_mig else "MIG not allowed by settings"
        return base, gpu.memory_mib, f"whole GPU: {why}", None
    prof = smallest_profile(gpu, mem.target, need_frac)
    if prof is None or gpu.share(prof) >= 1.0:
        return base, gpu.memory_mib, "whole GPU: no smaller MIG slice holds the need", None
    mig = replace(base, sharing=Sharing.MIG, gpus=0, mig_profile=prof.name, mig_count=1,
                  device_memory_mib=prof.usable_mib, gpu_equivalents=gpu.share(prof))
    est = "" if prof.usable_verified else " (usable memory estimated from the name: unverified)"
    why = (f"MIG {prof.name}: smallest {gpu.key} slice with ≥ {mem.target:,.0f} MiB "
           f"({prof.usable_mib:,.0f} usable{est}) and ≥ {need_frac:.2f} GPU of compute")
    return mig, prof.usable_mib, why, prof


def _risk(ctx: Context, mem: Bound, device_mib: float, conf: float, prof: MigProfile | None) -> str:
    f = ctx.features
    queueing = f.requests_waiting is not None and f.requests_waiting.p95 > 0
    if mem.upper > device_mib or queueing:
        return "high"
    if conf < 0.5 or (prof is not None and not prof.usable_verified):
        return "medium"
    return "low"


def _idle(ctx: Context) -> Recommendation | None:
    """Scale to zero when the GPU did nothing for the whole window."""
    f = ctx.features
    if f.idle_frac is None or f.idle_frac < 0.999 or f.history_s < ctx.settings.policy.min_history_s:
        return None
    w = ctx.workload
    conf = confidence(f.history_s, f.coverage_frac, ctx.settings.policy.full_confidence_history_s)
    rec = replace(w.allocation, replicas=0)
    why = (f"idle for the whole window ({f.history_s / HOUR_S:.0f} h: engine activity ≤ "
           f"{ctx.settings.policy.idle_compute_frac:.0%}, no requests): scale to zero (e.g. KEDA minReplicaCount 0)")
    return Recommendation(w, rec, (why, *w.notes), conf, gpus_held=w.allocation.total_gpu_equivalents,
                          gpus_needed=0.0, risk="medium", history_s=f.history_s)


@register_policy("gpu-rightsize")
def rightsize(ctx: Context) -> Recommendation:
    """Right-size one workload's GPU: the spine policy."""
    checked = _precheck(ctx)
    if isinstance(checked, tuple):
        return _none(ctx, *checked)
    gpu, w, f = checked, ctx.workload, ctx.features
    idle = _idle(ctx)
    if idle is not None:
        return idle
    mem = memory_need(w, f, ctx.cards, ctx.settings.policy)
    comp = compute_need(w.allocation, f, ctx.catalogue, ctx.settings.policy)
    if mem.bound is None:
        return _none(ctx, *(f"no recommendation: {r}" for r in mem.reasons))
    alloc, device_mib, where, prof = _placement(ctx, gpu, mem.bound, comp.bound)
    vllm, vllm_why = _vllm_fraction(ctx, mem.bound.target, device_mib)
    alloc = replace(alloc, vllm=vllm)
    conf = confidence(f.history_s, f.coverage_frac, ctx.settings.policy.full_confidence_history_s)
    if comp.bound is None:
        conf = round(conf * 0.5, 3)
    reasons = (where, *mem.reasons, *comp.reasons, *((vllm_why,) if vllm_why else ()), *w.notes)
    return Recommendation(
        w, alloc, reasons, conf, memory_need_mib=mem.bound, compute_need_frac=comp.bound,
        gpus_held=w.allocation.total_gpu_equivalents, gpus_needed=alloc.total_gpu_equivalents,
        risk=_risk(ctx, mem.bound, device_mib, conf, prof), history_s=f.history_s,
    )
