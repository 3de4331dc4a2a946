"""Choosing a MIG profile: the smallest slice of the GPU model that holds the memory and compute need,
within a policy's ``bounds.smallestProfile`` / ``largestProfile`` where one sets them."""

from __future__ import annotations

import re
from dataclasses import dataclass

from recommender.core.catalogue import GpuModel, MigProfile
from recommender.core.plan import WorkloadConstraints
from recommender.mechanisms.mig import fitting_profiles as fitting_profiles  # sized with the mechanism

_NAME = re.compile(r"^(\d+)g\.(\d+)gb(\+me)?$")


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


def _rank(p: MigProfile) -> tuple[int, int]:
    """How bounds order profiles of one GPU model: compute slices, then memory slices."""
    return p.shape.sm_slices, p.shape.mem_slices


@dataclass(frozen=True)
class BoundProfile:
    """A bound's name read on one GPU model: its profile (None when the model has no counterpart) and how
    it was read, in words (empty when the name is the model's own)."""

    profile: MigProfile | None
    note: str = ""


def resolve_bound(gpu: GpuModel, name: str, field: str) -> BoundProfile:
    """``name`` as a profile of ``gpu``: itself where the catalogue has it, else the profile with the same
    compute slices whose nominal memory is nearest (ties: less memory). Profile names are per model:
    ``1g.10gb`` on an A100-80GB is ``1g.5gb`` on an A100-40GB (one compute slice each)."""
    exact = gpu.profile(name)
    if exact is not None:
        return BoundProfile(exact)
    m = _NAME.match(name)
    g, gb = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    same = [p for p in gpu.profiles if not p.has_media and p.shape.sm_slices == g]
    if not same:
        return BoundProfile(None, f"{field} {name} has no {gpu.key} counterpart (no {g}-compute-slice profile)")
    near = min(same, key=lambda p: (abs(_nominal_gb(p.name) - gb), p.shape.mem_slices))
    return BoundProfile(near, f"{field} {name} is not a {gpu.key} profile: read as {near.name} "
                              f"(same {g} compute slice{'s' if g > 1 else ''})")


def _nominal_gb(name: str) -> int:
    m = _NAME.match(name)
    return int(m.group(2)) if m else 0


@dataclass(frozen=True)
class BoundedChoice:
    """The profile to recommend (None: no MIG slice) and what the bounds did, in words: how a bound was read,
    that it raised the choice or kept it, or why no slice within them holds the need."""

    profile: MigProfile | None
    reasons: tuple[str, ...] = ()
    raised_from: str | None = None  # the smallest fitting profile, where smallestProfile raised the choice


def bounded_profile(gpu: GpuModel, memory_mib: float, compute_frac: float,
                    bounds: WorkloadConstraints | None = None) -> BoundedChoice:
    """The smallest fitting profile, raised to at least ``smallest_profile`` and refused above
    ``largest_profile`` (both compared by compute slices, then memory slices)."""
    fitting = fitting_profiles(gpu, memory_mib, compute_frac)
    if bounds is None or (bounds.smallest_profile is None and bounds.largest_profile is None) or not fitting:
        return BoundedChoice(fitting[0] if fitting else None)
    by = f"({bounds.source})"
    read = {f: resolve_bound(gpu, name, f) for f, name in (("bounds.smallestProfile", bounds.smallest_profile),
                                                          ("bounds.largestProfile", bounds.largest_profile)) if name}
    notes = tuple(f"{b.note} {by}" for b in read.values() if b.note)
    if any(b.profile is None for b in read.values()):
        return BoundedChoice(None, (*notes, "no MIG slice: a bound this GPU model cannot read is not guessed"))
    lo, hi = (b.profile if b else None for b in (read.get("bounds.smallestProfile"), read.get("bounds.largestProfile")))
    low = _rank(lo) if lo else (0, 0)
    high = _rank(hi) if hi else (gpu.sm_slices, gpu.memory_slices)
    within = [p for p in fitting if low <= _rank(p) <= high]
    need = fitting[0]
    if not within:
        where = f"above bounds.largestProfile {hi.name}" if hi and _rank(need) > high else "outside the bounds"
        return BoundedChoice(None, (*notes, f"no MIG slice: the need takes at least {need.name}, {where} {by}"))
    if within[0] != need and lo is not None:
        done = f"raised from {need.name} to {within[0].name} by bounds.smallestProfile {lo.name} {by}"
        return BoundedChoice(within[0], (*notes, done), need.name)
    span = f"{lo.name if lo else 'any'}..{hi.name if hi else 'any'}"
    return BoundedChoice(within[0], (*notes, f"within the bounds {span} {by}"))
