"""MIG: a hardware slice of the GPU (its own SMs and memory), requested as ``nvidia.com/mig-<profile>``
(mixed strategy) or found on a MIG-single node. Sized as the smallest profile of the GPU model that holds
the need; it holds its SM or memory slices' share of the GPU, the larger."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

from recommender.core.catalogue import GpuModel, MigProfile
from recommender.core.inventory import Allocation, Share, Sharing
from recommender.mechanisms import MECHANISMS
from recommender.mechanisms.base import (
    GPU,
    GPU_SHARED,
    MIG_PREFIX,
    Base,
    Need,
    NoFit,
    PodEdits,
    PodView,
    ReadBack,
    Sized,
    count,
)


@dataclass(frozen=True)
class MigShare(Share):
    """``count`` slices of MIG ``profile`` (e.g. ``3g.40gb``; ``+me`` for the media-engine variant)."""

    sharing: ClassVar[Sharing] = Sharing.MIG
    FLAT: ClassVar[tuple[str, ...]] = ("mig_profile", "mig_count")
    profile: str | None
    count: int = 1


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


def resource(profile: str) -> str:
    """The device plugin's resource name for ``profile``: it turns ``+`` into ``.``."""
    return MIG_PREFIX + profile.replace("+", ".")


class Mig(Base):
    name, sharing, read_rank = "mig", Sharing.MIG, 10
    isolates_memory = isolates_faults = True  # a GPU instance: its own memory slices and SMs (reference.md §1.1)
    share_type: type[Share] | None = MigShare

    def size(self, need: Need, gpu: GpuModel) -> Sized | NoFit:
        if not gpu.supports_mig:
            return NoFit(f"{gpu.key} has no MIG")
        found = fitting_profiles(gpu, need.memory_mib, need.compute_frac)
        if not found or gpu.share(found[0]) >= 1.0:
            return NoFit("no MIG slice smaller than the GPU holds the need")
        return Sized(MigShare(found[0].name), 0, gpu.share(found[0]), found[0].usable_mib)

    def gpu_equivalents(self, alloc: Allocation, gpu: GpuModel | None) -> tuple[float, str | None]:
        profile = gpu.profile(alloc.mig_profile) if gpu and alloc.mig_profile else None
        if gpu and profile:
            return gpu.share(profile) * alloc.mig_count, None
        slices = re.match(r"(\d+)g", alloc.mig_profile or "")
        guess = int(slices.group(1)) / 7 if slices else 1.0
        return guess * max(alloc.mig_count, 1), (f"MIG profile {alloc.mig_profile} not in the catalogue "
                                                 f"for {alloc.gpu_model or 'an unknown GPU'}: share guessed from "
                                                 "its SM slices")

    def label(self, alloc: Allocation) -> str:
        count = f"{alloc.mig_count}× " if alloc.mig_count > 1 else ""
        return f"{count}mig {alloc.mig_profile or '?'}"

    def sm_share(self, alloc: Allocation, gpu: GpuModel | None) -> tuple[float, str | None]:
        """The slice's SM slices of the GPU's; guessed from the GPU-equivalents for a profile the catalogue lacks."""
        profile = gpu.profile(alloc.mig_profile) if gpu and alloc.mig_profile else None
        if gpu and profile:
            return profile.shape.sm_slices / gpu.sm_slices, None
        return alloc.gpu_equivalents / max(alloc.mig_count, 1), "SM share of the MIG slice guessed"

    def compute_held(self, alloc: Allocation, gpu: GpuModel | None) -> float | None:
        """Its slices' SM share; None for a guessed one (no figure)."""
        share, caveat = self.sm_share(alloc, gpu)
        return None if caveat else share * max(alloc.mig_count, 1)

    def how_to_apply(self, alloc: Allocation) -> dict[str, Any]:
        if not alloc.mig_profile:
            return {}
        return {"resources": {resource(alloc.mig_profile): str(max(alloc.mig_count, 1))}}

    def pod_edits(self, alloc: Allocation) -> PodEdits:
        if not alloc.mig_profile:
            return PodEdits()
        return PodEdits(resources=((resource(alloc.mig_profile), str(max(1, alloc.mig_count))),),
                        drop_resources=(GPU, GPU_SHARED, MIG_PREFIX + "*"))

    def read(self, pod: PodView) -> ReadBack | None:
        """``nvidia.com/mig-1g.10gb.me`` names the profile ``1g.10gb+me``; several profiles: the most requested."""
        mig = {k[len(MIG_PREFIX):]: n for k, n in pod.resources.items() if k.startswith(MIG_PREFIX) and n > 0}
        if not mig:
            return None
        name, n = max(mig.items(), key=lambda kv: kv[1])
        if len(mig) > 1:
            pod.notes.append(f"requests several MIG profiles ({', '.join(sorted(mig))}); sized by {name}")
        profile = name[: -len(".me")] + "+me" if name.endswith(".me") else name
        slices = count(n, MIG_PREFIX + name, pod.notes)
        return ReadBack(MigShare(profile, slices), 0) if slices else None  # a count no pod holds: no share


MECHANISMS.add("mig", Mig())
