"""Shared GPUs: what of a per-device DCGM figure is one pod's own.

dcgm-exporter attributes a time-sliced or MPS GPU to every pod on it (reference.md §8), so its framebuffer used
and engine activity are the device's: every tenant's together. Such a figure is never sized as one pod's need:

* memory comes from per-pod evidence, vLLM's ``--gpu-memory-utilization`` cap (its process never holds more; its KV
  pool and KV usage are its own), or is bounded by a limit the pod cannot pass: an MPS pinned limit, HAMi's
  ``gpumem`` (HAMi-core enforces it). A time-slice's share bounds no memory (time-slicing isolates none) and KAI
  enforces none, so without a cap the device figure is all there is: an upper bound, the sum of its tenants.
* compute has no per-pod figure at all: engine activity is the device's, an upper bound of the pod's.

A need from an upper bound may shrink an allocation (the pod needs no more than that), never grow it: where the
placement would hold more than today, the current allocation is kept, with the reason, confidence halved and
risk at least medium (:func:`keep_current`). Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from recommender.analysis.features import Quantiles, WorkloadFeatures
from recommender.core.inventory import Allocation, Sharing, Workload
from recommender.core.plan import Bound, Recommendation
from recommender.core.settings import MechanismSettings

SHARED = {Sharing.TIME_SLICING: "time-sliced", Sharing.MPS: "MPS-shared", Sharing.HAMI: "HAMi-shared",
          Sharing.KAI: "KAI-shared"}
KEPT_CONFIDENCE = 0.5  # confidence is scaled by this where the current allocation is kept for want of evidence
RISK_ORDER = ("low", "medium", "high")


@dataclass(frozen=True)
class SharedDevice:
    """A replica's GPU as shared with other pods, and the most memory its own process can hold on it."""

    what: str  # "time-sliced A100-80GB, 4 pods on the device"
    pods: int | None  # pods dcgm-exporter attributes the device to, when known
    memory_cap_mib: float | None  # the least of the caps below; None: no per-pod memory bound
    memory_evidence: str | None  # where that cap comes from, in words
    vllm_cap: bool  # the cap is vLLM's own budget, of which its KV pool is part (per-pod memory evidence)
    no_isolation: str | None  # why the share itself bounds no memory (time-slicing, KAI), or None


def _pods(w: Workload) -> int | None:
    if w.device_shared_with and w.device_shared_with > 1:
        return w.device_shared_with
    a = w.allocation
    if a.sharing is Sharing.TIME_SLICING and a.gpu_equivalents > 0:
        return round(max(a.gpus, 1) / a.gpu_equivalents)
    return None


def _memory_seen(a: Allocation, ms: MechanismSettings) -> float | None:
    """The memory the process sees, what vLLM's fraction is of: its MPS or HAMi limit where the backend shows
    the limit (``mechanisms.memory_seen``), else the device."""
    if a.sharing is Sharing.MPS and a.mps_pinned_mem_mib and ms.memory_seen.get("mps") == "limit":
        return a.mps_pinned_mem_mib
    if a.sharing is Sharing.HAMI and a.hami_gpumem_mib and ms.memory_seen.get("hami") == "limit":
        return a.hami_gpumem_mib
    return a.device_memory_mib


def _caps(a: Allocation, ms: MechanismSettings) -> list[tuple[float, str, bool]]:
    """(MiB, evidence, is vLLM's budget) for every bound on what the pod's own process holds."""
    caps: list[tuple[float, str, bool]] = []
    seen = _memory_seen(a, ms)
    util = a.vllm.gpu_memory_utilization if a.vllm else None
    if util and seen:
        caps.append((util * seen, f"vLLM's --gpu-memory-utilization {util:g} × {seen:,.0f} MiB = "
                                  f"{util * seen:,.0f} MiB cap", True))
    if a.sharing is Sharing.MPS and a.mps_pinned_mem_mib:
        caps.append((a.mps_pinned_mem_mib, f"its MPS pinned limit {a.mps_pinned_mem_mib:,.0f} MiB "
                                           "(CUDA_MPS_PINNED_DEVICE_MEM_LIMIT)", False))
    if a.sharing is Sharing.HAMI and a.hami_gpumem_mib:
        caps.append((a.hami_gpumem_mib, f"its HAMi gpumem {a.hami_gpumem_mib:,.0f} MiB (HAMi-core enforces it)",
                     False))
    return caps


def shared_device(w: Workload, ms: MechanismSettings) -> SharedDevice | None:
    """How the workload's GPU is shared, or None where DCGM's figures are its own (a whole GPU seen with one
    pod, MIG slices)."""
    a = w.allocation
    pods = _pods(w)
    if a.sharing not in SHARED and not (a.sharing is Sharing.EXCLUSIVE and pods):
        return None
    what = f"{SHARED.get(a.sharing, 'shared')} {a.gpu_model or 'GPU'}" + (f", {pods} pods on the device" if pods
                                                                        else "")
    caps = _caps(a, ms)
    cap = min(caps, key=lambda c: c[0]) if caps else None
    isolation = {Sharing.TIME_SLICING: f"time-slicing isolates no memory: its {a.gpu_equivalents:.2g}-GPU share "
                                       "bounds nothing",
                 Sharing.KAI: "KAI enforces no memory limit",
                 Sharing.EXCLUSIVE: "the device plugin hands the same GPU to several pods, isolating no memory"}
    return SharedDevice(what, pods, cap[0] if cap else None, cap[1] if cap else None, bool(cap and cap[2]),
                        isolation.get(a.sharing))


def _clip(q: Quantiles | None, cap: float) -> Quantiles | None:
    return None if q is None else Quantiles(*(min(v, cap) for v in (q.p50, q.p95, q.p99, q.max, q.mean)))


def pod_features(f: WorkloadFeatures, shared: SharedDevice | None) -> WorkloadFeatures:
    """The features with the device's framebuffer figures held to what the pod's own process can hold."""
    if shared is None or shared.memory_cap_mib is None:
        return f
    return replace(f, fb_used_mib=_clip(f.fb_used_mib, shared.memory_cap_mib))


def shared_reasons(shared: SharedDevice, device_fb: Quantiles | None, kv_pool_used: bool) -> tuple[str, ...]:
    """Which evidence gave memory and compute, in words."""
    peak = (f"the device's {device_fb.max:,.0f} MiB framebuffer peak is shared by "
            f"{f'{shared.pods} pods' if shared.pods else 'every pod on it'}") if device_fb else "no framebuffer data"
    head = (f"{shared.what}: dcgm-exporter's figures are the device's, not this pod's; no per-pod compute figure "
            "exists, so its compute need (the device's engine activity) is an upper bound")
    if shared.memory_cap_mib is None:
        mem = (f"memory: {peak} and no per-pod figure exists"
               + (f" ({shared.no_isolation})" if shared.no_isolation else "") + ": an upper bound")
    elif shared.vllm_cap and kv_pool_used:
        mem = f"memory from {shared.memory_evidence}: {peak}; its KV pool and KV usage are its own"
    else:
        mem = f"memory at most {shared.memory_evidence}: {peak}; an upper bound, not its own figure"
    return head, mem


def grows(placed: Allocation, current: Allocation) -> bool:
    """The placement holds more of a GPU per replica than today."""
    return placed.gpu_equivalents > current.gpu_equivalents + 1e-9


def _raised(risk: str) -> str:
    return risk if RISK_ORDER.index(risk) >= 1 else "medium"


def keep_current(w: Workload, placed: Allocation, reasons: tuple[str, ...], conf: float, risk: str,
                 mem: Bound, comp: Bound | None, history_s: float) -> Recommendation:
    """The current allocation, kept: the need from per-device figures (upper bounds) would take ``placed``,
    more than today, and a bigger allocation is not sized from figures that include other pods."""
    held = w.allocation.gpu_equivalents
    shape = f"MIG {placed.mig_profile}" if placed.mig_profile else placed.sharing.value
    why = (f"keeps its current allocation ({held:.2f} GPU): sized from per-device figures, which include the other "
           f"pods, it would take {placed.gpu_equivalents:.2f} GPU ({shape}); a bigger allocation is "
           "not sized from them (to measure its own need, run one replica a day on an unshared GPU or MIG slice)")
    return Recommendation(w, w.allocation, (why, *reasons), round(conf * KEPT_CONFIDENCE, 3), memory_need_mib=mem,
                          compute_need_frac=comp, gpus_held=w.allocation.total_gpu_equivalents,
                          gpus_needed=w.allocation.total_gpu_equivalents, risk=_raised(risk), history_s=history_s,
                          mechanism=w.allocation.sharing.value)
