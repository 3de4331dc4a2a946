"""Fractional GPU shares and how to write an allocation down, through its mechanism's plugin.

The sizing (:mod:`recommender.mechanisms.sizing`) and each mechanism's own terms (the MPS client
environment, the DRA ``GpuConfig``, HAMi's resources, KAI's annotation) live with the mechanism in
:mod:`recommender.mechanisms`; this module keeps the names the policies, outputs and controller import.
Pure: the actuator and the outputs both call these.
"""

from __future__ import annotations

from typing import Any

from recommender.core.inventory import Allocation
from recommender.mechanisms import for_sharing
from recommender.mechanisms.hami import hami_resources, hami_whole_resources
from recommender.mechanisms.kai import kai_annotations
from recommender.mechanisms.mps import MPS_MEM_ENV, MPS_THREADS_ENV, device_plugin_mps_replicas, dra_gpu_config, mps_env
from recommender.mechanisms.sizing import MEMORY_STEP_MIB, THREAD_STEP_PCT, size_share
from recommender.mechanisms.sizing import FractionalShare as Share
from recommender.mechanisms.time_slicing import time_slices

__all__ = ["MEMORY_STEP_MIB", "MPS_MEM_ENV", "MPS_THREADS_ENV", "THREAD_STEP_PCT", "Share",
           "device_plugin_mps_replicas", "dra_gpu_config", "hami_resources", "hami_whole_resources", "how_to_apply",
           "kai_annotations", "mps_env", "size_share", "time_slices", "vllm_flags"]


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
