"""Memory need per device, in MiB.

For vLLM the framebuffer is flat at ``--gpu-memory-utilization`` (it pre-allocates KV cache), so
need = non-KV memory (weights + activations + CUDA context) + KV in use, where the KV pool's size is
``kv_capacity_tokens x bytes per token`` and its use is ``vllm:kv_cache_usage_perc``. Other
workloads are sized from framebuffer used.
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.estimators import percentile, with_confidence, with_margin, with_min
from policies.modelcards import ModelCards
from recommender.analysis.features import Quantiles, WorkloadFeatures
from recommender.core.annotations import KV_BYTES_ANNOTATION, quoted
from recommender.core.inventory import Workload
from recommender.core.plan import Bound
from recommender.core.settings import PolicySettings

MIB = 1024 * 1024


@dataclass(frozen=True)
class MemoryNeed:
    bound: Bound | None
    reasons: tuple[str, ...]
    kv_bytes_per_token: float | None = None
    non_kv_mib: float | None = None


# Bytes one token of KV cache takes, as a tenant may write it: outside these no model (a token's keys and values
# take at least a byte, and no model a GiB), and a pool divided by it would overflow to an infinite token count.
KV_BYTES_RANGE = (1.0, float(2**30))


def kv_bytes_per_token(workload: Workload, cards: ModelCards) -> tuple[float | None, str]:
    """Bytes one token of KV cache takes on one device, and where that figure came from."""
    raw = workload.annotations.get(KV_BYTES_ANNOTATION)
    if raw:
        try:
            value = float(raw)
        except ValueError:
            return None, f"annotation {KV_BYTES_ANNOTATION}={quoted(raw)} is not a number"
        low, high = KV_BYTES_RANGE
        if not low <= value <= high:  # NaN fails too
            return None, f"annotation {KV_BYTES_ANNOTATION}={quoted(raw)} is not a number of bytes from 1 to 1 GiB"
        return value, f"annotation {KV_BYTES_ANNOTATION}"
    vllm = workload.allocation.vllm
    name = workload.served_model or (vllm.model if vllm else None)
    card = cards.find(name) or cards.find(vllm.model if vllm else None)
    if card is None:
        return None, f"model {name or 'unknown'} is not in the model catalogue"
    return card.kv_bytes_per_token, f"model card {card.key} ({card.verified})"


def _vllm_need(w: Workload, f: WorkloadFeatures, fb: Quantiles, kv: Quantiles, bytes_per_token: float,
               p: PolicySettings) -> tuple[Bound, float, str]:
    tp = max(1, w.allocation.vllm.tensor_parallel_size if w.allocation.vllm else 1)
    pool_mib = (w.kv_capacity_tokens or 0.0) * bytes_per_token / MIB / tp
    non_kv_mib = max(fb.max - pool_mib, 0.0)
    max_len = w.allocation.vllm.max_model_len if w.allocation.vllm else None
    floor_mib = non_kv_mib + (max_len or 0) * bytes_per_token / MIB / tp
    kv_mib = Quantiles(*(v * pool_mib for v in (kv.p50, kv.p95, kv.p99, kv.max, kv.mean)))
    kv_bound = with_confidence(f.history_s, with_margin(p.memory_margin_frac, percentile(p.memory_percentile)))(kv_mib)
    bound = Bound(non_kv_mib + kv_bound.lower, non_kv_mib + kv_bound.target, non_kv_mib + kv_bound.upper)
    bound = with_min(floor_mib, lambda _: bound)(kv_mib)
    why = (f"vLLM: non-KV memory {non_kv_mib:,.0f} MiB (framebuffer peak {fb.max:,.0f} − KV pool "
           f"{pool_mib:,.0f} MiB) + KV in use p{p.memory_percentile * 100:g} "
           f"{kv.at(p.memory_percentile):.0%} of the pool, +{p.memory_margin_frac:.0%} margin")
    if max_len:
        why += f"; never below one {max_len:,}-token sequence ({floor_mib:,.0f} MiB)"
    return bound, non_kv_mib, why


def memory_need(w: Workload, f: WorkloadFeatures, cards: ModelCards, p: PolicySettings) -> MemoryNeed:
    """Memory need per device with lower/target/upper and the reasoning in words."""
    fb = f.fb_used_mib
    if fb is None:
        return MemoryNeed(None, ("metric missing: no DCGM_FI_DEV_FB_USED series",))
    if w.allocation.vllm is not None:
        bpt, origin = kv_bytes_per_token(w, cards)
        kv = f.kv_usage_frac
        if bpt and kv is not None and w.kv_capacity_tokens:
            bound, non_kv, why = _vllm_need(w, f, fb, kv, bpt, p)
            return MemoryNeed(bound, (why, f"KV bytes/token {bpt:,.0f} from {origin}"), bpt, non_kv)
        missing = ("KV usage (vllm:kv_cache_usage_perc)" if kv is None else
                   "KV capacity (vllm:cache_config_info)" if not w.kv_capacity_tokens else origin)
        note = (f"vLLM KV need unknown ({missing}): sized from framebuffer used, which vLLM "
                "pre-allocates, so this over-states need")
    else:
        note = f"sized from framebuffer used p{p.memory_percentile * 100:g} +{p.memory_margin_frac:.0%} margin"
    est = with_confidence(f.history_s, with_margin(p.memory_margin_frac, percentile(p.memory_percentile)))
    return MemoryNeed(est(fb), (note,))
