"""Packing recommended MIG slices onto GPUs with valid per-GPU layouts: first-fit decreasing, and optimal.

A slice may only start at its shape's placement starts, may not overlap another slice's memory
slices, the SM slices of a GPU add up to at most its total, each shape respects its max count and
at most one ``+me`` profile sits on a GPU (reference.md §1.2-1.4). The driver is the final arbiter.

FFD (``pack``) is fast but not optimal: A100-80GB [3g.40gb, 2g.20gb, 1g.20gb, 1g.10gb+me, 1g.10gb+me]
takes 3 GPUs where 2 suffice. ``solve_mig`` enumerates every per-GPU multiset of the requested profiles
(each checked by placing it at real starts) and solves the pattern problem exactly with HiGHS
(``scipy.optimize.milp``): fewest GPUs, then fewest GPUs whose devices change against the node's
current state, because each change evicts every pod on that GPU.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from recommender.core.catalogue import GpuModel, MigProfile


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


# ---- optimal packing: exact pattern covering (MILP), ties to fewer reconfigured GPUs ----

Devices = tuple[tuple[str, int], ...]  # one GPU's MIG devices as sorted (profile name, count) pairs
SOLVER_TIME_LIMIT_S = 10.0


def devices_of(counts: Mapping[str, int]) -> Devices:
    """Canonical, hashable form of a {profile: count} map (zero counts dropped)."""
    return tuple(sorted((name, n) for name, n in counts.items() if n > 0))


def place(gpu: GpuModel, profiles: Sequence[MigProfile]) -> GpuLayout | None:
    """A valid layout holding exactly these profiles (trying every start, largest first), or None.

    Unlike ``GpuLayout.start_for`` (first free start, order-dependent), this backtracks: 3g + 2g + 2g
    fits only as 2g@0, 2g@2, 3g@4. Counts, SM slices and ``+me`` are checked first.
    """
    if sum(p.shape.sm_slices for p in profiles) > gpu.sm_slices or sum(p.has_media for p in profiles) > 1:
        return None
    per_shape = Counter(p.shape.name for p in profiles)
    if any(n > next(p.shape.max_count for p in profiles if p.shape.name == s) for s, n in per_shape.items()):
        return None
    items = sorted(profiles, key=lambda p: (-p.shape.mem_slices, -p.shape.sm_slices, p.name))
    placed: list[tuple[MigProfile, int]] = []

    def dfs(i: int, used: int, min_start: int) -> bool:
        if i == len(items):
            return True
        prof = items[i]
        for start in prof.shape.starts:
            span = ((1 << prof.shape.mem_slices) - 1) << start
            if start < min_start or start + prof.shape.mem_slices > gpu.memory_slices or span & used:
                continue
            placed.append((prof, start))
            same_next = i + 1 < len(items) and items[i + 1] == prof  # identical items: ascending starts only
            if dfs(i + 1, used | span, start if same_next else 0):
                return True
            placed.pop()
        return False

    return GpuLayout(gpu, placed) if dfs(0, 0, 0) else None


def patterns(gpu: GpuModel, demand: Mapping[str, int]) -> list[Devices]:
    """Every non-empty multiset of the demanded profiles (within demand) that one GPU can hold."""
    names = sorted(demand, key=lambda n: (-_prof(gpu, n).shape.sm_slices, n))
    out: list[Devices] = []

    def rec(i: int, sm_left: int, acc: dict[str, int]) -> None:
        if i == len(names):
            if acc and place(gpu, _expand(gpu, acc)) is not None:
                out.append(devices_of(acc))
            return
        prof = _prof(gpu, names[i])
        top = min(demand[names[i]], prof.shape.max_count, sm_left // max(prof.shape.sm_slices, 1))
        for n in range(top + 1):
            rec(i + 1, sm_left - n * prof.shape.sm_slices, {**acc, names[i]: n} if n else acc)

    rec(0, gpu.sm_slices, {})
    return sorted(out)


def _prof(gpu: GpuModel, name: str) -> MigProfile:
    prof = gpu.profile(name)
    if prof is None:
        raise ValueError(f"{name!r} is not a MIG profile of {gpu.key}")
    return prof


def _expand(gpu: GpuModel, counts: Mapping[str, int]) -> list[MigProfile]:
    return [_prof(gpu, name) for name, n in sorted(counts.items()) for _ in range(n)]


@dataclass(frozen=True)
class MigPacking:
    """Layouts for the requested slices, the GPU index each should take, and how it was found.

    ``indices[k]`` is the GPU index for ``layouts[k]``: a GPU whose current devices equal the layout
    keeps its index (not reconfigured); ``reconfigured`` counts the layouts that differ from the
    current devices at their index (each change evicts every pod on that GPU).
    """

    layouts: tuple[GpuLayout, ...]
    indices: tuple[int, ...]
    reconfigured: int
    optimal: bool  # proven fewest GPUs (and fewest reconfigured among those)
    method: str  # "milp" | "ffd"
    reasons: tuple[str, ...] = ()


def assign_indices(
    layouts: Sequence[Devices], current: Sequence[Devices], available: Iterable[int]
) -> list[int | None]:
    """GPU index per layout: one whose current devices are the same first, then one whose current devices
    hold every slice of the layout (kept as they are), then GPUs being changed anyway (current devices
    differ), then GPUs with no devices; None when ``available`` runs out."""
    free = list(available)
    cur = lambda i: current[i] if i < len(current) else ()  # noqa: E731
    out: list[int | None] = [None] * len(layouts)
    for k, devs in enumerate(layouts):
        same = next((i for i in free if devs and cur(i) == devs), None)
        if same is not None:
            out[k] = same
            free.remove(same)
    for k, devs in enumerate(layouts):  # a GPU that already holds these slices (and more) keeps them
        if out[k] is None and devs:
            superset = next((i for i in free if cur(i) and Counter(dict(cur(i))) >= Counter(dict(devs))), None)
            if superset is not None:
                out[k] = superset
                free.remove(superset)
    rest = sorted(free, key=lambda i: (not cur(i), i))
    for k in range(len(layouts)):
        if out[k] is None and rest:
            out[k] = rest.pop(0)
    return out


def _solve(pats: Sequence[Devices], demand: Mapping[str, int], matchable: Mapping[Devices, int],
           time_limit_s: float) -> tuple[list[int] | None, bool, str]:
    """Pattern counts minimising GPUs, then maximising GPUs left as they are, via one weighted MILP.

    Variables: x_p GPUs with pattern p, u_p ≤ min(x_p, current GPUs with p). Objective K·Σx − Σu with
    K = Σ current + 1, so one GPU saved always outweighs every reconfiguration avoided (exact lexicographic).
    """
    names = sorted(demand)
    n = len(pats)
    match = [p for p in pats if matchable.get(p, 0)]
    a = np.zeros((len(names), n + len(match)))
    for j, pat in enumerate(pats):
        for name, c in pat:
            a[names.index(name), j] = c
    d = np.array([demand[nm] for nm in names], dtype=float)
    link = np.zeros((len(match), n + len(match)))
    for m, pat in enumerate(match):
        link[m, pats.index(pat)] = -1.0
        link[m, n + m] = 1.0
    weight = float(sum(matchable.values()) + 1)
    cost = np.concatenate([np.full(n, weight), -np.ones(len(match))])
    upper = [min(demand[nm] // c for nm, c in p) for p in pats] + [matchable[p] for p in match]
    from scipy.optimize import Bounds, LinearConstraint, milp  # here: scipy takes ~0.5 s to import, and most
    # reports pack no MIG slice optimally

    cons = [LinearConstraint(a, d, d)] + ([LinearConstraint(link, -np.inf, 0.0)] if match else [])
    try:
        res = milp(cost, constraints=cons, integrality=np.ones(len(cost)), bounds=Bounds(0, upper),
                   options={"time_limit": time_limit_s, "presolve": True})
    except (ValueError, np.linalg.LinAlgError) as exc:  # pragma: no cover - defensive
        return None, False, f"MILP solver failed ({exc})"
    if res.x is None:
        return None, False, f"MILP solver found no solution ({res.message})"
    x = [round(v) for v in res.x[:n]]
    if not np.allclose(a[:, :n] @ np.array(x, dtype=float), d):
        return None, False, "MILP solution does not place every slice"
    return x, res.status == 0, "" if res.status == 0 else f"MILP stopped early ({res.message}): best found kept"


def solved(pats: Sequence[Devices], demand: Mapping[str, int], matchable: Mapping[Devices, int],
           time_limit_s: float, memo: MutableMapping[str, Any] | None) -> tuple[list[int] | None, bool, str]:
    """:func:`_solve`'s answer, kept in ``memo`` under ``milp:`` and a digest of every input it reads (patterns,
    demand, matchable GPUs, time limit; JSON-ready: pattern counts, proven optimal, why not)."""
    if memo is None:
        return _solve(pats, demand, matchable, time_limit_s)
    import hashlib

    raw = repr((1, tuple(pats), sorted(demand.items()), sorted(matchable.items()), float(time_limit_s)))
    k = f"milp:{hashlib.blake2b(raw.encode('utf-8'), digest_size=20).hexdigest()}"
    try:
        counts, optimal, why = memo[k]
        return (None if counts is None else [int(c) for c in counts]), bool(optimal), str(why)
    except KeyError:
        found = _solve(pats, demand, matchable, time_limit_s)
        memo[k] = [found[0], found[1], found[2]]
        return found


def solve_mig(gpu: GpuModel, profiles: Iterable[MigProfile], current: Sequence[Mapping[str, int]] = (),
              *, time_limit_s: float = SOLVER_TIME_LIMIT_S, memo: MutableMapping[str, Any] | None = None
              ) -> MigPacking:
    """Fewest GPUs for the slices, then fewest reconfigured GPUs against ``current``; FFD as the fallback.
    ``memo`` (from the edge: the pipeline's memo) keeps each MILP's answer under a digest of its inputs
    (:func:`solved`), so a report packing the same slices again solves nothing (nor imports scipy).

    Raises ValueError when a profile is not one of ``gpu``'s (a slice that cannot be placed is bad input).
    """
    profs = list(profiles)
    for p in profs:
        if gpu.profile(p.name) != p:
            raise ValueError(f"{p.name!r} is not a MIG profile of {gpu.key}")
    cur = [devices_of(c) for c in current]
    demand = dict(Counter(p.name for p in profs))
    if not profs:
        return MigPacking((), (), 0, True, "milp")
    pats = patterns(gpu, demand)
    matchable = {d: n for d, n in Counter(cur).items() if d in set(pats)}
    counts, optimal, why = solved(pats, demand, matchable, time_limit_s, memo)
    ffd = pack(gpu, profs)
    if counts is None or sum(counts) > len(ffd):
        chosen = [devices_of(lay.mig_devices()) for lay in ffd]
        layouts = {d: lay for lay, d in zip(ffd, chosen, strict=True)}
        return _finish(gpu, chosen, cur, False, "ffd", (why or "MILP used more GPUs than FFD") + ": first-fit "
                       "decreasing used instead", layouts)
    chosen = [p for p, c in zip(pats, counts, strict=True) for _ in range(c)]
    chosen.sort(key=lambda d: (-sum(_prof(gpu, nm).shape.sm_slices * c for nm, c in d), d))
    return _finish(gpu, chosen, cur, optimal, "milp", why, {})


def _finish(gpu: GpuModel, chosen: list[Devices], cur: list[Devices], optimal: bool, method: str, why: str,
            given: Mapping[Devices, GpuLayout]) -> MigPacking:
    """Place each chosen multiset, give it a GPU index, order by index and count reconfigurations."""
    idx = assign_indices(chosen, cur, range(len(cur) + len(chosen)))
    built = []
    for devs, i in zip(chosen, idx, strict=True):
        kept = cur[i] if i is not None and i < len(cur) else ()
        if kept and kept != devs and Counter(dict(kept)) >= Counter(dict(devs)):
            devs = kept  # the GPU already holds every slice asked of it: leave it as it is (spare slices stay)
        layout = place(gpu, _expand(gpu, dict(devs))) if devs not in given else given[devs]
        assert layout is not None and i is not None  # patterns were placed when enumerated
        built.append((i, layout, devs))
    built.sort(key=lambda t: t[0])
    changed = sum(1 for i, _, devs in built if (cur[i] if i < len(cur) else ()) != devs)
    return MigPacking(tuple(b[1] for b in built), tuple(b[0] for b in built), changed, optimal, method,
                      (why,) if why else ())


def pack_optimal(gpu: GpuModel, profiles: Iterable[MigProfile], current: Sequence[Mapping[str, int]] = (),
                 *, time_limit_s: float = SOLVER_TIME_LIMIT_S, memo: MutableMapping[str, Any] | None = None
                 ) -> list[GpuLayout]:
    """Layouts on the fewest GPUs, then fewest reconfigured against ``current``, ordered by GPU index.

    See :func:`solve_mig` for the indices, the reconfiguration count and the fallback reason.
    """
    return list(solve_mig(gpu, profiles, current, time_limit_s=time_limit_s, memo=memo).layouts)
