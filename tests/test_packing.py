"""Optimal MIG packing: the known FFD weakness, tie-breaks on reconfiguration, and properties vs FFD."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies.miglayout import validate_layout
from policies.packing import assign_indices, pack, pack_optimal, place, solve_mig
from recommender.core.catalogue import GpuModel, MigProfile, load_catalogue

CAT = load_catalogue()
A100 = CAT.gpus["A100-80GB"]
A30 = CAT.gpus["A30"]
MIG_GPUS = sorted(k for k, g in CAT.gpus.items() if g.supports_mig)


def _profs(gpu: GpuModel, spec: str) -> list[MigProfile]:
    """``"3g.40gb*2 1g.10gb"`` → profiles, with counts."""
    out = []
    for item in spec.split():
        name, _, n = item.partition("*")
        prof = gpu.profile(name)
        assert prof is not None, name
        out += [prof] * int(n or 1)
    return out


@pytest.mark.parametrize(
    ("gpu", "spec", "fewest"),
    [
        # the FFD weakness: SM 3+2+1+1+1 = 8 > 7, so ≥ 2 GPUs; 3g+me | 2g+1g.20gb+me fits 2 (FFD needs 3)
        (A100, "3g.40gb 2g.20gb 1g.20gb 1g.10gb+me 1g.10gb+me", 2),
        # 3g + 2g + 2g: SM 7, memory 4+2+2 = 8 only as 2g@0, 2g@2, 3g@4 → 1 GPU
        (A100, "3g.40gb 2g.20gb*2", 1),
        # 4g + 3g: SM 7, memory 4+4 → 1 GPU; twice → 2
        (A100, "4g.40gb*2 3g.40gb*2", 2),
        # 7 × 1g fill one GPU (SM 7); the 8th needs a second
        (A100, "1g.10gb*8", 2),
        # two +me profiles can never share a GPU
        (A100, "1g.10gb+me*3", 3),
        # A30: 2g + 1g + 1g = 4 SM → 1 GPU; 4g alone → 1 more
        (A30, "2g.12gb 1g.6gb*2 4g.24gb", 2),
    ],
)
def test_fewest_gpus(gpu: GpuModel, spec: str, fewest: int) -> None:
    profs = _profs(gpu, spec)
    res = solve_mig(gpu, profs)
    assert len(res.layouts) == fewest
    assert res.optimal and res.method == "milp"
    assert all(validate_layout(gpu, lay.placed) == [] for lay in res.layouts)
    assert Counter(p.name for lay in res.layouts for p, _ in lay.placed) == Counter(p.name for p in profs)


def test_ffd_weakness_fixed() -> None:
    profs = _profs(A100, "3g.40gb 2g.20gb 1g.20gb 1g.10gb+me 1g.10gb+me")
    assert len(pack(A100, profs)) == 3
    assert len(pack_optimal(A100, profs)) == 2


def test_tie_goes_to_fewer_reconfigured() -> None:
    # 2×3g + 2×2g + 2×1g: SM 6+4+2 = 12 → 2 GPUs either way; today GPU 1 holds 3g+2g+2g (valid, within
    # demand) and GPU 0 something else: keeping GPU 1 leaves one reconfiguration (GPU 0 → 3g + 1g×2)
    current = [{"7g.80gb": 1}, {"3g.40gb": 1, "2g.20gb": 2}]
    res = solve_mig(A100, _profs(A100, "3g.40gb*2 2g.20gb*2 1g.10gb*2"), current)
    assert len(res.layouts) == 2 and res.reconfigured == 1
    kept = res.layouts[res.indices.index(1)]
    assert kept.mig_devices() == {"3g.40gb": 1, "2g.20gb": 2}


def test_current_layout_already_optimal_is_kept() -> None:
    current = [{"4g.40gb": 1, "3g.40gb": 1}, {"1g.10gb": 7}]
    res = solve_mig(A100, _profs(A100, "1g.10gb*7 3g.40gb 4g.40gb"), current)
    assert res.reconfigured == 0 and res.indices == (0, 1)
    assert [lay.mig_devices() for lay in res.layouts] == current


def test_fewer_gpus_beats_no_reconfiguration() -> None:
    # today 2 GPUs each hold one 3g; packing both onto one GPU saves a GPU and changes one
    res = solve_mig(A100, _profs(A100, "3g.40gb*2"), [{"3g.40gb": 1}, {"3g.40gb": 1}])
    assert len(res.layouts) == 1 and res.reconfigured == 1


def test_foreign_profile_is_refused() -> None:
    with pytest.raises(ValueError, match="not a MIG profile of A100-80GB"):
        solve_mig(A100, _profs(A30, "1g.6gb"))


def test_place_backtracks_and_refuses_impossible() -> None:
    lay = place(A100, _profs(A100, "3g.40gb 2g.20gb*2"))
    assert lay is not None and sorted((p.name, s) for p, s in lay.placed) == [
        ("2g.20gb", 0), ("2g.20gb", 2), ("3g.40gb", 4)]
    assert place(A100, _profs(A100, "4g.40gb 3g.40gb 1g.10gb")) is None  # SM 4+3+1 = 8 > 7
    assert place(A100, _profs(A100, "1g.10gb+me*2")) is None


def test_assign_indices_prefers_same_then_changed_then_empty() -> None:
    same, other = (("3g.40gb", 2),), (("7g.80gb", 1),)
    # GPU 2 already holds `same`; GPU 0 is empty, GPU 1 holds something else → the new layout overwrites GPU 1
    assert assign_indices([same, other], [(), (("1g.10gb", 1),), same], range(3)) == [2, 1]
    assert assign_indices([same], [], []) == [None]


@st.composite
def mixes(draw: st.DrawFn) -> tuple[GpuModel, list[MigProfile]]:
    gpu = CAT.gpus[draw(st.sampled_from(MIG_GPUS))]
    return gpu, draw(st.lists(st.sampled_from(gpu.profiles), min_size=0, max_size=18))


FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(mixes())
def test_optimal_valid_complete_and_no_worse_than_ffd(case: tuple[GpuModel, list[MigProfile]]) -> None:
    gpu, profs = case
    res = solve_mig(gpu, profs)
    assert len(res.layouts) <= len(pack(gpu, profs))
    for lay in res.layouts:
        assert validate_layout(gpu, lay.placed) == []
        assert sum(p.usable_mib for p, _ in lay.placed) <= gpu.memory_mib
    assert Counter(p.name for lay in res.layouts for p, _ in lay.placed) == Counter(p.name for p in profs)
    assert len(set(res.indices)) == len(res.indices)


@FAST
@given(mixes())
def test_optimal_current_means_no_reconfiguration(case: tuple[GpuModel, list[MigProfile]]) -> None:
    gpu, profs = case
    first = solve_mig(gpu, profs)
    again = solve_mig(gpu, profs, [lay.mig_devices() for lay in first.layouts])
    assert again.reconfigured == 0 and len(again.layouts) == len(first.layouts)


def test_a_gpu_that_already_holds_the_slices_is_left_alone() -> None:
    gpu = load_catalogue().gpus["A100-80GB"]
    three = gpu.profile("3g.40gb")
    assert three is not None
    # today: GPU 0 = 2×3g.40gb; asked: one 3g.40gb. Dropping the spare slice would evict the pods on that
    # GPU for nothing, so the GPU keeps both slices and counts as not reconfigured.
    result = solve_mig(gpu, [three], current=[{"3g.40gb": 2}])
    assert result.reconfigured == 0
    assert [lay.mig_devices() for lay in result.layouts] == [{"3g.40gb": 2}]
    # asked for something the GPU does not hold: it is reconfigured
    one = gpu.profile("1g.10gb")
    assert one is not None
    assert solve_mig(gpu, [one], current=[{"3g.40gb": 2}]).reconfigured == 1


def test_a_remembered_milp_answer_is_reused_only_for_the_same_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a memo (the pipeline's, from the edge), the same slices and current layout solve no MILP again and
    give the same packing; other slices, another current layout or time limit solve again. The memo's values
    survive the memo file's JSON (``recommender.pipeline.memostore``)."""
    import json

    from policies import packing
    from recommender.pipeline import memostore

    solves: list[int] = []
    real = packing._solve

    def counted(*a: object, **kw: object) -> tuple[list[int] | None, bool, str]:
        solves.append(1)
        return real(*a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(packing, "_solve", counted)
    profs = _profs(A100, "3g.40gb*2 2g.20gb*2 1g.10gb*2")
    current = [{"3g.40gb": 2}, {"2g.20gb": 2, "1g.10gb": 2}]
    cold = solve_mig(A100, profs, current)
    memo: dict[str, object] = {}
    assert solve_mig(A100, profs, current, memo=memo) == cold and len(solves) == 2
    stored = {k: memostore.decode(k, json.loads(json.dumps(memostore.encode(k, v)))) for k, v in memo.items()}
    assert solve_mig(A100, profs, current, memo=stored) == cold and len(solves) == 2  # remembered: not solved
    assert len(pack_optimal(A100, profs, memo=stored)) == len(cold.layouts) and len(solves) == 3  # no current
    solve_mig(A100, _profs(A100, "3g.40gb*2 2g.20gb*2 1g.10gb*3"), current, memo=stored)
    solve_mig(A100, profs, current, time_limit_s=1.0, memo=stored)
    assert len(solves) == 5
