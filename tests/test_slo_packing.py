"""SLO-aware MIG × MPS choice and packing on hand-made profiles, arithmetic beside each expectation."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from slo_packing import Demand, SloPackingResult, plan
from slo_packing_mixes import A100_80GB_PROFILE_FOR_GPCS, ProfileRow, best_per_size, min_gpcs

from policies.packing import GpuLayout
from recommender.core.catalogue import load_catalogue

A100 = load_catalogue().gpus["A100-80GB"]


def row(gpcs: int, rps: float, latency_s: float = 0.01, batch: int = 1, procs: int = 1) -> ProfileRow:
    return ProfileRow(gpcs, batch, procs, rps, latency_s)


def assert_valid(layout: GpuLayout) -> None:
    """Independent of the packer: allowed starts, no shared memory slice, ≤ 7 SM and 8 memory slices."""
    used: set[int] = set()
    for prof, start in layout.placed:
        assert start in prof.shape.starts
        span = set(range(start, start + prof.shape.mem_slices))
        assert max(span) < A100.memory_slices
        assert not span & used
        used |= span
    assert sum(p.shape.sm_slices for p, _ in layout.placed) <= A100.sm_slices


def run(profiles: dict[str, list[ProfileRow]], demands: dict[str, Demand]) -> SloPackingResult:
    res = plan(profiles, demands, A100, profile_for_gpcs=A100_80GB_PROFILE_FOR_GPCS)
    for layout in res.layouts:
        assert_valid(layout)
    return res


def test_fewest_gpcs_mix() -> None:
    # 250 req/s from 1g@100 and 2g@220: 3x1g = 3 GPCs (300); 2g+1g = 3 GPCs (320); 2x2g = 4 GPCs.
    # Fewest GPCs is 3; of the two 3-GPC mixes the one with more capacity (2g+1g, 320) comes first.
    res = run({"m": [row(1, 100), row(2, 220)]}, {"m": Demand(250, 0.1)})
    p = res.plans["m"]
    assert p.slo_met and p.gpcs == 3 and res.gpcs == 3
    assert sorted(i.gpcs for i in p.instances) == [1, 2]
    assert p.capacity_rps == pytest.approx(320)
    assert res.gpus == 1


def test_mps_processes_multiply_per_process_throughput() -> None:
    # 1g b8 with 3 processes at 50 req/s each serves 150 req/s: one instance covers 140 req/s.
    res = run({"m": [row(1, 100), row(1, 50, batch=8, procs=3)]}, {"m": Demand(140, 0.1)})
    assert [(i.batch, i.mps_processes) for i in res.plans["m"].instances] == [(8, 3)]


def test_latency_objective_excludes_a_config() -> None:
    # 2g@220 takes 80 ms > 50 ms objective: only 1g@100 (10 ms) counts, so 250 req/s needs 3x1g = 3 GPCs.
    rows = [row(1, 100, 0.010), row(2, 220, 0.080)]
    assert set(best_per_size(rows, 0.05, [1, 2])) == {1}
    p = run({"m": rows}, {"m": Demand(250, 0.05)}).plans["m"]
    assert p.slo_met and [i.gpcs for i in p.instances] == [1, 1, 1]
    # at half the objective (25 ms) the 10 ms config still fits
    assert plan({"m": rows}, {"m": Demand(250, 0.05)}, A100, latency_fraction=0.5).plans["m"].slo_met


def test_out_of_memory_rows_never_count() -> None:
    # 2g row with 0 throughput (OOM in the profile) is ignored: 1g@100 x2 = 200 ≥ 150
    p = run({"m": [row(1, 100), row(2, 0.0, 0.0)]}, {"m": Demand(150, 0.1)}).plans["m"]
    assert [i.gpcs for i in p.instances] == [1, 1]


def test_infeasible_latency_gives_reason_and_others_still_planned() -> None:
    # fastest config 30 ms > 20 ms objective: nothing can serve "slow"; "ok" is still planned
    res = run({"slow": [row(1, 100, 0.030)], "ok": [row(1, 100)]},
              {"slow": Demand(50, 0.020), "ok": Demand(50, 0.1)})
    assert not res.slo_met
    slow = res.plans["slow"]
    assert not slow.slo_met and slow.instances == () and "30.0 ms > 20.0 ms" in slow.reason
    assert res.plans["ok"].slo_met and res.gpus == 1


def test_missing_profile_is_a_reason() -> None:
    res = run({}, {"ghost": Demand(10, 0.1)})
    assert not res.slo_met and "no measured profile" in res.plans["ghost"].reason and res.gpus == 0


def test_zero_rate_needs_nothing() -> None:
    res = run({"m": [row(1, 100)]}, {"m": Demand(0, 0.1)})
    assert res.plans["m"].slo_met and res.gpus == 0


def test_min_gpcs_is_exact() -> None:
    # 1g@100, 3g@350: 700 req/s = 2x3g (6 GPCs, 700); 7x1g would be 7 GPCs
    assert min_gpcs({1: 100, 3: 350}, 700) == 6
    # 701 req/s: 2x3g+1g = 7 GPCs (800)
    assert min_gpcs({1: 100, 3: 350}, 701) == 7


def test_packing_prefers_fewer_gpus_over_fewest_gpcs() -> None:
    # Model a: 3g@300 or 4g@330, needs 300 → 3g (3 GPCs) or 4g (4 GPCs).
    # Model b: 3g@300, needs 600 → 2x3g. Model c: 1g@100, needs 100 → 1g.
    # Fewest GPCs: 3x3g + 1g = 10 GPCs > 7, so 2 GPUs at least; 3g+3g fill one GPU's memory and
    # 3g+1g fit the second: 2 GPUs, valid.
    profiles = {"a": [row(3, 300), row(4, 330)], "b": [row(3, 300)], "c": [row(1, 100)]}
    res = run(profiles, {"a": Demand(300, 0.1), "b": Demand(600, 0.1), "c": Demand(100, 0.1)})
    assert res.slo_met and res.gpus == 2


def test_three_g_beside_two_two_g_on_one_gpu() -> None:
    # 3g@start 4 + 2g@0 + 2g@2 = 7 GPCs on one A100 (first-fit puts 3g at 0 and needs a second GPU)
    profiles = {"a": [row(3, 300)], "b": [row(2, 200)]}
    res = run(profiles, {"a": Demand(300, 0.1), "b": Demand(400, 0.1)})
    assert res.gpus == 1 and res.gpcs == 7
    assert sorted((p.profile, p.start) for p in res.placements) == [("2g.20gb", 0), ("2g.20gb", 2), ("3g.40gb", 4)]


def test_many_models_every_layout_valid_and_attributed() -> None:
    profiles = {f"m{i}": [row(1, 90 + i), row(2, 200), row(3, 310), row(4, 420), row(7, 800)] for i in range(8)}
    demands = {f"m{i}": Demand(100.0 * (i + 1), 0.1) for i in range(8)}
    res = run(profiles, demands)
    assert res.slo_met
    assert len(res.placements) == sum(len(p.instances) for p in res.plans.values())
    for name, p in res.plans.items():
        assert p.capacity_rps >= p.demand.rate_rps
        assert sum(1 for pl in res.placements if pl.model == name) == len(p.instances)
    # never worse than one GPU per 7 GPCs rounded up plus the packing's slack
    assert res.gpus >= -(-res.gpcs // 7)


def test_large_rate_uses_bulk_and_stays_fast() -> None:
    # 20,000 req/s with 7g@800: 25 x 7g = 175 GPCs; enumeration is bounded by pinning the bulk
    res = run({"m": [row(1, 100), row(7, 800)]}, {"m": Demand(20_000, 0.1)})
    p = res.plans["m"]
    assert p.slo_met and p.capacity_rps >= 20_000 and res.gpus == 25
