"""Fractional GPU shares (MPS, DRA MPS, HAMi, KAI, time-slicing): sizing and how to write them down.

One share is sized once (compute percent and memory MiB with margins already in the need) and then
rendered in each backend's own terms (reference.md §3-7): the CUDA MPS client environment, the DRA
``GpuConfig`` opaque parameters, HAMi's ``nvidia.com/gpumem``/``gpucores`` resources, KAI's
``gpu-fraction`` annotation. Pure: the actuator and the outputs both call these.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from recommender.core.inventory import Allocation, Sharing

THREAD_STEP_PCT = 5  # thread percentages are rounded up to this step: finer is noise
MEMORY_STEP_MIB = 256  # memory limits are rounded up to this step
MPS_THREADS_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"  # reference.md §4, per client
MPS_MEM_ENV = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"


@dataclass(frozen=True)
class Share:
    """A sized fraction of one GPU."""

    thread_pct: int  # 1-100: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE / HAMi gpucores
    memory_mib: int  # pinned memory limit / HAMi gpumem
    device_memory_mib: float

    @property
    def memory_frac(self) -> float:
        return self.memory_mib / self.device_memory_mib

    @property
    def gpu_equivalents(self) -> float:
        """The larger of the compute and memory fractions: what the share takes of the GPU."""
        return max(self.thread_pct / 100, self.memory_frac)


def size_share(compute_frac: float, memory_mib: float, device_memory_mib: float) -> Share | None:
    """Round a need up to a share; None when it is a whole GPU (or more) anyway."""
    pct = max(THREAD_STEP_PCT, math.ceil(compute_frac * 100 / THREAD_STEP_PCT - 1e-9) * THREAD_STEP_PCT)
    mem = max(MEMORY_STEP_MIB, math.ceil(memory_mib / MEMORY_STEP_MIB - 1e-9) * MEMORY_STEP_MIB)
    share = Share(min(pct, 100), int(mem), device_memory_mib)
    return share if pct < 100 and mem < device_memory_mib else None


def time_slices(compute_frac: float, memory_mib: float, device_memory_mib: float) -> int:
    """Time-slicing replicas per GPU this workload can live with: compute and memory both must fit.

    Time-slicing isolates nothing, so memory is the hard limit: N clients must fit side by side.
    """
    by_compute = math.floor(1 / max(compute_frac, 1e-6))
    by_memory = math.floor(device_memory_mib / max(memory_mib, 1.0))
    return max(1, min(by_compute, by_memory))


def mps_env(alloc: Allocation) -> dict[str, str]:
    """Client environment for CUDA MPS (reference.md §4): thread cap and pinned memory on device 0."""
    env: dict[str, str] = {}
    if alloc.mps_active_thread_pct is not None:
        env[MPS_THREADS_ENV] = f"{alloc.mps_active_thread_pct:g}"
    if alloc.mps_pinned_mem_mib is not None:
        env[MPS_MEM_ENV] = f"0={alloc.mps_pinned_mem_mib:.0f}M"
    return env


def device_plugin_mps_replicas(alloc: Allocation) -> int | None:
    """The NVIDIA device plugin splits MPS equally: R replicas per GPU give each client ``100 // R`` % of the SMs
    and 1/R of the device's memory (reference.md §3). The most R that still gives this share: how many of it fit
    one physical GPU by compute and by memory, floor(1 / the larger fraction). ``gpu_equivalents`` is that larger
    fraction of the physical GPU; ``device_memory_mib`` is not, being the memory the process sees (the pinned
    limit itself where ``mechanisms.memory_seen`` says so). None when the share is unknown."""
    if alloc.mps_active_thread_pct is None or alloc.gpu_equivalents <= 0:
        return None
    frac = max(alloc.mps_active_thread_pct / 100, alloc.gpu_equivalents / max(alloc.gpus, 1))
    return max(1, math.floor(1 / frac + 1e-9))


def dra_gpu_config(alloc: Allocation) -> dict[str, Any]:
    """The DRA driver's opaque ``GpuConfig`` with MPS sharing (reference.md §5)."""
    mps: dict[str, Any] = {}
    if alloc.mps_active_thread_pct is not None:
        mps["defaultActiveThreadPercentage"] = int(alloc.mps_active_thread_pct)
    if alloc.mps_pinned_mem_mib is not None:
        mps["defaultPinnedDeviceMemoryLimit"] = f"{alloc.mps_pinned_mem_mib:.0f}Mi"
    return {"driver": "gpu.nvidia.com", "parameters": {
        "apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
        "sharing": {"strategy": "MPS", "mpsConfig": mps}}}


def hami_resources(alloc: Allocation) -> dict[str, str]:
    """HAMi container limits (reference.md §6): one vGPU, memory in MiB, cores in percent."""
    out = {"nvidia.com/gpu": "1"}
    if alloc.hami_gpumem_mib is not None:
        out["nvidia.com/gpumem"] = f"{alloc.hami_gpumem_mib:.0f}"
    if alloc.hami_gpucores_pct is not None:
        out["nvidia.com/gpucores"] = f"{alloc.hami_gpucores_pct:.0f}"
    return out


def hami_whole_resources(gpus: int) -> dict[str, str]:
    """HAMi container limits for whole GPUs (reference.md §6: an exclusive GPU is gpucores 100 and
    gpumem-percentage 100): how a HAMi workload moves to whole GPUs without leaving HAMi's scheduler."""
    return {"nvidia.com/gpu": str(gpus), "nvidia.com/gpucores": "100", "nvidia.com/gpumem-percentage": "100"}


def kai_annotations(alloc: Allocation) -> dict[str, str]:
    """KAI scheduler pod annotation (reference.md §7): the fraction of one GPU's memory. KAI enforces
    nothing, so the workload must self-limit (vLLM: --gpu-memory-utilization at most this)."""
    return {"gpu-fraction": f"{alloc.kai_gpu_fraction:g}"} if alloc.kai_gpu_fraction is not None else {}


def vllm_flags(alloc: Allocation) -> list[str]:
    """The vLLM engine flags the allocation sets (only those the policy decides)."""
    v = alloc.vllm
    if v is None:
        return []
    flags = [f"--gpu-memory-utilization={v.gpu_memory_utilization:g}"] if v.gpu_memory_utilization else []
    return flags + ([f"--max-num-seqs={v.max_num_seqs}"] if v.max_num_seqs else [])


def how_to_apply(alloc: Allocation) -> dict[str, Any]:
    """What to write where for an allocation, in each mechanism's own terms (report and actuator).

    An MPS share is given three ways, because clusters hand out MPS three ways: the client environment,
    the device plugin's equal split (replicas per GPU) and the DRA driver's ``GpuConfig``.
    """
    out: dict[str, Any] = {}
    match alloc.sharing:
        case Sharing.MPS:
            out = {"env": mps_env(alloc), "device_plugin_mps_replicas": device_plugin_mps_replicas(alloc),
                   "dra": dra_gpu_config(alloc)}
        case Sharing.HAMI:
            out = {"resources": hami_resources(alloc)}
        case Sharing.KAI:
            out = {"annotations": kai_annotations(alloc)}
        case Sharing.TIME_SLICING:
            out = {"resources": {"nvidia.com/gpu": "1"}, "device_plugin_time_slicing_replicas":
                   round(1 / alloc.gpu_equivalents) if alloc.gpu_equivalents else None}
        case Sharing.MIG if alloc.mig_profile:
            out = {"resources": {f"nvidia.com/mig-{alloc.mig_profile}": str(max(alloc.mig_count, 1))}}
        case Sharing.EXCLUSIVE:
            out = {"resources": {"nvidia.com/gpu": str(alloc.gpus)}}
    if alloc.vllm is not None:
        out["vllm_args"] = vllm_flags(alloc)
    return out
