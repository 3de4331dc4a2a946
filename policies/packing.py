"""Packing recommended MIG slices onto GPUs with valid per-GPU layouts (first-fit decreasing).

A slice may only start at its shape's placement starts, may not overlap another slice's memory
slices, the SM slices of a GPU add up to at most its total, each shape respects its max count and
at most one ``+me`` profile sits on a GPU (reference.md §1.2-1.4). The driver is the final arbiter.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from policies.catalogue import GpuModel, MigProfile


@dataclass
class GpuLayout:
    """One physical GPU being filled: which profile sits at which start memory slice."""

    gpu: GpuModel
    placed: list[tuple[MigProfile, int]] = field(default_factory=list)

    def _used_slices(self) -> set[int]:
        return {s for p, start in self.placed for s in range(start, start + p.shape.mem_slices)}

    def start_for(self, profile: MigProfile) -> int | None:
        """First valid start for the profile on this GPU, or None when it does not fit."""
        same = sum(1 for p, _ in self.placed if p.shape.name == profile.shape.name)
        sm_used = sum(p.shape.sm_slices for p, _ in self.placed)
        media = any(p.has_media for p, _ in self.placed)
        if same >= profile.shape.max_count or sm_used + profile.shape.sm_slices > self.gpu.sm_slices:
            return None
        if profile.has_media and media:
            return None
        used = self._used_slices()
        for start in profile.shape.starts:
            span = set(range(start, start + profile.shape.mem_slices))
            if max(span) < self.gpu.memory_slices and not span & used:
                return start
        return None

    def mig_devices(self) -> dict[str, int]:
        """mig-parted ``mig-devices`` map for this GPU."""
        out: dict[str, int] = {}
        for p, _ in self.placed:
            out[p.name] = out.get(p.name, 0) + 1
        return out


def pack(gpu: GpuModel, profiles: Iterable[MigProfile]) -> list[GpuLayout]:
    """First-fit decreasing by (memory slices, SM slices): fewest GPUs in practice, always valid."""
    order = sorted(profiles, key=lambda p: (p.shape.mem_slices, p.shape.sm_slices), reverse=True)
    layouts: list[GpuLayout] = []
    for prof in order:
        for layout in layouts:
            start = layout.start_for(prof)
            if start is not None:
                layout.placed.append((prof, start))
                break
        else:
            fresh = GpuLayout(gpu)
            start = fresh.start_for(prof)
            if start is None:
                raise ValueError(f"{prof.name} cannot be placed on an empty {gpu.key}")
            fresh.placed.append((prof, start))
            layouts.append(fresh)
    return layouts
