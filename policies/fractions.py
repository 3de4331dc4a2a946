"""Packing fractional GPU shares (MPS, HAMi, KAI) onto whole GPUs: a fast heuristic, a bound, an exact 1-D solve.

A share is a compute fraction (0-1 of one GPU's SMs: MPS active thread percentage, HAMi ``gpucores``)
and optionally memory in MiB (MPS pinned memory limit, HAMi ``gpumem``, KAI ``gpu-memory``). One GPU
holds shares while compute sums to at most 1, memory to at most the GPU's, and clients to at most
``max_clients`` (MPS: 48 per GPU, reference.md §4). Compute is counted in integer units of
1/``resolution`` GPU, each share rounded up, so a share never gets less than it asked for.

* :func:`best_fit_decreasing`: largest first, each to the GPU it leaves fullest (2-D: compute and
  memory, both normalised to one GPU). Milliseconds for thousands of shares.
* :func:`lower_bound`: no packing can use fewer GPUs than ceil(Σ compute), ceil(Σ memory / GPU memory)
  or ceil(clients / max_clients).
* :func:`pack_exact_1d`: compute only, solved exactly as an arc-flow MILP (Valério de Carvalho's
  bin-packing graph, HiGHS) when there are few distinct share sizes, as in real clusters that hand out
  a handful of fractions. Its size grows with (distinct sizes × resolution), not with the share count.

Pure: no I/O.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from scipy.optimize import LinearConstraint

MPS_MAX_CLIENTS = 48  # per GPU (reference.md §4); scales down with the MIG compute instance size
RESOLUTION = 1000  # compute units per GPU: Kubernetes-style milli-GPU
MAX_ARCS = 200_000  # beyond this the exact graph is too large to be worth solving
SOLVER_TIME_LIMIT_S = 20.0


@dataclass(frozen=True)
class Share:
    """One client's share of a GPU: compute fraction 0-1 and, when known, memory in MiB."""

    client: str
    compute_frac: float
    memory_mib: float = 0.0


@dataclass(frozen=True)
class FractionPacking:
    """Clients per GPU, how good that is against the lower bound, and the shares that could not be placed."""

    gpus: tuple[tuple[str, ...], ...]  # client names per GPU
    lower_bound: int
    method: str  # "best-fit-decreasing" | "arc-flow-milp"
    optimal: bool  # proven fewest GPUs
    unplaced: tuple[str, ...] = ()  # clients whose share cannot fit any GPU
    reasons: tuple[str, ...] = ()

    @property
    def n_gpus(self) -> int:
        return len(self.gpus)


def units(frac: float, resolution: int = RESOLUTION) -> int:
    """A compute fraction in integer units of 1/resolution GPU, rounded up (never less than asked)."""
    return max(1, math.ceil(frac * resolution - 1e-6))


def _split(shares: Sequence[Share], gpu_memory_mib: float | None) -> tuple[list[Share], list[str], list[str]]:
    """Shares that can fit one GPU, and the names and reasons of those that cannot."""
    ok, bad, why = [], [], []
    for s in shares:
        problem = None
        if not 0 < s.compute_frac <= 1 or math.isnan(s.compute_frac):
            problem = f"compute share {s.compute_frac} is not in (0, 1]"
        elif s.memory_mib < 0 or (gpu_memory_mib is not None and s.memory_mib > gpu_memory_mib):
            problem = f"memory {s.memory_mib:g} MiB does not fit one GPU ({gpu_memory_mib:g} MiB)"
        if problem:
            bad.append(s.client)
            why.append(f"{s.client}: {problem}: not placed")
        else:
            ok.append(s)
    return ok, bad, why


def lower_bound(shares: Sequence[Share], gpu_memory_mib: float | None = None, max_clients: int = MPS_MAX_CLIENTS,
                resolution: int = RESOLUTION) -> int:
    """Fewest GPUs any packing could use: the largest of the compute, memory and client-count bounds."""
    if not shares:
        return 0
    compute = math.ceil(sum(units(s.compute_frac, resolution) for s in shares) / resolution)
    memory = math.ceil(sum(s.memory_mib for s in shares) / gpu_memory_mib - 1e-9) if gpu_memory_mib else 0
    return max(compute, memory, math.ceil(len(shares) / max_clients))


def best_fit_decreasing(shares: Sequence[Share], gpu_memory_mib: float | None = None,
                        max_clients: int = MPS_MAX_CLIENTS, resolution: int = RESOLUTION) -> FractionPacking:
    """Largest share first (by its larger normalised dimension), each onto the GPU it leaves fullest."""
    ok, bad, why = _split(shares, gpu_memory_mib)
    mem = gpu_memory_mib or 0.0
    order = sorted(ok, key=lambda s: (-max(units(s.compute_frac, resolution) / resolution,
                                           s.memory_mib / mem if mem else 0.0), s.client))
    if not mem:
        gpus = _bfd_1d([(units(s.compute_frac, resolution), s.client) for s in order], resolution, max_clients)
    else:
        gpus = _bfd_2d(order, mem, max_clients, resolution)
    lb = lower_bound(ok, gpu_memory_mib, max_clients, resolution)
    return FractionPacking(tuple(tuple(g) for g in gpus), lb, "best-fit-decreasing", len(gpus) == lb,
                           tuple(bad), tuple(why))


def _bfd_1d(items: Sequence[tuple[int, str]], cap: int, max_clients: int) -> list[list[str]]:
    """Best fit on compute alone: a sorted list of (room left, GPU) and bisect, O(n log n) lookups."""
    gpus: list[list[str]] = []
    room: list[tuple[int, int]] = []  # (units left, gpu index), sorted
    for size, client in items:
        k = bisect.bisect_left(room, (size, -1))
        if k < len(room):
            left, g = room.pop(k)
        else:
            left, g = cap, len(gpus)
            gpus.append([])
        gpus[g].append(client)
        if left - size > 0 and len(gpus[g]) < max_clients:
            bisect.insort(room, (left - size, g))
    return gpus


def _bfd_2d(order: Sequence[Share], mem: float, max_clients: int, resolution: int) -> list[list[str]]:
    """Best fit on compute and memory: the GPU whose normalised room left (sum of both) is smallest."""
    gpus: list[list[str]] = []
    left: list[tuple[int, float]] = []
    for s in order:
        c = units(s.compute_frac, resolution)
        best, best_room = -1, math.inf
        for g, (lc, lm) in enumerate(left):
            if lc >= c and lm >= s.memory_mib - 1e-9 and len(gpus[g]) < max_clients:
                r = (lc - c) / resolution + (lm - s.memory_mib) / mem
                if r < best_room:
                    best, best_room = g, r
        if best < 0:
            best = len(gpus)
            gpus.append([])
            left.append((resolution, mem))
        gpus[best].append(s.client)
        lc, lm = left[best]
        left[best] = (lc - c, lm - s.memory_mib)
    return gpus


def _arcs(sizes: Sequence[int], demand: Sequence[int], cap: int, max_clients: int) -> set[tuple[tuple[int, int],
                                                                                          tuple[int, int], int]]:
    """Arc-flow graph: node (load, clients), arc (from, to, size index); sizes in decreasing order.

    Items are taken in non-increasing size along every path, which keeps the graph small without losing
    any packing. Clients are tracked only when the limit could bind (cap / smallest size > max_clients).
    """
    track = cap // min(sizes) > max_clients
    nodes = {(0, 0)}
    arcs = set()
    for t, (w, d) in enumerate(zip(sizes, demand, strict=True)):
        for start in sorted(nodes):
            load, n = start
            for k in range(d):
                a, b = (load + k * w, n + k * track), (load + (k + 1) * w, n + (k + 1) * track)
                if b[0] > cap or (track and b[1] > max_clients):
                    break
                arcs.add((a, b, t))
        nodes |= {b for _, b, _ in arcs}
        if len(arcs) > MAX_ARCS:
            break
    return arcs


Node = tuple[int, int]


def _decode(arcs: Sequence[tuple[Node, Node, int]], flow: Sequence[int], loss: dict[Node, int]) -> list[list[int]]:
    """Split the integer flow into source-to-sink paths: one GPU each, its item types in path order."""
    out: dict[Node, list[list[int]]] = defaultdict(list)  # node -> [[arc index, flow left], ...]
    for k, (a, _, _) in enumerate(arcs):
        if flow[k]:
            out[a].append([k, flow[k]])
    bins: list[list[int]] = []
    while any(f for k, f in out[(0, 0)]):
        v, items = (0, 0), []
        while True:
            step = next((e for e in out[v] if e[1] > 0), None)
            if step is None:  # the flow ends here: a loss arc
                loss[v] -= 1
                break
            step[1] -= 1
            items.append(arcs[step[0]][2])
            v = arcs[step[0]][1]
        bins.append(items)
    return bins


def _model(arcs: Sequence[tuple[Node, Node, int]], demand: Sequence[int]) -> tuple[list[Node], LinearConstraint,
                                                                                   LinearConstraint, np.ndarray]:
    """Flow conservation at every node but the source (loss arcs drain to the sink) and demand coverage."""
    from scipy.optimize import LinearConstraint  # here: scipy takes ~0.5 s to import, and most reports need none
    nodes = sorted(({a for a, _, _ in arcs} | {b for _, b, _ in arcs}) - {(0, 0)})
    at = {v: i for i, v in enumerate(nodes)}
    n = len(arcs) + len(nodes)
    cons = np.zeros((len(nodes), n))
    cover = np.zeros((len(demand), n))
    cost = np.zeros(n)
    for k, (a, b, t) in enumerate(arcs):
        cons[at[b], k] += 1.0
        if a in at:
            cons[at[a], k] -= 1.0
        else:
            cost[k] = 1.0  # leaves the source: one more GPU
        cover[t, k] = 1.0
    for i in range(len(nodes)):
        cons[i, len(arcs) + i] = -1.0
    return nodes, LinearConstraint(cons, 0.0, 0.0), LinearConstraint(cover, np.array(demand, float), np.inf), cost


def pack_exact_1d(shares: Sequence[Share], max_clients: int = MPS_MAX_CLIENTS, resolution: int = RESOLUTION,
                  time_limit_s: float = SOLVER_TIME_LIMIT_S) -> FractionPacking:
    """Fewest GPUs for compute shares alone (memory ignored), exact by arc-flow MILP; BFD when too large."""
    ok, bad, why = _split(shares, None)
    bfd = best_fit_decreasing(ok, None, max_clients, resolution)
    if not ok:
        return _with(bfd, bad, why)
    size_of = {s.client: units(s.compute_frac, resolution) for s in ok}
    step = math.gcd(resolution, *size_of.values())
    by_size: dict[int, list[str]] = defaultdict(list)
    for s in sorted(ok, key=lambda s: s.client):
        by_size[size_of[s.client] // step].append(s.client)
    sizes = sorted(by_size, reverse=True)
    demand = [len(by_size[w]) for w in sizes]
    arcs = sorted(_arcs(sizes, demand, resolution // step, max_clients))
    if len(arcs) > MAX_ARCS:
        return _with(bfd, bad, [*why, f"{len(sizes)} distinct sizes make the exact graph too large: best fit kept"])
    from scipy.optimize import milp

    nodes, flow_c, cover_c, cost = _model(arcs, demand)
    res = milp(cost, constraints=[flow_c, cover_c], integrality=np.ones(len(cost)),
               options={"time_limit": time_limit_s})
    if res.x is None:
        return _with(bfd, bad, [*why, f"MILP found no solution ({res.message}): best fit kept"])
    x = [round(v) for v in res.x]
    bins = _decode(arcs, x[: len(arcs)], {v: x[len(arcs) + i] for i, v in enumerate(nodes)})
    pools = {t: list(by_size[w]) for t, w in enumerate(sizes)}
    gpus = [g for g in ([pools[t].pop(0) for t in b if pools[t]] for b in bins) if g]
    if len(gpus) > bfd.n_gpus or any(pools.values()):
        return _with(bfd, bad, [*why, "MILP answer no better than best fit: best fit kept"])
    note = [] if res.status == 0 else [f"MILP stopped early ({res.message}): best answer found kept"]
    return FractionPacking(tuple(tuple(g) for g in gpus), bfd.lower_bound, "arc-flow-milp",
                           res.status == 0 or len(gpus) == bfd.lower_bound, tuple(bad), tuple(why + note))


def _with(p: FractionPacking, bad: list[str], why: list[str]) -> FractionPacking:
    return FractionPacking(p.gpus, p.lower_bound, p.method, p.optimal, tuple(bad), tuple(why))


def pack_fractions(shares: Sequence[Share], gpu_memory_mib: float | None = None,
                   max_clients: int = MPS_MAX_CLIENTS, resolution: int = RESOLUTION) -> FractionPacking:
    """Best fit decreasing; for compute-only shares not already at the lower bound, the exact 1-D solve."""
    bfd = best_fit_decreasing(shares, gpu_memory_mib, max_clients, resolution)
    if bfd.optimal or gpu_memory_mib is not None:
        return bfd
    exact = pack_exact_1d(shares, max_clients, resolution)
    return exact if exact.n_gpus < bfd.n_gpus or exact.optimal else bfd
