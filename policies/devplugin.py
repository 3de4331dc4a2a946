"""The NVIDIA device plugin's sharing configs per node pool (reference.md §3): one ConfigMap of named configs and
the ``nvidia.com/device-plugin.config`` label that selects one per node.

The plugin shares every GPU of a node the same way (no per-GPU sharing), by time-slicing or MPS (never both), in
``replicas`` per GPU. So a node's config follows the workloads that share GPUs there (their recommendation, or
today's allocation where there is none): one strategy, and the fewest replicas any of them needs, so each gets at
least the share it was sized for (MPS splits memory and SMs equally: R replicas give each client 1/R). Time-slicing
configs rename ``nvidia.com/gpu`` to ``nvidia.com/gpu.shared`` (what the time-slicing mechanism's pods request) and
fail requests for more than one replica (more replicas give no more compute). MPS runs only on full GPUs, not
MIG-enabled devices: a node with MIG devices (today or in the MIG plan) gets no MPS config. Nodes are pooled by GPU
model and sharing; each pool is one named config. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from recommender.core.devplugin import GPU_RESOURCE, MPS, NO_SHARING, TIME_SLICING, DevicePluginConfig
from recommender.core.inventory import Allocation, GpuNode, Sharing
from recommender.core.plan import DevicePluginPlan, NodeDevicePluginPlan, NodeMigPlan, Recommendation
from recommender.core.settings import Settings
from recommender.mechanisms.mps import device_plugin_mps_replicas

_SHORT = {TIME_SLICING: "ts", MPS: "mps", NO_SHARING: "no-sharing"}
MPS_ON_MIG = "MPS runs only on full GPUs, not MIG-enabled devices (reference.md section 3)"  # ASCII: a warning


@dataclass(frozen=True)
class SharingDemand:
    """One workload's need of the device plugin on one node: its strategy and the most replicas per GPU that
    still give it its share (``gpus``: shared devices one replica requests)."""

    workload: str  # WorkloadRef key
    node: str | None  # None: its node is unknown
    gpu_model: str | None
    strategy: str  # time-slicing | mps
    replicas: int
    gpus: int = 1
    new: bool = False  # the recommendation moves it onto this sharing (its pods will be rewritten)


def _replicas(alloc: Allocation) -> int | None:
    if alloc.sharing is Sharing.MPS:
        return device_plugin_mps_replicas(alloc)
    return round(1 / alloc.gpu_equivalents) if alloc.gpu_equivalents > 0 else None


def sharing_demands(recs: Sequence[Recommendation], settings: Settings) -> tuple[list[SharingDemand], list[str]]:
    """What each workload asks of the device plugin, per node its pods run on: time-slicing, and MPS where the
    device plugin hands it out (``mechanisms.fraction_backend`` mps). The recommended allocation, else today's."""
    out: list[SharingDemand] = []
    warnings: list[str] = []
    wanted = {Sharing.TIME_SLICING: TIME_SLICING}
    if settings.mechanisms.fraction_backend == "mps":
        wanted[Sharing.MPS] = MPS
    for r in recs:
        alloc = r.recommended or r.workload.allocation
        strategy = wanted.get(alloc.sharing)
        if strategy is None or alloc.replicas <= 0:
            continue
        replicas = _replicas(alloc)
        if replicas is None:
            warnings.append(f"{r.ref.key}: its {strategy} share is unknown: no device-plugin config for it")
            continue
        new = r.recommended is not None and r.workload.allocation.sharing is not alloc.sharing
        for node in r.workload.nodes or (None,):
            out.append(SharingDemand(r.ref.key, node, alloc.gpu_model, strategy, max(1, replicas),
                                     max(1, alloc.gpus), new))
    return out, warnings


def mig_enabled(node: GpuNode, mig_plan: NodeMigPlan | None) -> bool:
    """Whether any GPU of the node has MIG devices, today or after the MIG plan."""
    if mig_plan is not None:
        return any(mig_plan.layouts)
    return any(node.mig_devices) or node.mig_config not in (None, "all-disabled")


def _strategy(demands: Sequence[SharingDemand], mig: bool, reasons: list[str]) -> str:
    """One strategy per node: MPS is dropped on MIG-enabled GPUs; between the two, the one more workloads need."""
    if mig and any(d.strategy == MPS for d in demands):
        names = ", ".join(sorted({d.workload for d in demands if d.strategy == MPS}))
        reasons.append(f"{MPS_ON_MIG}: {names} need a node with MIG disabled; no MPS config here")
        demands = [d for d in demands if d.strategy != MPS]
    counts = {s: len({d.workload for d in demands if d.strategy == s}) for s in (MPS, TIME_SLICING)}
    if not any(counts.values()):
        return NO_SHARING
    chosen = max((MPS, TIME_SLICING), key=lambda s: counts[s])  # a tie goes to MPS: its caps hold
    other = TIME_SLICING if chosen == MPS else MPS
    if counts[other]:
        names = ", ".join(sorted({d.workload for d in demands if d.strategy == other}))
        reasons.append(f"time-slicing and MPS are exclusive per node: {chosen} kept (more workloads); {names} "
                       f"need a {other} node")
    return chosen


def _rename(demands: Sequence[SharingDemand], current: DevicePluginConfig | None) -> bool:
    """Time-slicing renames to ``nvidia.com/gpu.shared``, what the mechanism writes on the pods it moves; a node
    whose time-slicing today keeps ``nvidia.com/gpu`` keeps it while no pod is moved there."""
    keep = current is not None and current.strategy == TIME_SLICING and not current.rename_by_default
    return not keep or any(d.new for d in demands)


def wanted_config(demands: Sequence[SharingDemand], node: GpuNode, mig: bool, reasons: list[str]
                  ) -> DevicePluginConfig:
    """The config the node needs for these demands (none of them: no sharing)."""
    current = node.device_plugin
    mig_strategy = current.mig_strategy if current is not None else "mixed" if mig else "none"
    strategy = _strategy(demands, mig, reasons)
    mine = [d for d in demands if d.strategy == strategy]
    if not mine:
        return DevicePluginConfig(mig_strategy=mig_strategy)
    replicas = min(d.replicas for d in mine)
    if len({d.replicas for d in mine}) > 1:
        reasons.append(f"{replicas} replicas per GPU: the fewest these workloads need (each gets at least its share)")
    if strategy == MPS:
        return DevicePluginConfig(MPS, replicas, mig_strategy=mig_strategy)
    multi = sorted({d.workload for d in mine if d.gpus > 1})
    if multi:
        reasons.append(f"{', '.join(multi)} request more than one shared GPU: failRequestsGreaterThanOne left off")
    return DevicePluginConfig(TIME_SLICING, replicas, _rename(mine, current), not multi, mig_strategy)


def config_document(cfg: DevicePluginConfig) -> dict[str, Any]:
    """The plugin's ``version: v1`` document for a config (reference.md §3)."""
    doc: dict[str, Any] = {"version": "v1", "flags": {"migStrategy": cfg.mig_strategy}}
    resources = [{"name": GPU_RESOURCE, "replicas": cfg.replicas}]
    if cfg.strategy == TIME_SLICING:
        doc["sharing"] = {"timeSlicing": {"renameByDefault": cfg.rename_by_default,
                                          "failRequestsGreaterThanOne": cfg.fail_requests_greater_than_one,
                                          "resources": resources}}
    elif cfg.strategy == MPS:
        doc["sharing"] = {"mps": {"resources": resources}}
    return doc


def config_name(gpu_model: str, cfg: DevicePluginConfig) -> str:
    """``a100-80gb-ts-4``, ``h100-80gb-mps-2``, ``a100-80gb-no-sharing``: a pool's name, valid as a ConfigMap key
    and a label value (lowercase alphanumerics and ``-``, at most 63 characters)."""
    parts = [gpu_model, _SHORT[cfg.strategy]]
    if cfg.strategy != NO_SHARING:
        parts.append(str(cfg.replicas))
    if cfg.strategy == TIME_SLICING and not cfg.rename_by_default:
        parts.append("gpu")
    if cfg.strategy == TIME_SLICING and not cfg.fail_requests_greater_than_one:
        parts.append("multi")
    if cfg.mig_strategy != "none":
        parts.append(f"mig-{cfg.mig_strategy}")
    return re.sub(r"[^a-z0-9]+", "-", "-".join(parts).lower()).strip("-")[:63].rstrip("-")


def _node_plan(node: GpuNode, demands: Sequence[SharingDemand], mig: bool, settings: Settings,
               configs: dict[str, dict[str, Any]], warnings: list[str]) -> NodeDevicePluginPlan | None:
    """One node's plan; None where nothing shares its GPUs today (as far as known) or after the change (what
    kept a demand off the node is then a warning)."""
    current = node.device_plugin
    reasons: list[str] = []
    wanted = wanted_config(demands, node, mig, reasons)
    if wanted.strategy == NO_SHARING and (current is None or current.strategy == NO_SHARING):
        warnings.extend(f"node {node.name}: {r}" for r in reasons)
        return None
    model = node.gpu_model or next((d.gpu_model for d in demands if d.gpu_model), None) or "unknown"
    label = node.device_plugin_config or settings.kubernetes.device_plugin_default_config
    if current is None:
        reasons.append(f"current config unknown: {node.device_plugin_unknown or 'not read'}")
    if not demands:
        reasons.append("no workload analysed shares this node's GPUs any more: back to no sharing")
    if current == wanted and label:
        name, changed = label, False
        reasons.append(f"keeps nvidia.com/device-plugin.config={label} ({wanted.describe()}): nothing to change")
    else:
        name, changed = config_name(model, wanted), True
        configs[name] = config_document(wanted)
        was = current.describe() if current is not None else "unknown"
        gpus = f"{node.gpus} GPU(s) × {wanted.replicas}" if node.gpus else f"GPUs × {wanted.replicas}"
        reasons.append(f"{was} → {wanted.describe()}: the node then advertises {gpus} "
                       f"{GPU_RESOURCE}{'.shared' if wanted.rename_by_default else ''}")
    return NodeDevicePluginPlan(node.name, model, node.gpus, node.device_plugin_config,
                                current.describe() if current is not None else "unknown", name, wanted.strategy,
                                wanted.replicas, tuple(sorted({d.workload for d in demands})), changed,
                                tuple(reasons))


def plan_device_plugin(recs: Sequence[Recommendation], nodes: Sequence[GpuNode], mig_nodes: Sequence[NodeMigPlan],
                       settings: Settings) -> DevicePluginPlan | None:
    """The device plugin's configs and labels for the recommended fleet; None when no node shares GPUs through it.

    Workloads whose node is unknown (or not among ``nodes``) are pooled per GPU model on a pseudo node
    ``<MODEL, node unknown>``: their config is generated, the label goes on whichever nodes they run on."""
    demands, warnings = sharing_demands(recs, settings)
    by_name = {n.name: n for n in nodes}
    migs = {m.node: m for m in mig_nodes}
    configs: dict[str, dict[str, Any]] = {}
    plans: list[NodeDevicePluginPlan] = []
    for node in sorted(nodes, key=lambda n: n.name):
        mine = [d for d in demands if d.node == node.name]
        plan = _node_plan(node, mine, mig_enabled(node, migs.get(node.name)), settings, configs, warnings)
        plans += [plan] if plan is not None else []
    stray = [d for d in demands if d.node not in by_name]
    for d in stray:
        if d.node is not None:
            warnings.append(f"{d.workload}: node {d.node} not in the inventory: its config planned with node unknown")
    for model in sorted({d.gpu_model or "unknown" for d in stray}):
        pseudo = GpuNode(f"<{model}, node unknown>", model, 0)
        mine = [d for d in stray if (d.gpu_model or "unknown") == model]
        plan = _node_plan(pseudo, mine, False, settings, configs, warnings)
        plans += [plan] if plan is not None else []
    if not plans:
        return None
    k = settings.kubernetes
    return DevicePluginPlan(k.device_plugin_namespace, k.device_plugin_configmap_name, dict(sorted(configs.items())),
                            tuple(plans), tuple(warnings))
