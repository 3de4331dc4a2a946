"""CUDA MPS: clients share a GPU's SMs concurrently, each capped by ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``
and ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` (reference.md §4); also handed out by the device plugin's equal
split (§3) and the DRA driver's ``GpuConfig`` (§5). Sized as a thread percentage and pinned memory in
steps; read back from the first container whose literal env sets either."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from recommender.core.annotations import cut, quoted
from recommender.core.catalogue import GpuModel
from recommender.core.inventory import Allocation, Share, Sharing
from recommender.mechanisms import MECHANISMS
from recommender.mechanisms.base import (
    PER_DEVICE_ACTIVITY,
    Base,
    Need,
    NoFit,
    PodEdits,
    PodView,
    ReadBack,
    Sized,
    number,
    whole_gpus,
)
from recommender.mechanisms.sizing import size_share

MPS_THREADS_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"  # reference.md §4, per client
MPS_MEM_ENV = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
_MIB_PER_UNIT = {"": 1 / 2**20, "K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2}  # MPS units are binary
_MPS_LIMIT = re.compile(r"^\s*(?:(\w[\w-]*)\s*=)?\s*(\d+(?:\.\d+)?)\s*([KMGT]?)B?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class MpsShare(Share):
    """An MPS client's caps: percent of the SMs and pinned device memory (MiB); None: not set."""

    sharing: ClassVar[Sharing] = Sharing.MPS
    FLAT: ClassVar[tuple[str, ...]] = ("mps_active_thread_pct", "mps_pinned_mem_mib")
    thread_pct: float | None = None
    pinned_mem_mib: float | None = None


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


def parse_mps_mem_limit_mib(text: str, notes: list[str]) -> float | None:
    """``"0=10G,1=512M"`` → the largest per-device limit in MiB (units K/M/G/T, optional B, binary).

    The largest bounds what one device may hold; differing limits per device are noted. A value with no
    unit is read as bytes (inferred: NVIDIA's docs show only suffixed values).
    """
    limits: list[float] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        m = _MPS_LIMIT.match(part)
        mib = float(m.group(2)) * _MIB_PER_UNIT[m.group(3).upper()] if m else math.inf
        if not math.isfinite(mib):  # no match, or more digits than a float holds
            notes.append(f"could not parse {MPS_MEM_ENV} entry {quoted(part)}")
            continue
        limits.append(mib)
    if len(set(limits)) > 1:
        notes.append(f"{MPS_MEM_ENV}={cut(text)} differs per device; using the largest")
    return max(limits) if limits else None


def read_env(containers: Any, notes: list[str]) -> MpsShare | None:
    """MPS client limits from the first container that sets them (literal ``value`` only)."""
    for c in containers:
        env = {e.get("name"): e.get("value") for e in c.get("env") or [] if "value" in e}
        if MPS_THREADS_ENV in env or MPS_MEM_ENV in env:
            raw = env.get(MPS_MEM_ENV)
            pct = number(env, MPS_THREADS_ENV, notes)
            if pct is not None and not 0 <= pct <= 100:
                notes.append(f"{MPS_THREADS_ENV}={pct:g} is not a percentage from 0 to 100: ignored")
                pct = None
            return MpsShare(pct, parse_mps_mem_limit_mib(raw, notes) if raw is not None else None)
    return None


class Mps(Base):
    name, sharing, read_rank = "mps", Sharing.MPS, 40
    node_wide = True
    # the pinned memory limit is the client's own env; one client's fault takes every client down (reference.md §4)
    isolates_memory = isolates_faults = False
    share_type: type[Share] | None = MpsShare

    def size(self, need: Need, gpu: GpuModel) -> Sized | NoFit:
        share = size_share(need.compute_frac, need.memory_mib, gpu.memory_mib)
        if share is None:
            return NoFit("the need is a whole GPU")
        return Sized(MpsShare(float(share.thread_pct), float(share.memory_mib)), 1, share.gpu_equivalents,
                     float(gpu.memory_mib))

    def gpu_equivalents(self, alloc: Allocation, gpu: GpuModel | None) -> tuple[float, str | None] | None:
        if not alloc.mps_active_thread_pct:
            return None
        return alloc.mps_active_thread_pct / 100 * max(alloc.gpus, 1), None

    def fraction(self, alloc: Allocation) -> tuple[float, float] | None:
        return (alloc.mps_active_thread_pct or 100.0) / 100, alloc.mps_pinned_mem_mib or 0.0

    def label(self, alloc: Allocation) -> str:
        pct = f" {alloc.mps_active_thread_pct:g}%" if alloc.mps_active_thread_pct is not None else ""
        return f"mps{pct}"

    def sm_share(self, alloc: Allocation, gpu: GpuModel | None) -> tuple[float, str | None]:
        """The active-thread cap; without one, the whole device shared with the other clients."""
        if alloc.mps_active_thread_pct:
            return alloc.mps_active_thread_pct / 100, None
        return 1.0, PER_DEVICE_ACTIVITY

    def how_to_apply(self, alloc: Allocation) -> dict[str, Any]:
        """Three ways, because clusters hand out MPS three ways: the client environment, the device plugin's
        equal split (replicas per GPU) and the DRA driver's ``GpuConfig``."""
        return {"env": mps_env(alloc), "device_plugin_mps_replicas": device_plugin_mps_replicas(alloc),
                "dra": dra_gpu_config(alloc)}

    def pod_edits(self, alloc: Allocation) -> PodEdits:
        env = mps_env(alloc)
        if alloc.mps_active_thread_pct:  # the controller writes a whole percentage
            env[MPS_THREADS_ENV] = str(round(alloc.mps_active_thread_pct))
        else:  # 0 caps nothing: not written
            env.pop(MPS_THREADS_ENV, None)
        return PodEdits(env=tuple(env.items()))

    def leave(self, gpus: int) -> PodEdits:
        """Whole GPUs, the client's limits gone from its env."""
        return replace(whole_gpus(gpus), drop_env=(MPS_THREADS_ENV, MPS_MEM_ENV))

    def read(self, pod: PodView) -> ReadBack | None:
        share = read_env(pod.containers, pod.notes)
        return ReadBack(share, pod.gpus) if share is not None else None


MECHANISMS.add("mps", Mps())
