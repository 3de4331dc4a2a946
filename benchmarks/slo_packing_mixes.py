"""The per-model half of SLO-aware MIG packing: which MIG profile a GPC count means on a GPU, the measured
configuration worth using on each MIG size (most requests/s whose batch latency fits the objective), and
the few minimal instance mixes (a count per size) that reach a model's request rate. ``slo_packing.py``
packs the mixes of all models onto GPUs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from recommender.core.catalogue import GpuModel, MigProfile

# GPCs -> profile ParvaGPU profiled on an A100-80GB (1g.10gb, not 1g.20gb: the smallest memory per size).
A100_80GB_PROFILE_FOR_GPCS: Mapping[int, str] = {1: "1g.10gb", 2: "2g.20gb", 3: "3g.40gb", 4: "4g.40gb", 7: "7g.80gb"}

# Above this many GPCs for one model, the bulk is pinned to its densest size before enumerating
# mixes: enumeration grows with GPCs^5, and at that scale the bulk choice is obvious anyway.
_ENUMERATE_MAX_GPCS = 35


@dataclass(frozen=True)
class ProfileRow:
    """One measured configuration: a MIG size, a batch size and MPS processes sharing the instance.

    ``throughput_rps`` is per process (in ParvaGPU's data latency ≈ batch / throughput for each process),
    so one instance serves ``throughput_rps × mps_processes`` requests per second.
    """

    gpcs: int
    batch: int
    mps_processes: int
    throughput_rps: float
    latency_s: float

    @property
    def capacity_rps(self) -> float:
        """Requests per second one MIG instance in this configuration serves."""
        return self.throughput_rps * self.mps_processes


Mix = tuple[tuple[int, int], ...]  # ((gpcs, count), ...) sorted by gpcs; count > 0


def profile_map(gpu: GpuModel, explicit: Mapping[int, str] | None = None) -> dict[int, MigProfile]:
    """GPCs -> the GPU's MIG profile of that compute size with the least memory (no ``+me``).

    The smallest-memory profile is what a GPC count means in profiles measured per GPC size; an explicit
    map (e.g. :data:`A100_80GB_PROFILE_FOR_GPCS`) overrides it and must name profiles the GPU has.
    """
    out: dict[int, MigProfile] = {}
    if explicit:
        for gpcs, name in explicit.items():
            prof = gpu.profile(name)
            if prof is None:
                raise ValueError(f"{gpu.key} has no MIG profile {name!r}")
            out[gpcs] = prof
        return out
    for prof in sorted(gpu.profiles, key=lambda p: p.shape.mem_slices):
        if not prof.has_media:
            out.setdefault(prof.shape.sm_slices, prof)
    return out


def best_per_size(rows: Sequence[ProfileRow], latency_limit_s: float, sizes: Sequence[int]) -> dict[int, ProfileRow]:
    """Per MIG size, the configuration with the most capacity whose latency fits the limit.

    Rows with no throughput (out of memory in the profile) never count. Ties go to fewer processes,
    then the smaller batch: less memory and less queueing for the same capacity.
    """
    best: dict[int, ProfileRow] = {}
    for row in rows:
        if row.gpcs not in sizes or row.throughput_rps <= 0 or row.latency_s <= 0 or row.latency_s > latency_limit_s:
            continue
        cur = best.get(row.gpcs)
        key = (row.capacity_rps, -row.mps_processes, -row.batch)
        if cur is None or key > (cur.capacity_rps, -cur.mps_processes, -cur.batch):
            best[row.gpcs] = row
    return best


def min_gpcs(capacity: Mapping[int, float], rate: float) -> int:
    """Fewest GPCs whose instances reach ``rate`` (unbounded knapsack over sizes, exact)."""
    if rate <= 0:
        return 0
    if not any(c > 0 for c in capacity.values()):
        raise ValueError("no configuration with capacity: the rate can never be met")
    best: list[float] = [0.0]
    while best[-1] < rate:
        b = len(best)
        best.append(max([best[b - g] + c for g, c in capacity.items() if g <= b] + [best[b - 1]]))
    return len(best) - 1


def _mixes(capacity: Mapping[int, float], rate: float, budget: int) -> Iterator[dict[int, int]]:
    """Every count-per-size whose GPCs ≤ budget and capacity ≥ rate, with no instance to spare."""
    sizes = sorted(capacity)

    def rec(i: int, left: int, counts: dict[int, int], cap: float) -> Iterator[dict[int, int]]:
        if i == len(sizes):
            if cap >= rate and all(cap - capacity[g] < rate for g, n in counts.items() if n):
                yield dict(counts)
            return
        g = sizes[i]
        for n in range(left // g + 1):
            counts[g] = n
            yield from rec(i + 1, left - n * g, counts, cap + n * capacity[g])
        counts[g] = 0

    yield from rec(0, budget, {}, 0.0)


def candidate_mixes(capacity: Mapping[int, float], rate: float, slack_gpcs: int, limit: int) -> list[Mix]:
    """Minimal instance mixes for one model, cheapest (GPCs) first, at most ``limit`` of them.

    A mix is kept only when dropping any one instance would miss the rate: anything else wastes GPCs
    without ever helping the packing. Several mixes within ``slack_gpcs`` of the fewest are kept because
    a slightly dearer mix (say 4g instead of 3g+1g) can fit beside other models and save a GPU.
    """
    if rate <= 0 or not capacity:
        return [()]
    floor = min_gpcs(capacity, rate)
    bulk: dict[int, int] = {}
    rest = rate
    if floor > _ENUMERATE_MAX_GPCS:
        dense = max(capacity, key=lambda g: (capacity[g] / g, g))
        n = (floor - _ENUMERATE_MAX_GPCS) // dense + 1
        bulk[dense] = n
        rest = rate - n * capacity[dense]
        floor = min_gpcs(capacity, rest)
    found: list[tuple[int, float, Mix]] = []
    for counts in _mixes(capacity, rest, floor + slack_gpcs):
        for g, n in bulk.items():
            counts[g] = counts.get(g, 0) + n
        mix = tuple(sorted((g, n) for g, n in counts.items() if n))
        gpcs = sum(g * n for g, n in mix)
        found.append((gpcs, -sum(capacity[g] * n for g, n in mix), mix))
    found.sort()
    return [m for _, _, m in found[:limit]]
