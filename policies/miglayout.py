"""An independent check of per-GPU MIG layouts, and the mig-parted config and node label that apply them.

``validate_layout`` re-derives every placement rule from the catalogue data (reference.md §1.1-1.4,
``policies/data/gpus.yaml``) without calling the packer, so a packer bug cannot hide behind itself:
each start is one of the shape's allowed starts, memory slices lie inside the GPU and do not overlap,
SM slices add up to at most the GPU's, each shape stays within its max count, and at most one ``+me``
profile sits on a GPU. The driver remains the final arbiter.

``mig_parted_config`` turns a per-node plan into a mig-parted ``version: v1`` config (reference.md §2)
with one named config per distinct layout set; ``node_label`` is the ``nvidia.com/mig.config`` label
that selects it. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from policies.packing import GpuLayout
from recommender.core.annotations import MIG_CONFIG_LABEL
from recommender.core.catalogue import GpuModel, MigProfile

CONFIG_PREFIX = "rightsizer-"
MAX_LABEL_VALUE = 63  # Kubernetes label values: at most 63 characters
MEDIA_SUFFIX = "+me"

# One GPU's part of a config: sorted (profile name, count) pairs.
_GpuDevices = tuple[tuple[str, int], ...]


def _span(profile: MigProfile, start: int) -> range:
    """Memory slices a GPU instance of ``profile`` occupies when it starts at ``start``."""
    return range(start, start + profile.shape.mem_slices)


def _placement_problems(gpu: GpuModel, placed: Sequence[tuple[MigProfile, int]]) -> list[str]:
    """Per-instance rules: the profile is the GPU's, the start is allowed, the slices lie inside the GPU."""
    problems: list[str] = []
    for i, (prof, start) in enumerate(placed):
        where = f"#{i} {prof.name}@{start}"
        if gpu.profile(prof.name) != prof:
            problems.append(f"{where}: not a MIG profile of {gpu.key}")
        if start not in prof.shape.starts:
            allowed = ",".join(str(s) for s in prof.shape.starts)
            problems.append(f"{where}: start {start} not among the {prof.shape.name} starts {{{allowed}}}")
        span = _span(prof, start)
        if span.start < 0 or span.stop > gpu.memory_slices:
            problems.append(
                f"{where}: memory slices {span.start}-{span.stop - 1} outside the GPU's 0-{gpu.memory_slices - 1}"
            )
    return problems


def _overlap_problems(placed: Sequence[tuple[MigProfile, int]]) -> list[str]:
    """Pairwise: no two instances share a memory slice."""
    problems: list[str] = []
    for i, (a, a_start) in enumerate(placed):
        for j in range(i + 1, len(placed)):
            b, b_start = placed[j]
            shared = sorted(set(_span(a, a_start)) & set(_span(b, b_start)))
            if shared:
                problems.append(
                    f"#{i} {a.name}@{a_start} and #{j} {b.name}@{b_start} overlap on memory slices "
                    + ",".join(str(s) for s in shared)
                )
    return problems


def _count_problems(gpu: GpuModel, placed: Sequence[tuple[MigProfile, int]]) -> list[str]:
    """Whole-GPU rules: SM slices, per-shape max counts, one ``+me``."""
    problems: list[str] = []
    sm_used = sum(p.shape.sm_slices for p, _ in placed)
    if sm_used > gpu.sm_slices:
        problems.append(f"SM slices {sm_used} exceed the GPU's {gpu.sm_slices}")
    per_shape = Counter(p.shape.name for p, _ in placed)
    max_count = {p.shape.name: p.shape.max_count for p, _ in placed}
    for shape, n in sorted(per_shape.items()):
        if n > max_count[shape]:
            problems.append(f"{n} instances of shape {shape}, at most {max_count[shape]} allowed")
    media = [p.name for p, _ in placed if p.name.endswith(MEDIA_SUFFIX)]
    if len(media) > 1:
        problems.append(f"{len(media)} +me profiles ({', '.join(media)}), at most one per GPU")
    return problems


def validate_layout(gpu: GpuModel, placed: Sequence[tuple[MigProfile, int]]) -> list[str]:
    """Every MIG placement rule the layout breaks, in words; an empty list means valid.

    ``placed`` is (profile, start memory slice) per GPU instance on one physical GPU of model ``gpu``.
    """
    if not gpu.supports_mig:
        return [f"{gpu.key} has no MIG"] if placed else []
    return _placement_problems(gpu, placed) + _overlap_problems(placed) + _count_problems(gpu, placed)


def _gpu_devices(layout: GpuLayout) -> _GpuDevices:
    return tuple(sorted(Counter(p.name for p, _ in layout.placed).items()))


def _node_specs(layouts: Sequence[GpuLayout]) -> tuple[tuple[tuple[int, ...], _GpuDevices], ...]:
    """GPUs with the same devices grouped: ((indices), devices) ordered by first index. GPU index = position."""
    groups: dict[_GpuDevices, list[int]] = {}
    for index, layout in enumerate(layouts):
        groups.setdefault(_gpu_devices(layout), []).append(index)
    return tuple(sorted(((tuple(ix), devs) for devs, ix in groups.items()), key=lambda s: s[0]))


def _label_safe(text: str) -> str:
    return text.replace(MEDIA_SUFFIX, ".me").replace("+", ".")


def _config_name(specs: tuple[tuple[tuple[int, ...], _GpuDevices], ...]) -> str:
    """Readable when every GPU has one layout (``rightsizer-2gpu-2x3g.40gb``), else a content hash.

    Both encode the whole spec (GPU count and per-GPU counts), so distinct layout sets get distinct names.
    Hash names are hex only and never start with ``<n>gpu``, so the two forms cannot collide.
    """
    if len(specs) == 1:
        indices, devices = specs[0]
        body = "-".join(f"{n}x{_label_safe(name)}" for name, n in devices) or "empty"
        name = f"{CONFIG_PREFIX}{len(indices)}gpu-{body}"
        if len(name) <= MAX_LABEL_VALUE:
            return name
    canonical = json.dumps([[list(ix), [list(d) for d in devs]] for ix, devs in specs])
    return CONFIG_PREFIX + hashlib.sha256(canonical.encode()).hexdigest()[:8]


def _check(node: str, layouts: Sequence[GpuLayout]) -> None:
    for index, layout in enumerate(layouts):
        problems = validate_layout(layout.gpu, layout.placed)
        if problems:
            raise ValueError(f"node {node} GPU {index} ({layout.gpu.key}): invalid MIG layout: {'; '.join(problems)}")


def node_configs(layouts_by_node: Mapping[str, Sequence[GpuLayout]]) -> dict[str, str]:
    """Config name per node (nodes without layouts are left out); the names ``mig_parted_config`` uses."""
    return {node: _config_name(_node_specs(layouts)) for node, layouts in layouts_by_node.items() if layouts}


def mig_parted_config(layouts_by_node: Mapping[str, Sequence[GpuLayout]]) -> dict[str, Any]:
    """A mig-parted ``version: v1`` config with one named config per distinct layout set.

    A node's GPU index is the layout's position in its sequence; GPUs with the same devices share one
    ``devices: [..]`` entry. Nodes with the same layout set share a config. Raises ValueError, naming
    the node, GPU and broken rules, if any layout is invalid: an invalid layout is never emitted.
    """
    configs: dict[str, list[dict[str, Any]]] = {}
    for node in sorted(layouts_by_node):
        layouts = layouts_by_node[node]
        if not layouts:
            continue
        _check(node, layouts)
        specs = _node_specs(layouts)
        configs[_config_name(specs)] = [
            {"devices": list(indices), "mig-enabled": True, "mig-devices": dict(devices)} for indices, devices in specs
        ]
    return {"version": "v1", "mig-configs": dict(sorted(configs.items()))}


def node_label(config_name: str) -> dict[str, str]:
    """The node label that makes the MIG manager apply ``config_name``."""
    return {MIG_CONFIG_LABEL: config_name}
