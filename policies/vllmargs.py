"""vLLM engine arguments for a recommended allocation, and whether changing them is worth it.

``--gpu-memory-utilization`` is sized for the memory the process sees; ``--max-num-seqs`` is lowered where the KV
pool, not the scheduler, limits how many sequences run at once. Where the workload keeps the GPUs it holds
(:func:`policies.nogain.held`), nothing is saved, so each change must gain something the policy can name or
today's value stays:

- less memory gains only where other clients share the memory the process sees (time-slicing, KAI, a fraction
  backend that shows the whole device); on a GPU or MIG slice of its own, the memory freed serves no one;
- more memory holds a need (with its margin) over what today's fraction allows;
- a lower sequence limit gains only where the KV pool ran full: vLLM then preempts running sequences and
  recomputes them, which a limit the pool holds turns into queueing (vLLM's own advice for preemptions).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from policies.memory import MemoryNeed
from policies.nogain import NO_SAVING, WORTH, Held
from recommender.analysis.features import WorkloadFeatures
from recommender.core.inventory import VllmArgs
from recommender.core.settings import PolicySettings

MIB = 1024 * 1024
KV_FULL_FRAC = 0.95  # KV cache in use at its p99: the pool was full, or a block short of it, in 1% of the steps
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9  # vLLM's when the flag is unset (reference.md §9.2)


@dataclass(frozen=True)
class EngineArgs:
    """The arguments to set, why, and where every change was dropped the one reason that says so."""

    vllm: VllmArgs | None
    reasons: tuple[str, ...] = ()
    unchanged: str | None = None


def default_max_num_seqs(device_mib: float, gpu_key: str) -> int:
    """vLLM's own default when --max-num-seqs is unset (reference.md §9.2): 1024 on ≥ 70 GiB non-A100
    devices, else 256 (so a MIG slice of an H100 gets 256)."""
    return 1024 if device_mib >= 70 * 1024 and "a100" not in gpu_key.lower() else 256


def sized_fraction(need_mib: float, device_mib: float, p: PolicySettings) -> float:
    """The need as a fraction of the device, within the policy's bounds, rounded up to 0.01."""
    frac = min(max(need_mib / device_mib, p.vllm_min_gpu_memory_utilization), p.vllm_max_gpu_memory_utilization)
    return math.ceil(frac * 100 - 1e-9) / 100


def vllm_args(vllm: VllmArgs | None, mem: MemoryNeed, device_mib: float, gpu_key: str, p: PolicySettings,
              f: WorkloadFeatures, gpus: Held) -> EngineArgs:
    """The engine arguments for ``device_mib`` of memory seen; where ``gpus.same``, only those worth changing."""
    if vllm is None or mem.bound is None:
        return EngineArgs(None)
    frac, frac_why, frac_kept = _fraction(vllm, mem.bound.target, device_mib, p, gpus)
    seqs, seqs_why, seqs_kept = _max_num_seqs(vllm, mem, frac or DEFAULT_GPU_MEMORY_UTILIZATION, device_mib,
                                              gpu_key, f, gpus)
    out = replace(vllm, gpu_memory_utilization=frac, max_num_seqs=seqs)
    kept = [x for x in (frac_kept, seqs_kept) if x]
    if gpus.same and out == vllm:
        return EngineArgs(vllm, (), f"{NO_SAVING} ({'; '.join(kept)})" if kept else None)
    why = [x for x in (frac_why, seqs_why) if x]
    why += [f"vLLM settings kept: {x}" for x in kept]
    return EngineArgs(out, tuple(why))


def _fraction(vllm: VllmArgs, need_mib: float, device_mib: float, p: PolicySettings, gpus: Held
              ) -> tuple[float | None, str | None, str | None]:
    """``--gpu-memory-utilization`` to set, the reason for a change, and a note for one not made."""
    sized = sized_fraction(need_mib, device_mib, p)
    was = vllm.gpu_memory_utilization
    change = f"vLLM --gpu-memory-utilization {f'{was:g}' if was else 'default'} → {sized:.2f} of {device_mib:,.0f} MiB"
    if not gpus.same:
        return sized, change, None
    now = was or DEFAULT_GPU_MEMORY_UTILIZATION
    if sized > now:
        return sized, (f"{change}{WORTH}{(sized - now) * device_mib:,.0f} MiB more for the KV cache: the need with "
                       f"its margin ({need_mib:,.0f} MiB) is over the {now * device_mib:,.0f} MiB {now:g} allows"), None
    if sized < now and gpus.shared_memory:
        return sized, (f"{change}{WORTH}frees {(now - sized) * device_mib:,.0f} MiB of the device for the other "
                       "clients sharing it"), None
    if sized < now:
        return was, None, (f"--gpu-memory-utilization {sized:.2f} would free {(now - sized) * device_mib:,.0f} MiB "
                           "of a GPU it shares with no one, which nothing else can use")
    return was, None, None


def _max_num_seqs(vllm: VllmArgs, mem: MemoryNeed, frac: float, device_mib: float, gpu_key: str,
                  f: WorkloadFeatures, gpus: Held) -> tuple[int | None, str | None, str | None]:
    """``--max-num-seqs`` to set, the reason for a change, and a note for one not made."""
    per_seq = f.tokens_per_request
    if mem.non_kv_mib is None or not mem.kv_bytes_per_token or not per_seq:
        return vllm.max_num_seqs, None, None
    tp = max(1, vllm.tensor_parallel_size)
    pool_tokens = max(0.0, frac * device_mib - mem.non_kv_mib) * MIB / mem.kv_bytes_per_token * tp
    fits = max(1, math.floor(pool_tokens / per_seq))
    limit = vllm.max_num_seqs or default_max_num_seqs(device_mib, gpu_key)
    if fits >= limit:
        return vllm.max_num_seqs, None, None
    change = (f"vLLM --max-num-seqs {vllm.max_num_seqs or f'default {limit}'} → {fits}: the KV pool "
              f"({pool_tokens:,.0f} tokens) holds {fits} sequences of the mean {per_seq:,.0f} tokens")
    if not gpus.same:
        return fits, f"{change}, so more would be preempted rather than served", None
    kv = f.kv_usage_frac
    if kv is not None and kv.p99 >= KV_FULL_FRAC:
        return fits, (f"{change}{WORTH}the pool ran full (p99 {kv.p99:.0%} in use), so vLLM preempted and "
                      "recomputed running sequences that the limit queues instead"), None
    seen = f"the KV pool never ran full (p99 {kv.p99:.0%} in use)" if kv is not None else "KV use not collected"
    return vllm.max_num_seqs, None, f"{seen}, so nothing shows vLLM preempting what a --max-num-seqs of {fits} " \
                                    "would queue"
