"""Choosing MIG instance, batch size and MPS processes per model from measured profiles, then packing.

The input is what a profiler such as ParvaGPU's (SC'24) measures on each MIG size: for every
(GPCs, batch, MPS processes) the throughput of one process and the latency of one batch. A model's
demand is a request rate and a latency objective. The plan gives each model a set of MIG instances
whose summed capacity covers the rate, using only configurations whose measured latency fits the
objective, and packs all instances onto GPUs with :func:`policies.packing.pack`, so every layout obeys
the placement rules.

Why a search and not a formula: the cost that matters is GPUs, and GPUs depend on how the MIG sizes of
*all* models fit together (a 4g pairs with a 3g, two 3g fill a GPU's memory, a 7g takes a GPU alone).
So each model first gets a short list of minimal, cheap instance mixes (exact enumeration around its
fewest-GPC answer), then a local search swaps one model's mix at a time while the packed GPU count (then
the GPC count) drops. Within one MIG size only the configuration with the most capacity under the
latency objective is ever worth using (same GPC cost, more requests served), so a mix is just a count
per size. Pure: no I/O; the caller loads profiles, demands and the GPU model.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from slo_packing_mixes import Mix, ProfileRow, best_per_size, candidate_mixes, profile_map

from policies.packing import GpuLayout, pack
from recommender.core.catalogue import GpuModel, MigProfile


@dataclass(frozen=True)
class Demand:
    """What one model must get: a request rate and a latency objective on each batch."""

    rate_rps: float
    latency_slo_s: float


@dataclass(frozen=True)
class ModelPlan:
    """A model's chosen instances (one entry per MIG instance) and whether they meet its demand."""

    model: str
    demand: Demand
    instances: tuple[ProfileRow, ...]
    slo_met: bool
    reason: str

    @property
    def gpcs(self) -> int:
        return sum(i.gpcs for i in self.instances)

    @property
    def capacity_rps(self) -> float:
        return sum(i.capacity_rps for i in self.instances)


@dataclass(frozen=True)
class Placement:
    """One MIG instance on one GPU: which model and configuration, which profile, which start slice."""

    gpu_index: int
    start: int
    profile: str
    model: str
    config: ProfileRow


@dataclass(frozen=True)
class SloPackingResult:
    """The plan: per-model choices, the valid per-GPU layouts and who sits where."""

    plans: Mapping[str, ModelPlan]
    layouts: tuple[GpuLayout, ...]
    placements: tuple[Placement, ...] = field(default=())

    @property
    def gpus(self) -> int:
        return len(self.layouts)

    @property
    def gpcs(self) -> int:
        return sum(p.gpcs for p in self.plans.values())

    @property
    def slo_met(self) -> bool:
        return all(p.slo_met for p in self.plans.values())


def _layout_for(gpu: GpuModel, items: Sequence[MigProfile]) -> GpuLayout | None:
    """A valid layout holding exactly these profiles, trying every placement order, or None.

    First-valid-start depends on order: 3g then 2g+2g fails (the 3g takes start 0 and blocks both 2g),
    2g+2g then 3g fits (3g at start 4). ``GpuLayout.start_for`` keeps every try within the rules.
    """
    for order in dict.fromkeys(itertools.permutations(items)):
        layout = GpuLayout(gpu)
        for prof in order:
            start = layout.start_for(prof)
            if start is None:
                break
            layout.placed.append((prof, start))
        else:
            return layout
    return None


def fill_patterns(gpu: GpuModel, profiles: Mapping[int, MigProfile]) -> list[tuple[int, ...]]:
    """Every multiset of the sizes (as sorted GPC tuples) that one GPU can hold, fullest first."""
    sizes = sorted(profiles)
    out: list[tuple[int, ...]] = []

    def rec(i: int, left: int, acc: list[int]) -> None:
        if i == len(sizes):
            if acc and _layout_for(gpu, [profiles[g] for g in acc]) is not None:
                out.append(tuple(acc))
            return
        g = sizes[i]
        for n in range(left // g + 1):
            rec(i + 1, left - n * g, acc + [g] * n)

    rec(0, gpu.sm_slices, [])
    out.sort(key=lambda p: (-sum(p), -max(p)))
    return out


def _pattern_pack(counts: dict[int, int], gpu: GpuModel, profiles: Mapping[int, MigProfile],
                  patterns: Sequence[tuple[int, ...]]) -> list[GpuLayout]:
    """Fill GPU after GPU with the fullest pattern the remaining instances allow (largest sizes first)."""
    left = dict(counts)
    layouts: list[GpuLayout] = []
    while any(left.values()):
        for pat in patterns:
            need: dict[int, int] = {}
            for g in pat:
                need[g] = need.get(g, 0) + 1
            if all(left.get(g, 0) >= n for g, n in need.items()):
                layout = _layout_for(gpu, [profiles[g] for g in pat])
                assert layout is not None  # patterns were checked when built
                layouts.append(layout)
                for g, n in need.items():
                    left[g] -= n
                break
        else:  # pragma: no cover - a single instance of any size is always a pattern
            raise ValueError("an instance fits no GPU pattern")
    return layouts


def _pack(mixes: Mapping[str, Mix], profiles: Mapping[int, MigProfile], gpu: GpuModel,
          patterns: Sequence[tuple[int, ...]] = ()) -> list[GpuLayout]:
    """``policies.packing.pack`` (first-fit decreasing), or the pattern fill when that needs fewer GPUs."""
    ffd = pack(gpu, [profiles[g] for mix in mixes.values() for g, n in mix for _ in range(n)])
    if not patterns:
        return ffd
    counts: dict[int, int] = {}
    for mix in mixes.values():
        for g, n in mix:
            counts[g] = counts.get(g, 0) + n
    alt = _pattern_pack(counts, gpu, profiles, patterns)
    return alt if len(alt) < len(ffd) else ffd


def _cost(mixes: Mapping[str, Mix], profiles: Mapping[int, MigProfile], gpu: GpuModel,
          patterns: Sequence[tuple[int, ...]]) -> tuple[int, int]:
    return len(_pack(mixes, profiles, gpu, patterns)), sum(g * n for mix in mixes.values() for g, n in mix)


def _search(
    cands: Mapping[str, list[Mix]], profiles: Mapping[int, MigProfile], gpu: GpuModel, max_rounds: int,
    patterns: Sequence[tuple[int, ...]],
) -> dict[str, Mix]:
    """Local search over one model's mix at a time, then pairs, while (GPUs, GPCs) improves.

    Starts from every model's fewest-GPC mix, so the result never uses more GPCs than needed unless that
    saves a GPU. Stops early at the lower bound ceil(GPCs / SM slices per GPU).
    """
    chosen = {m: c[0] for m, c in cands.items()}
    cost = _cost(chosen, profiles, gpu, patterns)
    floor_gpus = math.ceil(sum(g * n for c in cands.values() for g, n in c[0]) / gpu.sm_slices)
    movable = [m for m, c in cands.items() if len(c) > 1]
    for _ in range(max_rounds):
        if cost[0] <= floor_gpus:
            break
        best = (cost, chosen)
        for m in movable:
            for mix in cands[m]:
                trial = {**chosen, m: mix}
                c = _cost(trial, profiles, gpu, patterns)
                if c < best[0]:
                    best = (c, trial)
        if best[0] == cost:
            for a, b in itertools.combinations(movable, 2):
                for ma, mb in itertools.product(cands[a], cands[b]):
                    trial = {**chosen, a: ma, b: mb}
                    c = _cost(trial, profiles, gpu, patterns)
                    if c < best[0]:
                        best = (c, trial)
        if best[0] == cost:
            break
        cost, chosen = best
    return chosen


def plan(
    profiles: Mapping[str, Sequence[ProfileRow]],
    demands: Mapping[str, Demand],
    gpu: GpuModel,
    *,
    profile_for_gpcs: Mapping[int, str] | None = None,
    latency_fraction: float = 1.0,
    slack_gpcs: int = 4,
    max_candidates: int = 12,
    max_rounds: int = 20,
) -> SloPackingResult:
    """Choose instances per model so every rate and latency objective is met, on as few GPUs as found.

    ``latency_fraction`` scales the objective a configuration's measured latency must fit (1.0: latency
    ≤ SLO; 0.5 leaves half the objective for a request to wait for its batch to fill). A model with no
    profile, or no configuration within its latency objective, gets no instances and ``slo_met=False``
    with the reason; the others are still planned and packed.
    """
    if not gpu.supports_mig:
        raise ValueError(f"{gpu.key} has no MIG profiles")
    mig = profile_map(gpu, profile_for_gpcs)
    cands: dict[str, list[Mix]] = {}
    best_cfg: dict[str, dict[int, ProfileRow]] = {}
    failed: dict[str, str] = {}
    for model, demand in demands.items():
        rows = profiles.get(model)
        if not rows:
            failed[model] = "no measured profile for this model"
            continue
        limit = demand.latency_slo_s * latency_fraction
        cfg = best_per_size(rows, limit, sorted(mig))
        if demand.rate_rps > 0 and not cfg:
            fastest = min((r.latency_s for r in rows if r.throughput_rps > 0), default=math.inf)
            failed[model] = (
                f"no configuration within the latency objective: fastest measured {fastest * 1000:.1f} ms "
                f"> {limit * 1000:.1f} ms"
            )
            continue
        best_cfg[model] = cfg
        cands[model] = candidate_mixes({g: r.capacity_rps for g, r in cfg.items()}, demand.rate_rps,
                                       slack_gpcs, max_candidates)
    patterns = fill_patterns(gpu, mig)
    chosen = _search(cands, mig, gpu, max_rounds, patterns) if cands else {}
    plans: dict[str, ModelPlan] = {}
    for model, demand in demands.items():
        if model in failed:
            plans[model] = ModelPlan(model, demand, (), False, failed[model])
            continue
        inst = tuple(best_cfg[model][g] for g, n in chosen[model] for _ in range(n))
        cap = sum(i.capacity_rps for i in inst)
        reason = (f"{cap:.1f} req/s ≥ {demand.rate_rps:g} req/s with every batch ≤ "
                  f"{demand.latency_slo_s * latency_fraction * 1000:.1f} ms")
        plans[model] = ModelPlan(model, demand, inst, True, reason)
    layouts = _pack(chosen, mig, gpu, patterns)
    return SloPackingResult(plans, tuple(layouts), _attribute(layouts, plans, mig))


def _attribute(layouts: Sequence[GpuLayout], plans: Mapping[str, ModelPlan],
               mig: Mapping[int, MigProfile]) -> tuple[Placement, ...]:
    """Name the model on each placed slice: instances of one size are interchangeable, so hand them out."""
    pool: dict[str, list[tuple[str, ProfileRow]]] = {}
    for p in plans.values():
        for inst in p.instances:
            pool.setdefault(mig[inst.gpcs].name, []).append((p.model, inst))
    out: list[Placement] = []
    for i, layout in enumerate(layouts):
        for prof, start in sorted(layout.placed, key=lambda ps: ps[1]):
            model, cfg = pool[prof.name].pop(0)
            out.append(Placement(i, start, prof.name, model, cfg))
    return tuple(out)
