"""The GPU right-sizing policy: memory and compute need → MIG slice or whole GPU, vLLM memory fraction.

Each step that cannot be taken says why ("no recommendation: ..."), never a silent default.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from policies.attribution import KEPT_CONFIDENCE, grows, keep_current, pod_features, shared_device, shared_reasons
from policies.compute import ComputeNeed, compute_need
from policies.estimators import confidence, confidence_multiplier
from policies.mechanism import SCHEDULER_FRACTIONS, mechanisms
from policies.memory import MemoryNeed, memory_need
from policies.mig import bounded_profile, missed_too_often
from policies.modelcards import ModelCards
from policies.nogain import held, share_gain
from policies.registry import register_policy
from policies.replicas import ttft_objective
from policies.risk import assess_risk
from policies.vllmargs import vllm_args
from recommender.analysis.features import WorkloadFeatures
from recommender.analysis.tenancy import tenant_of
from recommender.core.catalogue import Catalogue, GpuModel, MigProfile
from recommender.core.inventory import Allocation, Sharing, Workload
from recommender.core.plan import Bound, Classification, Forecast, Recommendation, WorkloadClass, WorkloadConstraints
from recommender.core.settings import Settings
from recommender.mechanisms import MECHANISMS
from recommender.mechanisms.base import Need, NoFit
from recommender.mechanisms.dra import as_claim
from recommender.mechanisms.hami import HamiShare
from recommender.mechanisms.kai import KaiShare
from recommender.mechanisms.mig import MigShare
from recommender.mechanisms.mps import MpsShare
from recommender.mechanisms.sizing import size_share
from recommender.mechanisms.time_slicing import time_slices

HOUR_S = 3600.0
PROVISIONAL_MAX_CONFIDENCE = 0.25  # a provisional recommendation's confidence: low, under _risk's 0.5 bar


@dataclass(frozen=True)
class Context:
    """What a policy sees of one workload."""

    workload: Workload
    features: WorkloadFeatures
    settings: Settings
    catalogue: Catalogue
    cards: ModelCards
    classification: Classification | None = None
    forecasts: tuple[Forecast, ...] = ()
    constraints: WorkloadConstraints | None = None  # a policy object's, in the controller


def _none(ctx: Context, *reasons: str, risk: str = "low") -> Recommendation:
    alloc = ctx.workload.allocation
    return Recommendation(ctx.workload, None, (*reasons, *ctx.workload.notes), 0.0,
                          gpus_held=alloc.total_gpu_equivalents, gpus_needed=alloc.total_gpu_equivalents,
                          risk=risk, history_s=ctx.features.history_s, risk_reasons=("nothing to apply",))


def _precheck(ctx: Context) -> tuple[str, ...] | GpuModel:
    """The GPU model, or the reasons no recommendation can be made."""
    w, f, p = ctx.workload, ctx.features, ctx.settings.policy
    if w.allocation.sharing is Sharing.NONE:
        return ("no recommendation: no GPU resource found in its spec",)
    if f.unusable:  # the data-quality stage dropped too much (recommender.analysis.quality)
        return (f.unusable,)
    floor_s = min(p.provisional_min_history_s, p.min_history_s)
    if f.history_s < floor_s:
        need = (f"{floor_s / HOUR_S:g} h for a provisional recommendation, {p.min_history_s / HOUR_S:g} h for a firm "
                "one" if floor_s < p.min_history_s else f"{p.min_history_s / HOUR_S:g} h")
        return (f"no recommendation: not enough history ({f.history_s / HOUR_S:.1f} h of usage, need {need})",)
    gpu = ctx.catalogue.get(w.allocation.gpu_model)
    if gpu is None:
        product = w.allocation.gpu_product or "not reported"
        return (f"no recommendation: unknown GPU model ({product}); add it to the GPU catalogue "
                "(--gpu-catalogue FILE)",)
    return gpu


FRACTION_MECHANISMS = {"mps": Sharing.MPS, "hami": Sharing.HAMI, "kai": Sharing.KAI}


def _whole(ctx: Context, gpu: GpuModel) -> Allocation:
    alloc = ctx.workload.allocation
    devices = max(alloc.gpus, alloc.vllm.tensor_parallel_size if alloc.vllm else 1, 1)
    return Allocation(Sharing.EXCLUSIVE, gpus=devices, gpu_model=gpu.key, gpu_product=alloc.gpu_product,
                      device_memory_mib=gpu.memory_mib, gpu_equivalents=float(devices), replicas=alloc.replicas)


Placed = tuple[Allocation, str, MigProfile | None]


def _placement_memory(ctx: Context, mem: Bound) -> Bound:
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


def _placement(ctx: Context, gpu: GpuModel, mem: Bound, comp: Bound | None
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


def _idle(ctx: Context) -> Recommendation | None:
    """Scale to zero when the GPU did nothing for the whole window."""
    f = ctx.features
    if f.idle_frac is None or f.idle_frac < 0.999 or f.history_s < ctx.settings.policy.min_history_s:
        return None
    w = ctx.workload
    conf = confidence(f.history_s, f.coverage_frac, ctx.settings.policy.full_confidence_history_s, f.usable_frac)
    rec = replace(w.allocation, replicas=0)
    why = (f"idle for the whole window ({f.history_s / HOUR_S:.0f} h: engine activity ≤ "
           f"{ctx.settings.policy.idle_compute_frac:.0%}, no requests): scale to zero (e.g. KEDA minReplicaCount 0)")
    cold = f" ({w.cold_start_s:,.0f} s)" if w.cold_start_s is not None else ""
    return Recommendation(w, rec, (why, *w.notes), conf, gpus_held=w.allocation.total_gpu_equivalents,
                          gpus_needed=0.0, risk="medium", history_s=f.history_s,
                          risk_reasons=(f"scale to zero: the first request after idle waits a cold start{cold}",))


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
    shared = shared_device(w, ctx.settings.mechanisms)  # per-device figures held to what the pod can hold
    mem = memory_need(w, pod_features(f, shared), ctx.cards, ctx.settings.policy)
    comp = compute_need(w.allocation, f, ctx.catalogue, ctx.settings.policy)
    if mem.bound is None:
        return _none(ctx, *(f"no recommendation: {r}" for r in mem.reasons))
    alloc, where, prof = _placement(ctx, gpu, _placement_memory(ctx, mem.bound), comp.bound)
    if w.allocation.sharing is Sharing.DRA:  # its GPUs come through ResourceClaims: so does the recommendation
        alloc, claimed = as_claim(alloc)
        where = [*where[:1], *([claimed] if claimed else []), *where[1:]]
    attributed = shared_reasons(shared, f.fb_used_mib, mem.kv_bytes_per_token is not None) if shared else ()
    device_mib = alloc.device_memory_mib or gpu.memory_mib
    engine = vllm_args(w.allocation.vllm, mem, device_mib, gpu.key, ctx.settings.policy, f,
                       held(w.allocation, alloc, ctx.settings.mechanisms))
    vllm = engine.vllm
    alloc = replace(alloc, vllm=vllm)
    if alloc.sharing is Sharing.KAI and vllm and vllm.gpu_memory_utilization:  # KAI: vLLM must self-limit
        alloc = replace(alloc, share=KaiShare(max(alloc.kai_gpu_fraction or 0.0, vllm.gpu_memory_utilization)))
    conf = confidence(f.history_s, f.coverage_frac, ctx.settings.policy.full_confidence_history_s, f.usable_frac,
                      mem.bound)
    if comp.bound is None:
        conf = round(conf * 0.5, 3)
    provisional = _provisional(ctx)
    conf = min(conf, PROVISIONAL_MAX_CONFIDENCE) if provisional else conf
    waiting = f.requests_waiting.p95 if f.requests_waiting is not None else 0.0
    if shared and grows(alloc, w.allocation):  # from upper bounds: shrink, never grow
        return _kept(ctx, gpu, alloc, mem, comp, conf, waiting, provisional,
                     (*attributed, *mem.reasons, *comp.reasons, *w.notes))
    heads = (*provisional, *(x for x in (engine.unchanged, share_gain(w.allocation, alloc)) if x))
    reasons = (*heads, *where, *attributed, *mem.reasons, *comp.reasons, *engine.reasons, *w.notes)
    level, why = assess_risk(mem.bound, alloc, device_mib, waiting, conf, prof)
    return Recommendation(
        w, alloc, reasons, conf, memory_need_mib=mem.bound, compute_need_frac=comp.bound,
        gpus_held=w.allocation.total_gpu_equivalents, gpus_needed=alloc.total_gpu_equivalents,
        risk=level, history_s=f.history_s, mechanism=alloc.sharing.value, risk_reasons=why,
        provisional=bool(provisional),
    )


def _kept(ctx: Context, gpu: GpuModel, placed: Allocation, mem: MemoryNeed, comp: ComputeNeed, conf: float,
          waiting: float, provisional: tuple[str, ...], reasons: tuple[str, ...]) -> Recommendation:
    """The current allocation kept on a shared GPU (policies.attribution.keep_current), with its risk and why."""
    w = ctx.workload
    assert mem.bound is not None
    level, why = assess_risk(mem.bound, w.allocation, w.allocation.device_memory_mib or gpu.memory_mib, waiting,
                             round(conf * KEPT_CONFIDENCE, 3), None)
    kept = keep_current(w, placed, reasons, conf, level, mem.bound, comp.bound, ctx.features.history_s)
    if kept.risk != level:  # raised: its need comes from figures that include the other pods
        why = (*(why if level != "low" else ()), "its need is read from per-device figures that include the other "
               "pods on the GPU: at least medium")
    return replace(kept, reasons=(*provisional, *kept.reasons), provisional=bool(provisional), risk_reasons=why)


def _provisional(ctx: Context) -> tuple[str, ...]:
    """Why the recommendation is provisional (history between the floor and ``min_history_s``), or nothing."""
    h, p = ctx.features.history_s, ctx.settings.policy
    if h >= p.min_history_s:
        return ()
    return (f"provisional: {h / HOUR_S:.1f} h of history, under the {p.min_history_s / HOUR_S:g} h a firm "
            f"recommendation needs: upper bounds widened x{confidence_multiplier(h):.1f}, confidence low, not "
            "applied by the controller's Auto mode",)
