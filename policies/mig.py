"""Choosing a MIG profile: the smallest slice of the GPU model that holds the memory and compute need."""

from __future__ import annotations

from policies.catalogue import GpuModel, MigProfile


def fitting_profiles(gpu: GpuModel, memory_mib: float, compute_frac: float) -> list[MigProfile]:
    """Profiles (no media-engine variants) with enough usable memory and SM share, smallest first.

    Smallest means the least share of the GPU, then fewer SM slices, then less memory: a 1g.20gb
    (2 memory slices, 1 SM) beats a 2g.20gb when one SM slice is enough.
    """
    ok = [
        p for p in gpu.profiles
        if not p.has_media and p.usable_mib >= memory_mib and p.shape.sm_slices / gpu.sm_slices >= compute_frac
    ]
    return sorted(ok, key=lambda p: (gpu.share(p), p.shape.sm_slices, p.usable_mib))


def missed_too_often(share_over_objective: float | None, budget: float, times: float | None) -> bool:
    """Whether a service's share of requests over its TTFT objective exceeds ``times`` its error budget: a
    slice or share then gives way to whole GPUs. A slice prefills at its SM share of the GPU's speed and a
    replica of it is a smaller unit of capacity, so where headroom has not kept the service within the
    objective, the shape is the next thing to change. Twice the budget, not once: the share is read from the
    TTFT histogram's buckets around the objective (interpolated, so an estimate), and a change of shape is a
    rollout, not a sync's adjustment."""
    return times is not None and share_over_objective is not None and share_over_objective > times * budget


def smallest_profile(gpu: GpuModel, memory_mib: float, compute_frac: float) -> MigProfile | None:
    found = fitting_profiles(gpu, memory_mib, compute_frac)
    return found[0] if found else None
