"""How to write an allocation down: its mechanism's own terms (the MPS client environment, the DRA claim,
HAMi's resources, KAI's annotation: :mod:`recommender.mechanisms`) plus the vLLM engine flags it sets. The
pipeline puts it on the plan; the outputs render it.
"""

from __future__ import annotations

from typing import Any

from recommender.core.inventory import Allocation
from recommender.mechanisms import for_sharing


def vllm_flags(alloc: Allocation) -> list[str]:
    """The vLLM engine flags the allocation sets (only those the policy decides)."""
    v = alloc.vllm
    if v is None:
        return []
    flags = [f"--gpu-memory-utilization={v.gpu_memory_utilization:g}"] if v.gpu_memory_utilization else []
    return flags + ([f"--max-num-seqs={v.max_num_seqs}"] if v.max_num_seqs else [])


def how_to_apply(alloc: Allocation) -> dict[str, Any]:
    """What to write where for an allocation, in its mechanism's own terms (report and actuator), plus the
    vLLM flags it sets."""
    mechanism = for_sharing(alloc.sharing)
    out = mechanism.how_to_apply(alloc) if mechanism is not None else {}
    if alloc.vllm is not None:
        out["vllm_args"] = vllm_flags(alloc)
    return out
