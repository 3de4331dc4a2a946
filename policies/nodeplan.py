"""Per-node MIG plans: each node's slices packed on its own GPUs, overflow moved, the mig-parted config.

A node's slices are packed with :func:`policies.packing.solve_mig` (fewest GPUs, then fewest GPUs whose
devices change against ``GpuNode.mig_devices``). GPUs held whole by non-MIG workloads (a demand with
``profile=None``) are left out of the MIG room and get MIG disabled. Slices that do not fit on their
node go to free GPUs of other nodes of the same model, else to a pseudo node ``<new MODEL node k>``
that says how many GPUs are missing; demands whose node is unknown are packed per model on pseudo
nodes ``<MODEL, node unknown k>``. Every MIG change evicts every GPU pod on that GPU and pauses the
node's GPU clients (reference.md §2): node-level maintenance, so ties go to fewer reconfigured GPUs.

Conventions: GPU index = position; a GPU with no MIG devices in a generated config has MIG disabled;
a GPU with no planned workload keeps its current devices (no eviction). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from policies.migdemand import MigDemand
from policies.miglayout import mig_parted_config, node_configs
from policies.packing import Devices, GpuLayout, assign_indices, devices_of, place, solve_mig
from recommender.core.catalogue import Catalogue, GpuModel
from recommender.core.inventory import GpuNode
from recommender.core.plan import NodeMigPlan

DEFAULT_GPUS_PER_NEW_NODE = 8
MIG_DISABLED_CONFIG = "all-disabled"
EVICTION = ("each reconfiguration evicts every GPU pod on that GPU and the MIG manager pauses the node's "
            "GPU clients: node-level maintenance, plan it for a window")


@dataclass(frozen=True)
class NodePlanResult:
    """Node plans (real nodes by name, then pseudo nodes), the mig-parted config, and what was skipped."""

    nodes: tuple[NodeMigPlan, ...]
    mig_parted_config: Mapping[str, Any]
    warnings: tuple[str, ...] = ()
    new_gpus: Mapping[str, int] = field(default_factory=dict)  # GPUs missing per model


@dataclass
class _Slot:
    """One GPU while planning: MIG devices (with the workloads on them), whole, or kept as it is."""

    kind: str  # "mig" | "whole" | "keep"
    devices: Devices = ()
    workloads: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Moved:
    """A GPU layout that did not fit on its node, with the workloads on it."""

    devices: Devices
    workloads: tuple[str, ...]
    origin: str  # node it came from; "" for none


@dataclass
class _NodeState:
    node: GpuNode
    gpu: GpuModel
    current: list[Devices]
    slots: list[_Slot]
    reasons: list[str] = field(default_factory=list)
    optimal: bool = True
    new: bool = False  # a pseudo node: GPUs to set up, nothing to evict


def _fmt(devs: Devices) -> str:
    return " + ".join(f"{n}×{name}" for name, n in devs) or "no MIG devices"


def _check(d: MigDemand, catalogue: Catalogue, nodes: Mapping[str, GpuNode]) -> str | None:
    """Why a demand cannot be planned, or None."""
    gpu = catalogue.get(d.gpu_model)
    if gpu is None:
        return f"{d.workload}: unknown GPU model {d.gpu_model!r}: no MIG plan"
    if d.count <= 0:
        return f"{d.workload}: count {d.count} is not positive: ignored"
    if d.profile is not None and not gpu.supports_mig:
        return f"{d.workload}: {gpu.key} has no MIG: {d.profile} cannot be placed"
    if d.profile is not None and gpu.profile(d.profile) is None:
        return f"{d.workload}: {d.profile!r} is not a MIG profile of {gpu.key}: no MIG plan"
    node = nodes.get(d.node) if d.node else None
    if node is not None and node.gpu_model != gpu.key:
        return f"{d.workload}: node {node.name} has {node.gpu_model or 'unknown'} GPUs, not {gpu.key}: ignored"
    return None


def _pool(demands: Sequence[MigDemand]) -> dict[str, list[str]]:
    """Workload key per slice, per profile (sorted, so attribution is deterministic)."""
    out: dict[str, list[str]] = {}
    for d in sorted(demands, key=lambda d: d.workload):
        if d.profile is not None:
            out.setdefault(d.profile, []).extend([d.workload] * d.count)
    return out


def _take(pool: dict[str, list[str]], devs: Devices) -> tuple[str, ...]:
    """Workloads whose slices these devices hold; a kept GPU may hold spare slices no workload asked for."""
    taken = {pool[name].pop(0) for name, n in devs for _ in range(n) if pool.get(name)}
    return tuple(sorted(taken))


def _current(node: GpuNode, warnings: list[str]) -> list[Devices]:
    cur = [devices_of(m) for m in node.mig_devices[: node.gpus]]
    if len(node.mig_devices) > node.gpus:
        warnings.append(f"node {node.name}: MIG devices listed for {len(node.mig_devices)} GPUs, it has "
                        f"{node.gpus}: the extra ones are ignored")
    return cur + [()] * (node.gpus - len(cur))


def _whole(demands: Sequence[MigDemand], node: GpuNode, warnings: list[str]) -> int:
    whole = sum(d.count for d in demands if d.profile is None)
    if whole > node.gpus:
        warnings.append(f"node {node.name}: whole-GPU workloads hold {whole} GPUs, it has {node.gpus}")
    return min(whole, node.gpus)


def _mark_whole(state: _NodeState, whole: int) -> None:
    """Whole GPUs take free GPUs with no MIG devices first (nothing to tear down), then the lowest index."""
    free = [i for i, s in enumerate(state.slots) if s.kind == "keep"]
    for i in sorted(free, key=lambda i: (bool(state.current[i]), i))[:whole]:
        state.slots[i] = _Slot("whole")


def _plan_own(state: _NodeState, demands: Sequence[MigDemand], warnings: list[str],
              memo: MutableMapping[str, Any] | None = None) -> list[_Moved]:
    """Pack the node's own slices on its GPUs; return the layouts that did not fit (its overflow)."""
    node, gpu = state.node, state.gpu
    whole = _whole(demands, node, warnings)
    slices = [p for d in demands if d.profile is not None for p in [gpu.profile(d.profile)] * d.count if p]
    packing = solve_mig(gpu, slices, [dict(c) for c in state.current], memo=memo)
    state.optimal = packing.optimal
    chosen = sorted((devices_of(lay.mig_devices()) for lay in packing.layouts),
                    key=lambda d: d not in state.current)  # stable: GPUs left as they are kept first
    room = node.gpus - whole
    kept, overflow = chosen[:room], chosen[room:]
    pool = _pool(demands)
    for devs, i in zip(kept, assign_indices(kept, state.current, range(node.gpus)), strict=True):
        assert i is not None  # room ≤ GPUs
        state.slots[i] = _Slot("mig", devs, _take(pool, devs))
    _mark_whole(state, whole)
    how = "fewest possible" if packing.optimal else "not proven fewest"
    n_work = len({d.workload for d in demands if d.profile})
    state.reasons.append(f"{len(slices)} MIG slices of {n_work} workload(s) need {len(chosen)} {gpu.key} GPU(s) "
                         f"({how}); the node has {room} for MIG")
    state.reasons.extend(packing.reasons)
    if whole:
        state.reasons.append(f"{whole} GPU(s) held whole by non-MIG workloads: MIG disabled there")
    if overflow:
        n = sum(c for devs in overflow for _, c in devs)
        state.reasons.append(f"{n} slice(s) on {len(overflow)} GPU layout(s) do not fit here: moved to other "
                             f"{gpu.key} nodes or new ones")
    return [_Moved(devs, _take(pool, devs), node.name) for devs in overflow]


def _place_moved(states: Sequence[_NodeState], moved: list[_Moved]) -> list[_Moved]:
    """Put overflow layouts on free GPUs of other nodes (by name), same-devices GPUs first; return the rest."""
    for state in states:
        free = [i for i, s in enumerate(state.slots) if s.kind == "keep"]
        if not moved or not free:
            continue
        idx = assign_indices([m.devices for m in moved], state.current, free)
        rest = []
        for m, i in zip(moved, idx, strict=True):
            if i is None or m.origin == state.node.name:
                rest.append(m)
                continue
            state.slots[i] = _Slot("mig", m.devices, m.workloads)
            state.reasons.append(f"GPU {i} takes {_fmt(m.devices)} that did not fit on node {m.origin}")
        moved = rest
    return moved


def _layouts(state: _NodeState) -> list[GpuLayout]:
    """Per-index layouts; a kept GPU whose devices cannot be placed validly is emptied (and says so)."""
    out = []
    for i, s in enumerate(state.slots):
        devs = s.devices if s.kind == "mig" else state.current[i] if s.kind == "keep" else ()
        profs = [state.gpu.profile(n) for n, c in devs for _ in range(c)]
        lay = place(state.gpu, [p for p in profs if p]) if all(profs) else None
        if lay is None:
            state.reasons.append(f"GPU {i}: current devices {_fmt(devs)} are not a valid {state.gpu.key} layout: "
                                 "MIG disabled")
            lay = GpuLayout(state.gpu)
        out.append(lay)
    return out


def _config(node: str, layouts: Sequence[GpuLayout]) -> tuple[str, list[dict[str, Any]]]:
    """Config name and entries; GPUs with no MIG devices get ``mig-enabled: false``."""
    name = node_configs({node: layouts})[node]
    entries = mig_parted_config({node: layouts})["mig-configs"][name]
    return name, [e if e["mig-devices"] else {"devices": e["devices"], "mig-enabled": False} for e in entries]


def _finish(state: _NodeState, configs: dict[str, list[dict[str, Any]]]) -> NodeMigPlan | None:
    """The node's plan: changes per GPU in words, the reconfiguration count and its config name."""
    if not any(s.kind == "mig" for s in state.slots):
        return None
    node, reasons = state.node, state.reasons
    layouts = _layouts(state)
    name, entries = _config(node.name, layouts)
    known = bool(node.mig_devices) or node.mig_config == MIG_DISABLED_CONFIG
    changed = [i for i, lay in enumerate(layouts) if devices_of(lay.mig_devices()) != state.current[i]]
    if not known and node.mig_config == name:
        changed = []  # the label already names this exact content-derived config
    elif not known:
        reasons.append("current MIG devices unknown: every GPU given MIG devices counts as reconfigured")
    for i in [] if state.new else changed:
        reasons.append(f"GPU {i}: {_fmt(state.current[i])} → {_fmt(devices_of(layouts[i].mig_devices()))}")
    if changed and state.new:
        reasons.append(f"{len(changed)} GPU(s) to set up with MIG before the workloads move there")
    elif changed:
        reasons.append(f"{len(changed)} GPU(s) reconfigured: {EVICTION}")
    else:
        reasons.append("no GPU changes its MIG devices: nothing is evicted")
    if not changed and node.mig_config and node.mig_config != name:
        reasons.append(f"keeps nvidia.com/mig.config={node.mig_config} (not repeated in the generated config)")
        name = node.mig_config
    else:
        configs[name] = entries
    workloads = tuple(sorted({w for s in state.slots for w in s.workloads}))
    return NodeMigPlan(node.name, state.gpu.key, node.gpus, tuple(lay.mig_devices() for lay in layouts),
                       workloads, name, len(changed), tuple(reasons))


def _pseudo(gpu: GpuModel, moved: Sequence[_Moved], label: str, per_node: int, why: str) -> list[_NodeState]:
    """Pseudo nodes (``<label k>``) holding these layouts, ``per_node`` GPUs at most each."""
    out = []
    for k in range(0, len(moved), per_node):
        chunk = moved[k: k + per_node]
        node = GpuNode(f"<{label} {k // per_node + 1}>", gpu.key, len(chunk), mig_config=MIG_DISABLED_CONFIG)
        state = _NodeState(node, gpu, [()] * len(chunk), [_Slot("mig", m.devices, m.workloads) for m in chunk],
                           new=True)
        state.reasons.append(why)
        out.append(state)
    return out


def _unknown_node(gpu: GpuModel, demands: Sequence[MigDemand], per_node: int,
                  memo: MutableMapping[str, Any] | None = None) -> list[_NodeState]:
    slices = [p for d in demands if d.profile is not None for p in [gpu.profile(d.profile)] * d.count if p]
    packing = solve_mig(gpu, slices, memo=memo)
    pool = _pool(demands)
    moved = [_Moved(devs, _take(pool, devs), "") for devs in (devices_of(lay.mig_devices()) for lay in packing.layouts)]
    why = (f"node unknown for {len({d.workload for d in demands})} workload(s): their {len(slices)} slices "
           f"packed on {len(moved)} {gpu.key} GPU(s) of their own")
    return _pseudo(gpu, moved, f"{gpu.key}, node unknown", per_node, why)


def plan_nodes(demands: Sequence[MigDemand], nodes: Sequence[GpuNode], catalogue: Catalogue,
               memo: MutableMapping[str, Any] | None = None) -> NodePlanResult:
    """Per-node MIG plans for the demands, overflow moved or reported as new GPUs, and the mig-parted config
    (``memo``: MIG packings remembered, :func:`policies.packing.solved`)."""
    by_name = {n.name: n for n in nodes}
    warnings: list[str] = []
    ok: list[MigDemand] = []
    for d in demands:
        problem = _check(d, catalogue, by_name)
        if problem:
            warnings.append(problem)
        elif d.node is not None and d.node not in by_name:
            warnings.append(f"{d.workload}: node {d.node} not in the inventory: planned with node unknown")
            ok.append(MigDemand(d.workload, None, d.gpu_model, d.profile, d.count))
        else:
            ok.append(d)
    states: dict[str, _NodeState] = {}
    moved: dict[str, list[_Moved]] = {}
    for node in sorted(nodes, key=lambda n: n.name):
        gpu = catalogue.get(node.gpu_model)
        if gpu is None or not gpu.supports_mig:
            continue
        cur = _current(node, warnings)
        states[node.name] = state = _NodeState(node, gpu, cur, [_Slot("keep") for _ in cur])
        mine = [d for d in ok if d.node == node.name]
        if any(d.profile for d in mine):
            moved.setdefault(gpu.key, []).extend(_plan_own(state, mine, warnings, memo))
        elif mine:  # whole GPUs only: those GPUs are not free for other nodes' overflow
            _mark_whole(state, _whole(mine, node, warnings))
    return _assemble(ok, states, moved, catalogue, warnings, memo)


def _assemble(ok: Sequence[MigDemand], states: Mapping[str, _NodeState], moved: Mapping[str, list[_Moved]],
              catalogue: Catalogue, warnings: list[str], memo: MutableMapping[str, Any] | None = None
              ) -> NodePlanResult:
    extra: list[_NodeState] = []
    new_gpus: dict[str, int] = {}
    for key in sorted({*moved, *(d.gpu_model for d in ok if d.node is None and d.profile)}):
        gpu = catalogue.gpus[key]
        same = [s for s in states.values() if s.gpu.key == key]
        per_node = max((s.node.gpus for s in same), default=DEFAULT_GPUS_PER_NEW_NODE)
        rest = _place_moved(same, moved.get(key, []))
        if rest:
            new_gpus[key] = len(rest)
            why = (f"needs {len(rest)} more {key} GPU(s): these slices do not fit on the free GPUs of the "
                   f"existing {key} nodes")
            extra += _pseudo(gpu, rest, f"new {key} node", per_node, why)
        unknown = [d for d in ok if d.node is None and d.gpu_model == key and d.profile]
        if unknown:
            extra += _unknown_node(gpu, unknown, per_node, memo)
    configs: dict[str, list[dict[str, Any]]] = {}
    plans = [p for s in [*states.values(), *extra] if (p := _finish(s, configs)) is not None]
    config = {"version": "v1", "mig-configs": dict(sorted(configs.items()))}
    return NodePlanResult(tuple(plans), config, tuple(warnings), new_gpus)
