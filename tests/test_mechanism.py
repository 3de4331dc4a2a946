"""Mechanism choice and fractional shares: table-driven, with the arithmetic beside each number."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.mechanism import mechanisms
from policies.shares import how_to_apply
from policies.vllmargs import default_max_num_seqs
from recommender.core import usage as m
from recommender.core.annotations import ALLOWED_ANNOTATION, REQUIRED_ANNOTATION
from recommender.core.inventory import Allocation, Sharing, VllmArgs
from recommender.core.plan import WorkloadClass
from recommender.core.settings import MechanismSettings, Settings
from recommender.mechanisms.hami import HamiShare, hami_resources
from recommender.mechanisms.kai import KaiShare, kai_annotations
from recommender.mechanisms.mig import MigShare
from recommender.mechanisms.mps import MpsShare, device_plugin_mps_replicas, dra_gpu_config, mps_env
from recommender.mechanisms.sizing import size_share
from recommender.mechanisms.time_slicing import time_slices
from recommender.pipeline.run import run_once
from tests.builders import END, snapshot, whole_gpu, workload

RT, NRT, BATCH = WorkloadClass.REAL_TIME, WorkloadClass.NEAR_REAL_TIME, WorkloadClass.BATCH


@pytest.mark.parametrize(
    ("cls", "annotations", "settings", "order", "conflict"),
    [
        (RT, {}, MechanismSettings(), ("mig", "exclusive"), None),
        (NRT, {}, MechanismSettings(), ("mig", "mps", "exclusive"), None),
        (BATCH, {}, MechanismSettings(), ("mps", "time-slicing", "mig", "exclusive"), None),
        (None, {}, MechanismSettings(), ("mig", "exclusive"), None),  # unknown class: isolation first
        (BATCH, {}, MechanismSettings(fraction_backend="hami"), ("hami", "time-slicing", "mig", "exclusive"), None),
        (BATCH, {}, MechanismSettings(fraction_backend="dra"), ("mps", "time-slicing", "mig", "exclusive"), None),
        # the namespace narrows: ml may only have MIG or whole GPUs
        (BATCH, {}, MechanismSettings(by_namespace={"ml": ("mig", "exclusive")}), ("mig", "exclusive"), None),
        # the workload narrows further
        (NRT, {ALLOWED_ANNOTATION: "exclusive, mps"}, MechanismSettings(), ("mps", "exclusive"), None),
        # a required mechanism wins over the class order…
        (RT, {REQUIRED_ANNOTATION: "time-slicing"}, MechanismSettings(), ("time-slicing",), None),
        # …unless it is not allowed: a contradiction
        (RT, {REQUIRED_ANNOTATION: "mps"}, MechanismSettings(allowed=("mig", "exclusive")), (), "not allowed"),
        # nothing the class can use is allowed
        (RT, {ALLOWED_ANNOTATION: "time-slicing"}, MechanismSettings(), (), "no mechanism left"),
    ],
)
def test_mechanism_order(cls, annotations, settings, order, conflict) -> None:  # type: ignore[no-untyped-def]
    w = workload("w", whole_gpu(), annotations=annotations)
    choice = mechanisms(w, cls, settings)
    assert choice.order == order
    assert (choice.conflict is None) if conflict is None else (conflict in (choice.conflict or ""))


def test_unknown_mechanism_in_settings_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown mechanism"):
        MechanismSettings(allowed=("mig", "vgpu"))
    with pytest.raises(ValueError, match="unknown fraction backend"):
        MechanismSettings(fraction_backend="magic")


@pytest.mark.parametrize(
    ("compute", "memory", "device", "pct", "mem"),
    [
        (0.12, 10_000, 81_920, 15, 10_240),  # 12% → next 5% step 15; 10,000 MiB → 40 × 256 = 10,240
        (0.05, 100, 81_920, 5, 256),  # floors: one step of each
        (0.301, 30_000, 81_920, 35, 30_208),  # 30.1% → 35; 30,000 / 256 = 117.2 → 118 × 256 = 30,208
    ],
)
def test_size_share_rounds_up(compute: float, memory: float, device: float, pct: int, mem: int) -> None:
    share = size_share(compute, memory, device)
    assert share is not None and (share.thread_pct, share.memory_mib) == (pct, mem)
    assert share.gpu_equivalents == pytest.approx(max(pct / 100, mem / device))


def test_size_share_of_a_whole_gpu_is_none() -> None:
    assert size_share(0.97, 1000, 81_920) is None  # 97% → 100%: that is the whole GPU
    assert size_share(0.10, 81_920, 81_920) is None  # all the memory


@pytest.mark.parametrize(
    ("compute", "memory", "n"),
    [
        (0.20, 10_000, 5),  # compute 1/0.2 = 5, memory 81,920/10,000 = 8 → 5
        (0.05, 30_000, 2),  # compute 20, memory 2.7 → 2: memory is the hard limit
        (0.60, 1_000, 1),  # compute 1.67 → 1: no room for a second client
    ],
)
def test_time_slices(compute: float, memory: float, n: int) -> None:
    assert time_slices(compute, memory, 81_920) == n


@given(st.floats(0.01, 0.95), st.floats(100, 80_000))
def test_share_always_covers_the_need(compute: float, memory: float) -> None:
    share = size_share(compute, memory, 81_920)
    if share is not None:
        assert share.thread_pct / 100 >= compute - 1e-9
        assert share.memory_mib >= memory
        assert 0 < share.gpu_equivalents < 1


MPS = Allocation(Sharing.MPS, gpus=1, gpu_model="A100-80GB", device_memory_mib=81_920,
                 share=MpsShare(30.0, 20_480.0), gpu_equivalents=0.3)


def test_renderings_follow_each_backend() -> None:
    assert mps_env(MPS) == {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=20480M"}
    # equal split: min(100/30 = 3.3, 81,920/20,480 = 4) → 3 clients per GPU
    assert device_plugin_mps_replicas(MPS) == 3
    mps = dra_gpu_config(MPS)["parameters"]["sharing"]
    assert mps == {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 30,
                                                    "defaultPinnedDeviceMemoryLimit": "20480Mi"}}
    hami = Allocation(Sharing.HAMI, gpus=1, share=HamiShare(12_288.0, 25.0))
    assert hami_resources(hami) == {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "12288", "nvidia.com/gpucores": "25"}
    assert kai_annotations(Allocation(Sharing.KAI, share=KaiShare(0.25))) == {"gpu-fraction": "0.25"}
    both = how_to_apply(MPS)
    assert both["dra"]["driver"] == "gpu.nvidia.com" and both["env"] == mps_env(MPS)
    mig = Allocation(Sharing.MIG, share=MigShare("1g.10gb", 1),
                     vllm=VllmArgs(gpu_memory_utilization=0.62, max_num_seqs=12))
    assert how_to_apply(mig) == {"resources": {"nvidia.com/mig-1g.10gb": "1"},
                                 "vllm_args": ["--gpu-memory-utilization=0.62", "--max-num-seqs=12"]}
    sliced = how_to_apply(Allocation(Sharing.TIME_SLICING, gpus=1, gpu_equivalents=0.25))
    assert sliced["device_plugin_time_slicing_replicas"] == 4  # 1 / 0.25


def test_vllm_default_max_num_seqs() -> None:
    assert default_max_num_seqs(81_559, "H100-80GB") == 1024
    assert default_max_num_seqs(81_920, "A100-80GB") == 256  # A100: never the large default
    assert default_max_num_seqs(40_192, "H100-80GB") == 256  # a MIG slice under 70 GiB


# --------------------------------------------------------------------------- through the pipeline

def _small(cls: str, **settings: object):  # type: ignore[no-untyped-def]
    w = workload("w", whole_gpu(), annotations={"rightsizer.io/class": cls})
    snap = snapshot([w], {m.FB_USED_MIB: {"w": 10_000.0}, m.GR_ENGINE_ACTIVE_FRAC: {"w": 0.10}})
    return run_once(snap, Settings(**settings), END).recommendations[0]  # type: ignore[arg-type]


def test_class_decides_the_mechanism() -> None:
    # need: 10,000 × 1.15 = 11,500 MiB, compute 0.10 × 1.2 = 0.12 GPU
    rt = _small("real-time")
    assert rt.recommended is not None and rt.recommended.sharing is Sharing.MIG
    assert rt.recommended.mig_profile == "1g.20gb"  # 11,500 MiB > 1g.10gb's 9,728
    batch = _small("batch")
    assert batch.recommended is not None and batch.recommended.sharing is Sharing.MPS
    # 12% → 15%; 11,500 MiB → 45 × 256 = 11,520 MiB pinned; share = max(0.15, 11,520/81,920 = 0.14) = 0.15
    assert (batch.recommended.mps_active_thread_pct, batch.recommended.mps_pinned_mem_mib) == (15.0, 11_520.0)
    assert batch.gpus_needed == pytest.approx(0.15)
    assert batch.mechanism == "mps"
    assert any("only with MPS clients of namespace ml" in r for r in batch.reasons)


def test_backends_and_constraints_through_the_pipeline() -> None:
    kai = _small("batch", mechanisms=MechanismSettings(fraction_backend="kai"))
    # memory 11,520 / 81,920 = 0.1406 → 0.15 of the GPU's memory
    assert kai.recommended is not None and kai.recommended.kai_gpu_fraction == pytest.approx(0.15)
    no_sharing = _small("batch", mechanisms=MechanismSettings(allowed=("exclusive",)))
    assert no_sharing.recommended is not None and no_sharing.recommended.sharing is Sharing.EXCLUSIVE
    w = workload("w", whole_gpu(), annotations={REQUIRED_ANNOTATION: "hami"})
    snap = snapshot([w], {m.FB_USED_MIB: {"w": 10_000.0}, m.GR_ENGINE_ACTIVE_FRAC: {"w": 0.10}})
    bad = run_once(snap, Settings(mechanisms=MechanismSettings(allowed=("mig", "exclusive"))), END)
    rec = bad.recommendations[0]
    # contradictory constraints: the best valid fallback, a whole GPU, and the reason
    assert rec.recommended is not None and rec.recommended.sharing is Sharing.EXCLUSIVE
    assert any("constraints contradict" in r for r in rec.reasons)


def test_vllm_share_holds_the_need_at_the_capped_fraction() -> None:
    vllm = VllmArgs(model="meta-llama/Meta-Llama-3-8B-Instruct", gpu_memory_utilization=0.9, max_model_len=4096)
    w = workload("chat", whole_gpu(vllm=vllm), kv_capacity_tokens=300_000.0, served_model=vllm.model,
                 annotations={"rightsizer.io/class": "real-time"})
    fb = 16_000 + 37_500.0  # non-KV 16,000 MiB + a 37,500 MiB KV pool
    snap = snapshot([w], {m.FB_USED_MIB: {"chat": fb}, m.GR_ENGINE_ACTIVE_FRAC: {"chat": 0.10},
                          m.KV_USAGE_FRAC: {"chat": 0.05}, m.REQUEST_RATE: {"chat": 1.0},
                          m.PROMPT_TOKENS_RATE: {"chat": 2500.0}, m.GENERATION_TOKENS_RATE: {"chat": 500.0}})
    rec = run_once(snap, Settings(), END).recommendations[0]
    alloc = rec.recommended
    assert alloc is not None and alloc.vllm is not None and rec.memory_need_mib is not None
    # need = 16,000 + 0.05 × 37,500 × 1.15 = 18,156 MiB; / 0.95 cap = 19,112 MiB → 1g.20gb (19,968)
    assert alloc.mig_profile == "1g.20gb"
    util = alloc.vllm.gpu_memory_utilization
    assert util is not None and util * 19_968 >= rec.memory_need_mib.target  # 0.91 × 19,968 = 18,171
    # KV pool on the slice: 0.91 × 19,968 − 16,000 = 2,171 MiB = 17,368 tokens at 131,072 B/token;
    # mean request 3,000 tokens (3,000 tok/s / 1 req/s) → 5 sequences < vLLM's default 256
    assert alloc.vllm.max_num_seqs == 5
    assert any("--max-num-seqs default 256 → 5" in r for r in rec.reasons)
