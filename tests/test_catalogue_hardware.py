"""The GPU catalogue against readings of real GPUs (``tests/data/gpu-facts``, made by
``benchmarks/gpu_facts.py`` on the device): every row marked ``HW`` is what the hardware reports, and a profile
without a usable size is estimated no higher than any measured one on the same share of memory."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from recommender.core.catalogue import DATA_DIR, Catalogue, load_catalogue, parse_catalogue
from recommender.core.yamlfile import read_mapping

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from gpu_facts import placements

FACTS = sorted((Path(__file__).parent / "data" / "gpu-facts").glob("*.json"))
CAT = load_catalogue()


def _reading(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def test_there_are_readings() -> None:
    assert {_reading(p)["name"] for p in FACTS} >= {"NVIDIA H200", "NVIDIA H100 80GB HBM3"}


@pytest.mark.parametrize("path", FACTS, ids=lambda p: p.stem)
def test_the_catalogue_says_what_the_gpu_reports(path: Path) -> None:
    got = _reading(path)
    key = CAT.canonical(got["name"])
    gpu = CAT.get(key)
    assert gpu is not None, f"{got['name']} maps to no catalogue model"
    assert gpu.memory_mib == got["memory_mib"]
    assert gpu.placements_verified == "HW"
    assert {p.name for p in gpu.profiles} == {p["name"] for p in got["profiles"]}
    for seen in got["profiles"]:
        prof = gpu.profile(seen["name"])
        assert prof is not None
        assert (prof.usable_mib, prof.usable_verified, prof.verified) == (seen["memory_mib"], True, "HW"), prof.name
        shape = prof.shape
        assert (shape.mem_slices, shape.sm_slices, shape.max_count, list(shape.starts)) == (
            seen["mem_slices"], seen["compute_slices"], seen["instances"], seen["starts"]), prof.name


def test_every_row_marked_hw_is_backed_by_a_reading() -> None:
    read = {CAT.canonical(_reading(p)["name"]) for p in FACTS}
    claimed = {g.key for g in CAT.gpus.values()
               if g.placements_verified == "HW" or any(p.verified == "HW" for p in g.profiles)}
    assert claimed <= read


def test_placements_are_read_as_nvidia_smi_prints_them() -> None:
    text = ("GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1\n"
            "GPU  0 Profile ID  9 Placements: {0,4}:4\n"
            "GPU  0 Profile ID  0 Placement : {0}:8\n")
    assert placements(text) == {19: {"starts": [0, 1, 2, 3, 4, 5, 6], "mem_slices": 1},
                                9: {"starts": [0, 4], "mem_slices": 4}, 0: {"starts": [0], "mem_slices": 8}}


def _raw() -> dict[str, Any]:
    return copy.deepcopy(dict(read_mapping(DATA_DIR / "gpus.yaml", "'shapes' and/or 'gpus'")))


def _estimate(cat: Catalogue, gpu: str, profile: str) -> float:
    prof = cat.get(gpu).profile(profile)  # type: ignore[union-attr]
    assert prof is not None and not prof.usable_verified
    return prof.usable_mib


def test_an_estimate_is_at_most_every_measured_ratio_on_its_share_of_memory() -> None:
    raw = _raw()
    families = raw["shapes"]
    for key, gpu in CAT.gpus.items():
        fam = raw["gpus"][key].get("shape")
        for prof in gpu.profiles:
            if prof.usable_verified:
                continue
            nominal = float(prof.name.split(".")[1].split("gb")[0]) * 1024
            share = prof.shape.mem_slices / families[fam]["memory_slices"]
            measured = [p.usable_mib / (float(p.name.split(".")[1].split("gb")[0]) * 1024)
                        for g in CAT.gpus.values() for p in g.profiles
                        if p.usable_verified and g.memory_slices and p.shape.mem_slices / g.memory_slices == share]
            assert measured, prof.name
            assert prof.usable_mib <= nominal * min(measured) + 1e-6, (key, prof.name)
    # 3g and 4g take the same memory slices, so the same estimate
    assert _estimate(CAT, "H100-96GB", "3g.48gb") == _estimate(CAT, "H100-96GB", "4g.48gb")


def test_a_lower_measured_row_lowers_the_estimates_on_its_share() -> None:
    before = _estimate(CAT, "H100-96GB", "3g.48gb")
    raw = _raw()
    raw["gpus"]["A100-80GB"]["profiles"]["3g.40gb"]["usable_mib"] = 36_000  # 0.88 of 40 GiB
    after = parse_catalogue(raw)
    assert _estimate(after, "H100-96GB", "3g.48gb") == pytest.approx(48 * 1024 * 36_000 / (40 * 1024))
    assert _estimate(after, "H100-96GB", "3g.48gb") < before
    # other shares keep theirs
    assert _estimate(after, "H100-96GB", "7g.96gb") == _estimate(CAT, "H100-96GB", "7g.96gb")
