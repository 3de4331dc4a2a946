"""The independent MIG layout validator, table-driven; then property tests of the packer against it."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies.miglayout import mig_parted_config, node_configs, node_label, validate_layout
from policies.packing import GpuLayout, pack
from recommender.core.catalogue import GpuModel, MigProfile, load_catalogue

CAT = load_catalogue()
A100 = CAT.gpus["A100-80GB"]
A30 = CAT.gpus["A30"]
MIG_GPUS = sorted(k for k, g in CAT.gpus.items() if g.supports_mig)


def _layout(gpu: GpuModel, spec: str) -> list[tuple[MigProfile, int]]:
    """``"3g.40gb@0 3g.40gb@4"`` → [(profile, start), ...]."""
    out = []
    for item in spec.split():
        name, start = item.split("@")
        prof = gpu.profile(name)
        assert prof is not None, name
        out.append((prof, int(start)))
    return out


SEVEN_1G = " ".join(f"1g.10gb@{s}" for s in range(7))


@pytest.mark.parametrize(
    ("spec", "broken"),
    [
        # 7 × 1g: starts 0..6, 7 mem slices ≤ 8, 7 SM = 7, 7 ≤ max 7
        (SEVEN_1G, []),
        # 3g@0 (slices 0-3) + 3g@4 (4-7): SM 3+3=6 ≤ 7, 2 ≤ max 2
        ("3g.40gb@0 3g.40gb@4", []),
        # 4g@0 (0-3) + 2g@4 (4-5) + 1g@6: SM 4+2+1=7
        ("4g.40gb@0 2g.20gb@4 1g.10gb@6", []),
        # 4g@0 + 3g@4: SM 4+3=7, memory 0-3 | 4-7
        ("4g.40gb@0 3g.40gb@4", []),
        # 1g.20gb (2 mem slices) @6 covers slices 6-7; 2g×3 @0,2,4: SM 2*3+1=7
        ("2g.20gb@0 2g.20gb@2 2g.20gb@4 1g.20gb@6", []),
        # one +me among 1g's: 6 × 1g + 1g+me = 7 SM
        (" ".join(f"1g.10gb@{s}" for s in range(6)) + " 1g.10gb+me@6", []),
        # 7g alone: 8 mem, 7 SM
        ("7g.80gb@0", []),
        # empty GPU is a valid (MIG-enabled, no devices) layout
        ("", []),
        # 3g may start only at 0 or 4
        ("3g.40gb@2", ["start 2 not among the 3g starts"]),
        # 2g may start only at 0,2,4 (6 would fit in memory but is not a placement)
        ("2g.20gb@6", ["start 6 not among the 2g starts"]),
        # 3g@0 covers 0-3, 2g@2 covers 2-3 → overlap on 2,3
        ("3g.40gb@0 2g.20gb@2", ["overlap on memory slices 2,3"]),
        # same start twice: 1g@3 and 1g@3
        ("1g.10gb@3 1g.10gb@3", ["overlap on memory slices 3"]),
        # 4g max 1 per GPU (and 4g@0 twice overlaps 0-3)
        ("4g.40gb@0 4g.40gb@0", ["2 instances of shape 4g, at most 1", "overlap"]),
        # 2g max 3: a 4th 2g — no 4th start either, so also bad start and overlap
        ("2g.20gb@0 2g.20gb@2 2g.20gb@4 2g.20gb@6", ["4 instances of shape 2g, at most 3", "start 6"]),
        # 1g+me max 1 per GPU and at most one +me profile
        ("1g.10gb+me@0 1g.10gb+me@1", ["2 +me profiles", "2 instances of shape 1g+me, at most 1"]),
        # SM overflow: 4g (4) + 2g (2) + 1g.20gb (1) + 1g.20gb (1) = 8 > 7, memory 4+2+2 = 8 fits
        ("4g.40gb@0 2g.20gb@4 1g.20gb@6 1g.10gb@6", ["SM slices 8 exceed the GPU's 7", "overlap"]),
        # 3g@0 (0-3) + 2g@4 (4-5) + 1g.20gb@6 (6-7): SM 3+2+1 = 6 ≤ 7, valid
        # (on 8/7-slice GPUs SM overflow always comes with overlap; the pure case is test_validate_sm_overflow_alone)
        ("3g.40gb@0 2g.20gb@4 1g.20gb@6", []),
        # 7g@0 covers all 8 slices; 1g@0 overlaps; SM 7+1 = 8 > 7
        ("7g.80gb@0 1g.10gb@0", ["SM slices 8 exceed", "overlap on memory slices 0"]),
    ],
)
def test_validate_a100_80gb(spec: str, broken: list[str]) -> None:
    problems = validate_layout(A100, _layout(A100, spec))
    if not broken:
        assert problems == []
    for fragment in broken:
        assert any(fragment in p for p in problems), (fragment, problems)


def test_validate_sm_overflow_alone() -> None:
    # The A100's 4g@0 + 3g@4 uses 4+3 = 7 SM; on a GPU model claiming 6 SM slices (a wrong override file)
    # it overflows with no other rule broken.
    small = GpuModel(key=A100.key, memory_mib=A100.memory_mib, memory_slices=8, sm_slices=6, profiles=A100.profiles)
    assert validate_layout(small, _layout(A100, "4g.40gb@0 3g.40gb@4")) == ["SM slices 7 exceed the GPU's 6"]


@pytest.mark.parametrize(
    ("spec", "broken"),
    [
        # A30: 2g@0 + 1g@2 + 1g@3 = 4 SM, 4 mem
        ("2g.12gb@0 1g.6gb@2 1g.6gb@3", []),
        # 1g+me and 2g+me on one GPU: two +me profiles
        ("1g.6gb+me@0 2g.12gb+me@2", ["2 +me profiles"]),
        # A30 has 4 memory slices: 1g at 4 is outside (and not a start)
        ("4g.24gb@0 1g.6gb@3", ["SM slices 5 exceed the GPU's 4", "overlap on memory slices 3"]),
    ],
)
def test_validate_a30(spec: str, broken: list[str]) -> None:
    problems = validate_layout(A30, _layout(A30, spec))
    if not broken:
        assert problems == []
    for fragment in broken:
        assert any(fragment in p for p in problems), (fragment, problems)


def test_validate_foreign_profile_and_no_mig() -> None:
    # an A30 profile on an A100-80GB is not that GPU's profile; 4g.24gb@0 spans 0-3
    a30_4g = A30.profile("4g.24gb")
    assert a30_4g is not None
    assert any("not a MIG profile of A100-80GB" in p for p in validate_layout(A100, [(a30_4g, 0)]))
    # an L4 has no MIG: any placement is invalid, none is fine
    l4 = CAT.gpus["L4"]
    assert validate_layout(l4, [(a30_4g, 0)]) == ["L4 has no MIG"]
    assert validate_layout(l4, []) == []


def _gl(gpu: GpuModel, spec: str) -> GpuLayout:
    return GpuLayout(gpu, _layout(gpu, spec))


def test_mig_parted_config_groups_and_names() -> None:
    three = "3g.40gb@0 3g.40gb@4"
    mixed = "4g.40gb@0 2g.20gb@4 1g.10gb@6"
    by_node = {
        "n1": [_gl(A100, three), _gl(A100, three)],
        "n2": [_gl(A100, three), _gl(A100, three)],  # same set as n1 → same config
        "n3": [_gl(A100, mixed), _gl(A100, three), _gl(A100, mixed)],
        "n4": [],  # nothing planned: no config, no label
    }
    cfg = mig_parted_config(by_node)
    names = node_configs(by_node)
    assert names["n1"] == names["n2"] == "rightsizer-2gpu-2x3g.40gb"
    assert names["n3"].startswith("rightsizer-") and len(names["n3"]) == len("rightsizer-") + 8
    assert "n4" not in names
    assert cfg["version"] == "v1"
    assert cfg["mig-configs"] == {
        "rightsizer-2gpu-2x3g.40gb": [{"devices": [0, 1], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}],
        names["n3"]: [
            {"devices": [0, 2], "mig-enabled": True, "mig-devices": {"1g.10gb": 1, "2g.20gb": 1, "4g.40gb": 1}},
            {"devices": [1], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
        ],
    }
    assert node_label(names["n1"]) == {"nvidia.com/mig.config": "rightsizer-2gpu-2x3g.40gb"}
    # deterministic: same input, same names
    assert node_configs(by_node) == names


def test_mig_parted_config_label_safe_and_rejects_invalid() -> None:
    me = _gl(A100, "1g.10gb+me@0 1g.10gb@1")
    assert node_configs({"n": [me]}) == {"n": "rightsizer-1gpu-1x1g.10gb-1x1g.10gb.me"}
    with pytest.raises(ValueError, match=r"node bad GPU 0 \(A100-80GB\).*start 2 not among"):
        mig_parted_config({"bad": [_gl(A100, "3g.40gb@2")]})


# ---- properties: every layout the packer emits passes the independent validator ----


@st.composite
def gpu_and_profiles(draw: st.DrawFn) -> tuple[GpuModel, list[MigProfile]]:
    gpu = CAT.gpus[draw(st.sampled_from(MIG_GPUS))]
    profiles = draw(st.lists(st.sampled_from(gpu.profiles), min_size=0, max_size=24))
    return gpu, profiles


FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(gpu_and_profiles())
def test_pack_emits_only_valid_layouts(case: tuple[GpuModel, list[MigProfile]]) -> None:
    gpu, profiles = case
    layouts = pack(gpu, profiles)
    for layout in layouts:
        assert validate_layout(gpu, layout.placed) == []
        assert sum(p.shape.mem_slices for p, _ in layout.placed) <= gpu.memory_slices
        assert sum(p.shape.sm_slices for p, _ in layout.placed) <= gpu.sm_slices
        assert sum(p.usable_mib for p, _ in layout.placed) <= gpu.memory_mib
    # every profile placed exactly once, none invented
    assert Counter(p.name for lay in layouts for p, _ in lay.placed) == Counter(p.name for p in profiles)


@FAST
@given(gpu_and_profiles())
def test_pack_no_worse_than_one_per_gpu(case: tuple[GpuModel, list[MigProfile]]) -> None:
    gpu, profiles = case
    layouts = pack(gpu, profiles)
    assert len(layouts) <= len(profiles)
    assert all(lay.placed for lay in layouts)  # no empty GPUs


@FAST
@given(st.lists(gpu_and_profiles(), min_size=1, max_size=4))
def test_mig_parted_config_round_trips_counts(cases: list[tuple[GpuModel, list[MigProfile]]]) -> None:
    by_node = {f"node-{i}": pack(gpu, profiles) for i, (gpu, profiles) in enumerate(cases)}
    cfg = mig_parted_config(by_node)
    names = node_configs(by_node)
    for i, (_, profiles) in enumerate(cases):
        node = f"node-{i}"
        if not profiles:
            assert node not in names
            continue
        specs = cfg["mig-configs"][names[node]]
        got: Counter[str] = Counter()
        for spec in specs:
            for name, n in spec["mig-devices"].items():
                got[name] += n * len(spec["devices"])
        assert got == Counter(p.name for p in profiles)
        # each GPU index listed exactly once, 0..n-1
        indices = sorted(ix for spec in specs for ix in spec["devices"])
        assert indices == list(range(len(by_node[node])))
    assert all(len(name) <= 63 for name in cfg["mig-configs"])
