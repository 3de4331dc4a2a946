"""The data-quality stage (recommender/analysis/quality.py) and its bounds table (recommender/data/bounds.yaml)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from recommender.analysis.quality import DataQuality, Dropped, clean, fleet_warning, parse_bounds
from recommender.analysis.quality_data import load_bounds
from recommender.core import usage as m
from recommender.core.catalogue import load_catalogue
from recommender.core.inventory import Allocation, Sharing, VllmArgs, Workload
from recommender.core.settings import Settings
from recommender.mechanisms.mig import MigShare
from recommender.mechanisms.mps import MpsShare
from recommender.pipeline.run import run_once
from tests.builders import END, snapshot, whole_gpu, workload

CAT = load_catalogue()
TABLE = load_bounds()
NAN, INF = math.nan, math.inf


def test_the_table_bounds_every_canonical_metric_and_gates_on_metrics_it_bounds() -> None:
    assert set(TABLE.metrics) == set(m.USAGE_METRICS)
    assert set(TABLE.sizing) <= set(TABLE.metrics) and m.FB_USED_MIB in TABLE.sizing
    assert 0 <= TABLE.tolerance_frac < 0.05


def test_a_max_that_is_no_number_nor_device_is_an_error() -> None:
    with pytest.raises(ValueError, match="max must be a number"):
        parse_bounds({"metrics": {"x": {"min": 0, "max": "devcie", "label": "x", "why": "y"}}})


SLICE = Allocation(Sharing.MIG, share=MigShare("3g.40gb", 1), gpu_model="A100-80GB", gpu_equivalents=0.5)


@pytest.mark.parametrize(("metric", "values", "extra", "alloc", "kept"), [
    # NaN is a step without a sample: absence, kept as NaN and never counted
    (m.KV_USAGE_FRAC, [0.2, NAN, 0.3], {}, None, [0.2, NAN, 0.3]),
    # ±Inf is impossible in every metric
    (m.POWER_W, [300.0, INF, -INF], {}, None, [300.0, NAN, NAN]),
    # fractions outside 0-1; 1% of slack above 1 for exporters' rounding: 1.005 kept, 1.2 dropped
    (m.KV_USAGE_FRAC, [1.0, 1.005, 1.2, -0.01], {}, None, [1.0, 1.005, NAN, NAN]),
    (m.GR_ENGINE_ACTIVE_FRAC, [-6.19, 0.5, 0.0], {}, None, [NAN, 0.5, 0.0]),
    # rates and queues: never negative, and at most a magnitude no service reaches (a billion a second)
    (m.REQUEST_RATE, [-1.0, 0.0, 1e6, 1e9, 1.02e9, 1e300], {}, None, [NAN, 0.0, 1e6, 1e9, NAN, NAN]),
    (m.SERVING_REPLICAS, [3.0, 2e6], {}, None, [3.0, NAN]),
    # memory used against the series' own total at that step (40,000 then 80,000 MiB): 50,000 fits only the second
    (m.FB_USED_MIB, [50_000.0, 50_000.0, -1.0], {m.FB_TOTAL_MIB: [40_000.0, 80_000.0, 80_000.0]}, None,
     [NAN, 50_000.0, NAN]),
    # no total: the allocation's device memory (81,920 MiB; 1% slack = 82,739.2)
    (m.FB_USED_MIB, [81_920.0, 82_700.0, 82_800.0], {}, None, [81_920.0, 82_700.0, NAN]),
    # no total and no device memory in the allocation: the catalogue's MIG profile (3g.40gb: 40,192 usable)
    (m.FB_USED_MIB, [40_000.0, 41_000.0, 30_000.0], {}, SLICE, [40_000.0, NAN, 30_000.0]),
    # a total itself impossible (not positive, above the A100-80GB's 81,920 MiB) is dropped, and then does not
    # bound memory used: the allocation's device memory does
    (m.FB_TOTAL_MIB, [-81_930.0, 200_000.0, 81_920.0], {}, None, [NAN, NAN, 81_920.0]),
    (m.FB_USED_MIB, [60_000.0, 60_000.0, 60_000.0], {m.FB_TOTAL_MIB: [-81_930.0, 40_000.0, NAN]}, None,
     [60_000.0, NAN, 60_000.0]),
])
def test_values_outside_their_bounds_are_dropped_and_counted(metric: str, values: list[float],
                                                               extra: dict[str, list[float]], alloc: Allocation | None,
                                                               kept: list[float]) -> None:
    w = workload("w", alloc or whole_gpu())
    snap = snapshot([w], {metric: {"w": np.array(values)}, **{k: {"w": np.array(v)} for k, v in extra.items()}},
                    days=len(values) * 600 / 86_400)
    out, facts = clean(snap, CAT, TABLE, 0.0)
    np.testing.assert_array_equal(out.usage[metric][w.ref.key].to_numpy(), np.array(kept))
    counted = {d.metric: d for d in facts[w.ref.key].dropped}.get(metric)
    dropped = int(np.isnan(kept).sum() - np.isnan(values).sum())
    assert (counted.dropped if counted else 0) == dropped
    if counted:  # out of the samples it had: its NaN steps are not samples
        assert counted.present == int((~np.isnan(values)).sum())


def _one(values: dict[str, np.ndarray | float], min_usable: float = 0.5, alloc: Allocation | None = None
         ) -> tuple[Workload, DataQuality]:
    w = workload("w", alloc or whole_gpu())
    snap = snapshot([w], {k: {"w": v} for k, v in values.items()}, days=10 * 600 / 86_400)
    out, facts = clean(snap, CAT, TABLE, min_usable)
    return out.workloads[0], facts[w.ref.key]


def test_the_counts_and_share_go_into_the_workloads_notes() -> None:
    mem = np.array([-5.0] * 4 + [20_000.0] * 6)  # 4 of 10 steps negative
    w, q = _one({m.FB_USED_MIB: mem, m.GR_ENGINE_ACTIVE_FRAC: 0.3})
    assert w.notes == ("dropped 4 of 10 memory samples (40%): negative or above the device",)
    # usable: 6 of 10 memory samples; engine activity lost none
    assert q == DataQuality((Dropped(m.FB_USED_MIB, "memory", "negative or above the device", 4, 10),), 0.6, None)


@pytest.mark.parametrize(("values", "why"), [
    # every sample impossible: nothing to size from
    ({m.FB_USED_MIB: -20_000.0, m.GR_ENGINE_ACTIVE_FRAC: -6.19},
     "no recommendation: only 0% of its memory samples are possible (need 50%): negative or above the device"),
    # 3 of 10 KV samples possible: below the minimum share of 50%
    ({m.KV_USAGE_FRAC: np.array([0.3] * 3 + [1.5] * 7)},
     "no recommendation: only 30% of its KV cache usage samples are possible (need 50%): outside 0-1"),
    # a series the sizing does not read, all impossible: the exporter cannot be trusted either
    ({m.FB_USED_MIB: 20_000.0, m.POWER_W: -1.0},
     "no recommendation: every power sample is impossible (negative or above a gigawatt)"),
])
def test_too_little_usable_data_gives_no_recommendation_and_why(values: dict[str, np.ndarray | float],
                                                                why: str) -> None:
    _, q = _one(values)
    assert q.unusable == why


def test_half_usable_is_enough_at_the_default_minimum() -> None:
    _, q = _one({m.FB_USED_MIB: np.array([-1.0] * 5 + [20_000.0] * 5)})
    assert q.unusable is None and q.usable_frac == 0.5


def test_an_impossible_device_memory_is_replaced_by_the_catalogues() -> None:
    w, _ = _one({m.FB_USED_MIB: 20_000.0}, alloc=whole_gpu(memory_mib=-81_930.0))
    assert w.allocation.device_memory_mib == 81_920.0
    assert w.notes == ("device memory reported as -81,930 MiB is impossible: using the catalogue's 81,920 MiB",)
    w, _ = _one({m.FB_USED_MIB: 20_000.0}, alloc=whole_gpu(memory_mib=1e300))  # said in a few digits, not 301
    assert w.notes == ("device memory reported as 1e+300 MiB is impossible: using the catalogue's 81,920 MiB",)


def test_clean_data_passes_unchanged() -> None:
    w = workload("w", whole_gpu())
    snap = snapshot([w], {m.FB_USED_MIB: {"w": 20_000.0}, m.KV_USAGE_FRAC: {"w": 0.5}})
    out, facts = clean(snap, CAT, TABLE, 0.5)
    assert out.workloads == snap.workloads and facts == {w.ref.key: DataQuality()}
    assert all(out.usage[k] is snap.usage[k] for k in snap.usage)


def test_run_once_never_sizes_from_dropped_data() -> None:
    """The issue's pod: memory and engine activity negative. No MIG slice, no vLLM fraction: no recommendation,
    confidence 0, with every count in its reasons."""
    vllm = VllmArgs(model="meta-llama/Meta-Llama-3-8B-Instruct", gpu_memory_utilization=0.9)
    w = workload("neg", whole_gpu(vllm=vllm, memory_mib=-81_930.0), kv_capacity_tokens=300_000.0)
    ok = workload("ok", whole_gpu(vllm=vllm), kv_capacity_tokens=300_000.0)
    snap = snapshot([w, ok], {m.FB_USED_MIB: {"neg": -20_000.0, "ok": 50_000.0},
                              m.GR_ENGINE_ACTIVE_FRAC: {"neg": -6.19, "ok": 0.3},
                              m.KV_USAGE_FRAC: {"neg": -0.2, "ok": 0.2}, m.REQUEST_RATE: {"neg": 2.0, "ok": 2.0}})
    recs = {r.ref.name: r for r in run_once(snap, Settings(), END).recommendations}
    neg = recs["neg"]
    assert neg.recommended is None and neg.confidence == 0.0
    assert neg.reasons[0].startswith("no recommendation: only 0% of its memory samples are possible")
    assert "dropped 2,016 of 2,016 memory samples (100%): negative or above the device" in neg.reasons
    assert "quality" in run_once(snap, Settings(), END).timings_s
    assert recs["ok"].recommended is not None and not any("dropped" in r for r in recs["ok"].reasons)


def test_the_minimum_usable_share_is_a_setting() -> None:
    w = workload("w", whole_gpu())
    mem = np.where(np.arange(2016) % 10 < 3, 20_000.0, -1.0)  # 30% usable
    snap = snapshot([w], {m.FB_USED_MIB: {"w": mem}, m.GR_ENGINE_ACTIVE_FRAC: {"w": 0.3}})
    strict = run_once(snap, Settings(), END).recommendations[0]
    lenient = run_once(snap, Settings.model_validate({"policy": {"min_usable_frac": 0.2}}), END).recommendations[0]
    assert strict.recommended is None and lenient.recommended is not None
    # 2,016 steps: 201 tens keep 3 each and the last 6 keep 3, so 606 kept and 1,410 dropped (70%)
    assert "dropped 1,410 of 2,016 memory samples (70%): negative or above the device" in lenient.reasons
    # 30% usable: the quality factor alone caps confidence at 0.3
    assert 0 < lenient.confidence <= 0.3
    assert lenient.risk != "low"  # confidence below 0.5: at least medium (policies.rightsize._risk)


@pytest.mark.parametrize("alloc", [
    whole_gpu(product="NVIDIA Foo-9000", model=None, memory_mib=49_152),
    whole_gpu(product="NVIDIA Foo-9000", model=None, memory_mib=None),
    Allocation(Sharing.MIG, share=MigShare("2g.24gb", 1), gpu_product="NVIDIA Foo-9000 MIG 2g.24gb"),
    Allocation(Sharing.TIME_SLICING, gpus=1, gpu_product="NVIDIA Foo-9000", gpu_equivalents=0.25),
    Allocation(Sharing.MPS, gpus=1, gpu_product="NVIDIA Foo-9000", share=MpsShare(50.0)),
], ids=["exclusive", "no-memory", "mig", "time-slicing", "mps"])
def test_an_unknown_gpu_model_is_a_reason_in_every_format_never_a_traceback(alloc: Allocation) -> None:
    from recommender.outputs import get_formatter
    from recommender.outputs.registry import BUILTIN_MODULES

    w = workload("foo", alloc)
    snap = snapshot([w], {m.FB_USED_MIB: {"foo": 20_000.0}, m.GR_ENGINE_ACTIVE_FRAC: {"foo": 0.3}})
    plan = run_once(snap, Settings(), END)
    (rec,) = plan.recommendations
    assert rec.recommended is None and rec.confidence == 0.0
    assert rec.reasons[0] == ("no recommendation: unknown GPU model (NVIDIA Foo-9000"
                              f"{' MIG 2g.24gb' if alloc.sharing is Sharing.MIG else ''}); add it to the GPU catalogue "
                              "(--gpu-catalogue FILE)")
    for fmt in BUILTIN_MODULES:
        assert "unknown GPU model" in get_formatter(fmt)(plan, snap)


def test_the_fleet_warning_names_five_workloads_and_counts_the_rest() -> None:
    bad = DataQuality((Dropped(m.POWER_W, "power", "negative", 1, 10),), 1.0)
    facts = {f"ns/Deployment/w{i}": bad for i in range(7)} | {"ns/Deployment/ok": DataQuality()}
    (line,) = fleet_warning(facts)
    # 7 with drops: the first five by name, then "and 2 more"; the clean one is not named
    assert line.endswith("in 7 workload(s), counted in their reasons: ns/Deployment/w0, ns/Deployment/w1, "
                         "ns/Deployment/w2, ns/Deployment/w3, ns/Deployment/w4 and 2 more")
    assert fleet_warning({"ns/Deployment/ok": DataQuality()}) == ()


def test_a_fleet_checked_a_few_columns_at_a_time_is_cleaned_as_each_workload_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from recommender.analysis import quality

    allocs = [whole_gpu(), SLICE, whole_gpu(), SLICE, whole_gpu()]
    fleet = [workload(f"w{i}", a) for i, a in enumerate(allocs)]
    rng = np.random.default_rng(7)
    used = {w.ref.name: rng.uniform(-1_000.0, 90_000.0, 12) for w in fleet}
    total = {w.ref.name: rng.choice([NAN, 40_000.0, 80_000.0, -5.0], 12) for w in fleet[::2]}
    series = {m.FB_USED_MIB: used, m.FB_TOTAL_MIB: total}
    monkeypatch.setattr(quality, "_COLUMNS", 2)  # 5 columns: slices of 2, 2 and 1
    out, facts = clean(snapshot(fleet, series, days=12 * 600 / 86_400), CAT, TABLE, 0.0)
    for w in fleet:
        alone = {k: {w.ref.name: v[w.ref.name]} for k, v in series.items() if w.ref.name in v}
        one, one_facts = clean(snapshot([w], alone, days=12 * 600 / 86_400), CAT, TABLE, 0.0)
        np.testing.assert_array_equal(out.usage[m.FB_USED_MIB][w.ref.key].to_numpy(),
                                      one.usage[m.FB_USED_MIB][w.ref.key].to_numpy())
        assert facts[w.ref.key] == one_facts[w.ref.key]
    assert sum(len(f.dropped) for f in facts.values()) > 0  # the draw drops something


def test_a_float32_device_total_is_cleaned_and_digested_as_its_float64_values() -> None:
    from dataclasses import replace

    from recommender.pipeline.memo import series_digests

    fleet = [workload(f"w{i}", a) for i, a in enumerate([whole_gpu(), SLICE, whole_gpu()])]
    rng = np.random.default_rng(11)
    used = {w.ref.name: rng.uniform(-1_000.0, 90_000.0, 12) for w in fleet}
    total = {w.ref.name: rng.choice([NAN, 40_192.0, 81_920.0, 86_000.0, -5.0], 12) for w in fleet}
    wide = snapshot(fleet, {m.FB_USED_MIB: used, m.FB_TOTAL_MIB: total}, days=12 * 600 / 86_400)
    narrow = replace(wide, usage={**wide.usage, m.FB_TOTAL_MIB: wide.usage[m.FB_TOTAL_MIB].astype(np.float32)})
    assert series_digests(narrow) == series_digests(wide)
    (a, fa), (b, fb) = clean(wide, CAT, TABLE, 0.0), clean(narrow, CAT, TABLE, 0.0)
    assert fa == fb and sum(len(f.dropped) for f in fa.values()) > 0  # the draw drops something
    for metric in (m.FB_USED_MIB, m.FB_TOTAL_MIB):
        np.testing.assert_array_equal(a.usage[metric].to_numpy(), b.usage[metric].to_numpy(dtype="float64"))
