"""The GPU right-sizing policy: memory and compute need → MIG slice or whole GPU, vLLM memory fraction.

Each step that cannot be taken says why ("no recommendation: ..."), never a silent default.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from policies.attribution import KEPT_CONFIDENCE, grows, keep_current, pod_features, shared_device, shared_reasons
from policies.compute import ComputeNeed, compute_need
from policies.estimators import confidence, confidence_multiplier
from policies.memory import MemoryNeed, memory_need
from policies.modelcards import ModelCards
from policies.nogain import held, share_gain
from policies.placement import HOUR_S, place, placement_memory
from policies.registry import register_policy
from policies.risk import assess_risk
from policies.vllmargs import vllm_args
from recommender.analysis.features import WorkloadFeatures
from recommender.core.catalogue import Catalogue, GpuModel
from recommender.core.inventory import Allocation, Sharing, Workload
from recommender.core.plan import Classification, Forecast, Recommendation, WorkloadConstraints
from recommender.core.settings import Settings
from recommender.mechanisms.dra import as_claim
from recommender.mechanisms.kai import KaiShare

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
    alloc, where, prof = place(ctx, gpu, placement_memory(ctx, mem.bound), comp.bound)
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
