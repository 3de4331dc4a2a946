"""Every ``how to apply`` value is valid against the GPU catalogue, for recommendations the real policy makes over
generated features (issue 38): MIG profiles that exist with counts that fit, MPS and HAMi limits within the device,
device-plugin replica counts consistent with the share, vLLM and KAI fractions in (0, 1]."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from policies.modelcards import load_model_cards
from policies.rightsize import Context, rightsize
from policies.shares import how_to_apply
from recommender.analysis.features import Quantiles, WorkloadFeatures
from recommender.core.annotations import REQUIRED_ANNOTATION
from recommender.core.catalogue import GpuModel, load_catalogue
from recommender.core.inventory import Allocation, Sharing, VllmArgs, Workload, WorkloadRef
from recommender.core.plan import Classification, Recommendation, WorkloadClass
from recommender.core.settings import MechanismSettings, Settings
from recommender.mechanisms.hami import HamiShare
from recommender.mechanisms.kai import KaiShare
from recommender.mechanisms.mig import MigShare
from recommender.mechanisms.mps import MpsShare, device_plugin_mps_replicas
from recommender.mechanisms.sizing import size_share
from recommender.mechanisms.time_slicing import time_slices

CATALOGUE = load_catalogue()
CARDS = load_model_cards()
DAY_S = 86_400.0
MODELS = ("meta-llama/Llama-3.2-3B-Instruct", "meta-llama/Meta-Llama-3-8B-Instruct",
          "mistralai/Mistral-7B-Instruct-v0.3", "Qwen/Qwen2.5-7B-Instruct")
# the required mechanism, and the fraction backend the cluster would hand it out with
MECHANISMS = {"mig": "mps", "mps": "mps", "dra": "dra", "hami": "hami", "kai": "kai", "time-slicing": "mps",
              "exclusive": "mps", "any": "mps"}
PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def quantiles(draw: st.DrawFn, top: float) -> Quantiles:
    """Ordered percentiles within [0, top], the mean between the smallest and the largest."""
    p50, p95, p99, peak = sorted(draw(st.floats(0, top, allow_nan=False)) for _ in range(4))
    return Quantiles(p50, p95, p99, peak, draw(st.floats(p50, peak)) if peak > p50 else p50)


@st.composite
def current(draw: st.DrawFn, gpu: GpuModel, vllm: VllmArgs | None) -> Allocation:
    """What a replica holds today on ``gpu``: whole GPUs, a time-slice, an MPS, HAMi or KAI share, a MIG slice."""
    base = Allocation(Sharing.EXCLUSIVE, gpus=1, gpu_model=gpu.key, gpu_product=gpu.key,
                      device_memory_mib=gpu.memory_mib, gpu_equivalents=1.0, vllm=vllm,
                      replicas=draw(st.integers(1, 4)))
    kind = draw(st.sampled_from(["exclusive", "exclusive2", "time-slicing", "mps", "hami", "kai", "mig"]))
    share = size_share(draw(st.floats(0.01, 0.9)), draw(st.floats(256, gpu.memory_mib * 0.9)), gpu.memory_mib)
    if kind in ("mps", "hami"):
        assume(share is not None)
        assert share is not None
    match kind:
        case "exclusive2":
            return replace(base, gpus=2, gpu_equivalents=2.0)
        case "time-slicing":
            return replace(base, sharing=Sharing.TIME_SLICING, gpu_equivalents=1 / draw(st.integers(2, 8)))
        case "mps" if share:
            return replace(base, sharing=Sharing.MPS, share=MpsShare(float(share.thread_pct), float(share.memory_mib)),
                           gpu_equivalents=share.gpu_equivalents)
        case "hami" if share:
            return replace(base, sharing=Sharing.HAMI,
                           share=HamiShare(float(share.memory_mib), float(share.thread_pct)),
                           gpu_equivalents=share.gpu_equivalents)
        case "kai":
            frac = draw(st.sampled_from([0.1, 0.25, 0.5, 0.75]))
            return replace(base, sharing=Sharing.KAI, share=KaiShare(frac), gpu_equivalents=frac)
        case "mig" if gpu.profiles:
            prof = draw(st.sampled_from(gpu.profiles))
            return replace(base, sharing=Sharing.MIG, gpus=0, share=MigShare(prof.name, 1),
                           device_memory_mib=prof.usable_mib, gpu_equivalents=gpu.share(prof))
    return base


@st.composite
def contexts(draw: st.DrawFn) -> Context:
    """A workload on a catalogue GPU with generated usage, class, required mechanism and fraction backend."""
    gpu = CATALOGUE.gpus[draw(st.sampled_from(sorted(CATALOGUE.gpus)))]
    vllm = None
    if draw(st.booleans()):
        vllm = VllmArgs(model=draw(st.sampled_from(MODELS)),
                        gpu_memory_utilization=draw(st.none() | st.floats(0.05, 0.95)),
                        max_model_len=draw(st.sampled_from([None, 2048, 8192, 32768])),
                        max_num_seqs=draw(st.sampled_from([None, 64, 256])))
    alloc = draw(current(gpu, vllm))
    mech = draw(st.sampled_from(sorted(MECHANISMS)))
    cls = draw(st.sampled_from(list(WorkloadClass)))
    annotations = {} if mech == "any" else {REQUIRED_ANNOTATION: "mps" if mech == "dra" else mech}
    w = Workload(WorkloadRef("ml", "Deployment", "w"), alloc, pods=("w-0",), annotations=annotations,
                 kv_capacity_tokens=draw(st.none() | st.floats(1_000, 600_000)) if vllm else None,
                 served_model=vllm.model if vllm else None,
                 device_shared_with=draw(st.sampled_from([None, None, 2, 4])))
    device = alloc.device_memory_mib or gpu.memory_mib
    f = WorkloadFeatures(
        history_s=draw(st.floats(DAY_S, 28 * DAY_S)), coverage_frac=draw(st.floats(0.3, 1.0)),
        fb_used_mib=draw(quantiles(device)), fb_total_mib=None,
        gr_engine_active_frac=draw(st.none() | quantiles(1.0)),
        kv_usage_frac=draw(quantiles(1.0)) if vllm else None, requests_waiting=None, requests_running=None,
        request_rate_per_s=None, ttft_p95_s=None, idle_frac=draw(st.none() | st.floats(0.0, 0.9)),
        longest_idle_s=None, tokens_per_request=draw(st.none() | st.floats(10, 20_000)) if vllm else None)
    s = Settings(mechanisms=MechanismSettings(fraction_backend=MECHANISMS[mech]))
    return Context(w, f, s, CATALOGUE, CARDS, Classification(cls, 1.0, (), "annotation"))


def _mib(text: str) -> float:
    """``0=19456M`` / ``19456Mi`` → 19456."""
    found = re.fullmatch(r"(?:0=)?(\d+)Mi?", text)
    assert found, text
    return float(found.group(1))


def _check_mps(apply: dict[str, Any], gpu: GpuModel, alloc: Allocation) -> None:
    pct = int(apply["env"]["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"])
    pinned = _mib(apply["env"]["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"])
    assert 1 <= pct <= 100 and 0 < pinned <= gpu.memory_mib
    mps = apply["dra"]["parameters"]["sharing"]["mpsConfig"]
    assert mps["defaultActiveThreadPercentage"] == pct and _mib(mps["defaultPinnedDeviceMemoryLimit"]) == pinned
    # the device plugin gives each of R replicas 100 // R % and memory / R (reference.md §3): R holds the share,
    # and R + 1 would not (by compute or by memory)
    r = apply["device_plugin_mps_replicas"]
    assert isinstance(r, int) and r >= 1
    assert 100 // r >= pct and gpu.memory_mib / r >= pinned - 1e-6
    assert 100 // (r + 1) < pct or gpu.memory_mib / (r + 1) < pinned
    assert r == math.floor(1 / alloc.gpu_equivalents + 1e-9)  # consistent with the share it holds


def _check(apply: dict[str, Any], alloc: Allocation, gpu: GpuModel) -> None:
    """Every value ``apply`` gives is one the catalogue and the mechanism accept."""
    res = apply.get("resources", {})
    match alloc.sharing:
        case Sharing.MIG:
            [(key, count)] = res.items()
            prof = gpu.profile(key.removeprefix("nvidia.com/mig-"))
            assert key.startswith("nvidia.com/mig-") and prof is not None, key
            assert 1 <= int(count) <= prof.shape.max_count
        case Sharing.MPS:
            _check_mps(apply, gpu, alloc)
        case Sharing.HAMI:
            assert res["nvidia.com/gpu"] == "1"
            assert 0 < float(res["nvidia.com/gpumem"]) <= gpu.memory_mib
            assert 1 <= int(res["nvidia.com/gpucores"]) <= 100
        case Sharing.KAI:
            assert 0 < float(apply["annotations"]["gpu-fraction"]) <= 1
        case Sharing.TIME_SLICING:
            r = apply["device_plugin_time_slicing_replicas"]
            assert isinstance(r, int) and r >= 1 and res == {"nvidia.com/gpu": "1"}
            assert math.isclose(alloc.gpu_equivalents * r, 1.0, rel_tol=1e-6)
        case Sharing.EXCLUSIVE:
            assert int(res["nvidia.com/gpu"]) >= 1
    for flag in apply.get("vllm_args", []):
        name, value = flag.split("=")
        if name == "--gpu-memory-utilization":
            assert 0 < float(value) <= 1
        elif name == "--max-num-seqs":
            assert int(value) >= 1


@PROPERTY
@given(contexts())
def test_every_how_to_apply_value_is_valid_against_the_catalogue(ctx: Context) -> None:
    rec: Recommendation = rightsize(ctx)
    if rec.recommended is None:
        assert any(r.startswith("no recommendation") for r in rec.reasons)
        return
    gpu = CATALOGUE.get(rec.recommended.gpu_model)
    assert gpu is not None
    _check(how_to_apply(rec.recommended), rec.recommended, gpu)
    assert rec.gpus_needed == rec.recommended.total_gpu_equivalents


@PROPERTY
@given(st.sampled_from(sorted(CATALOGUE.gpus)), st.floats(0.0, 1.0), st.floats(0.0, 200_000.0))
def test_shares_and_slices_sized_from_any_need_apply_validly(key: str, compute: float, memory: float) -> None:
    """The share and time-slice sizing alone, over every need (also ones the policy never reaches)."""
    gpu = CATALOGUE.gpus[key]
    share = size_share(compute, memory, gpu.memory_mib)
    if share is not None:
        alloc = Allocation(Sharing.MPS, gpus=1, gpu_model=key, device_memory_mib=float(share.memory_mib),
                           share=MpsShare(float(share.thread_pct), float(share.memory_mib)),
                           gpu_equivalents=share.gpu_equivalents)
        _check(how_to_apply(alloc), alloc, gpu)
        by_memory = int(gpu.memory_mib // share.memory_mib)
        assert device_plugin_mps_replicas(alloc) == min(100 // share.thread_pct, by_memory)
    n = time_slices(compute, memory, gpu.memory_mib)
    sliced = Allocation(Sharing.TIME_SLICING, gpus=1, gpu_model=key, gpu_equivalents=1 / n)
    _check(how_to_apply(sliced), sliced, gpu)
