"""A recommendation that keeps the GPUs a workload holds changes an engine setting only where that gains
something the policy can name: otherwise it keeps today's settings and says so."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from collectors.files import read_snapshot
from recommender.core import usage as m
from recommender.core.inventory import Allocation, Sharing, VllmArgs
from recommender.core.plan import Recommendation
from recommender.core.settings import ForecastSettings, Settings
from recommender.demo import demo_path
from recommender.mechanisms.mps import MpsShare
from recommender.pipeline.run import run_once
from tests.builders import END, snapshot, whole_gpu, workload

NO_SAVING = "no saving: settings unchanged"
RT = {"rightsizer.io/class": "real-time"}


@pytest.fixture(scope="module")
def demo() -> dict[str, Recommendation]:
    snap = read_snapshot(demo_path())
    plan = run_once(snap, Settings(forecast=ForecastSettings(max_workloads=0)), snap.end)
    return {r.ref.name: r for r in plan.recommendations}


def _same_gpus(r: Recommendation) -> bool:
    return r.recommended is not None and r.gpus_needed == r.gpus_held and not r.monthly_savings_usd


def test_qwen_chat_keeps_its_vllm_settings_on_its_unshared_h100(demo: dict[str, Recommendation]) -> None:
    """The issue: an unshared H100, $0 saved, told to cut vLLM memory 0.9 → 0.67 and max-num-seqs 512 → 65."""
    qwen = demo["qwen-chat"]
    assert qwen.recommended is not None and _same_gpus(qwen)
    assert qwen.recommended.vllm == qwen.workload.allocation.vllm  # 0.9 and 512 stay
    assert qwen.reasons[0].startswith(NO_SAVING)
    # why: the freed memory is of a GPU nobody shares; the KV pool (p99 58% in use) never ran full
    assert "shares with no one" in qwen.reasons[0] and "never ran full" in qwen.reasons[0]
    assert not any(r.startswith("vLLM --") for r in qwen.reasons)


def test_every_demo_change_that_saves_nothing_says_what_it_gains(demo: dict[str, Recommendation]) -> None:
    changed = 0
    for rec in demo.values():
        if not _same_gpus(rec) or rec.recommended is None:
            continue
        if rec.recommended.vllm == rec.workload.allocation.vllm:
            continue
        changed += 1
        gains = [r for r in rec.reasons if r.startswith("vLLM --") and ": worth it: " in r]
        assert gains, (rec.ref.key, rec.reasons)
        assert not any(r.startswith(NO_SAVING) for r in rec.reasons)
    assert changed >= 1  # assistant-70b: its KV pool runs full, so its max-num-seqs cut stands


VLLM = VllmArgs(model="meta-llama/Meta-Llama-3-8B-Instruct", gpu_memory_utilization=0.9, max_model_len=8192,
                max_num_seqs=256)


def _chat(kv: float, alloc: Allocation | None = None, fb: float = 0.9 * 81_920) -> Recommendation:
    """A vLLM chat service kept on a whole A100 (compute 0.9 of it): 300,000 KV tokens of 131,072 B (37,500 MiB),
    requests of 1,000 tokens."""
    w = workload("chat", alloc or whole_gpu(vllm=VLLM), kv_capacity_tokens=300_000.0, served_model=VLLM.model,
                 annotations=RT)
    snap = snapshot([w], {m.FB_USED_MIB: {"chat": fb}, m.GR_ENGINE_ACTIVE_FRAC: {"chat": 0.75},
                          m.KV_USAGE_FRAC: {"chat": kv}, m.REQUEST_RATE: {"chat": 1.0},
                          m.PROMPT_TOKENS_RATE: {"chat": 800.0}, m.GENERATION_TOKENS_RATE: {"chat": 200.0}})
    return run_once(snap, Settings(forecast=ForecastSettings(enabled=False)), END).recommendations[0]


FULL_IN_5_PCT = np.where(np.arange(2016) % 20 == 0, 1.0, 0.7)  # KV cache full in one step of 20: p99 100%


def test_a_pool_that_never_ran_full_keeps_every_setting() -> None:
    rec = _chat(kv=0.7, alloc=whole_gpu(vllm=replace(VLLM, max_num_seqs=512)))
    assert rec.recommended is not None and rec.recommended.sharing is Sharing.EXCLUSIVE and _same_gpus(rec)
    # non-KV 0.9 x 81,920 - 37,500 = 36,228 MiB; need 36,228 + 0.7 x 37,500 x 1.15 = 66,416 MiB → 0.82 of the GPU,
    # under today's 0.9: 6,554 MiB freed on a GPU of its own. The pool at 0.9 holds (73,728 - 36,228) MiB /
    # 131,072 B = 300,000 tokens, 300 requests of 1,000 tokens, under 512; but it was never over 70% in use
    assert rec.recommended.vllm == rec.workload.allocation.vllm
    assert rec.reasons[0] == (f"{NO_SAVING} (--gpu-memory-utilization 0.82 would free 6,554 MiB of a GPU it shares "
                              "with no one, which nothing else can use; the KV pool never ran full (p99 70% in use), "
                              "so nothing shows vLLM preempting what a --max-num-seqs of 300 would queue)")


def test_a_pool_that_ran_full_gets_the_max_num_seqs_cut_and_why() -> None:
    top = whole_gpu(vllm=VllmArgs(VLLM.model, 0.95, 8192, 512))
    rec = _chat(kv=FULL_IN_5_PCT, alloc=top, fb=0.95 * 81_920)
    assert rec.recommended is not None and rec.recommended.vllm is not None and _same_gpus(rec)
    # non-KV 77,824 - 37,500 = 40,324 MiB; need 40,324 + 37,500 x 1.15 over the 0.95 cap: 0.95 stays, unremarked.
    # The pool at 0.95: 37,500 MiB = 300,000 tokens = 300 requests of 1,000 tokens < 512
    assert (rec.recommended.vllm.gpu_memory_utilization, rec.recommended.vllm.max_num_seqs) == (0.95, 300)
    cut = [r for r in rec.reasons if r.startswith("vLLM --max-num-seqs 512 → 300")]
    assert cut and ": worth it: the pool ran full (p99 100% in use)" in cut[0], rec.reasons
    assert not any(r.startswith(NO_SAVING) or "--gpu-memory-utilization" in r for r in rec.reasons)


def test_more_memory_for_a_full_pool_is_worth_it() -> None:
    low = whole_gpu(vllm=VllmArgs(VLLM.model, 0.6, 8192, 256))
    # framebuffer flat at 0.6 x 81,920 = 49,152 MiB: non-KV 49,152 - 37,500 = 11,652 MiB; KV p99 100% of the pool
    # need = 11,652 + 37,500 x 1.15 = 54,777 MiB → 54,777 / 81,920 = 0.669 → 0.67
    rec = _chat(kv=1.0, alloc=low, fb=0.6 * 81_920)
    assert rec.recommended is not None and rec.recommended.vllm is not None
    assert rec.recommended.vllm.gpu_memory_utilization == pytest.approx(0.67)
    raise_ = [r for r in rec.reasons if r.startswith("vLLM --gpu-memory-utilization 0.6 → 0.67")]
    assert raise_ and ": worth it: " in raise_[0], rec.reasons


def test_less_memory_on_a_shared_device_is_worth_it() -> None:
    """Time-sliced: the other clients see the same device memory, so what vLLM gives back is theirs."""
    shared = Allocation(Sharing.TIME_SLICING, gpus=1, gpu_model="A100-80GB", gpu_product="NVIDIA A100-SXM4-80GB",
                          device_memory_mib=81_920, gpu_equivalents=0.5, vllm=VLLM)
    w = workload("tsb", shared, kv_capacity_tokens=300_000.0, served_model=VLLM.model,
                 annotations={"rightsizer.io/class": "batch", "rightsizer.io/mechanism": "time-slicing"})
    snap = snapshot([w], {m.FB_USED_MIB: {"tsb": 16_000 + 37_500.0}, m.GR_ENGINE_ACTIVE_FRAC: {"tsb": 0.3},
                          m.KV_USAGE_FRAC: {"tsb": 0.1}})
    rec = run_once(snap, Settings(forecast=ForecastSettings(enabled=False)), END).recommendations[0]
    assert rec.recommended is not None and rec.recommended.sharing is Sharing.TIME_SLICING, rec.reasons
    assert _same_gpus(rec)  # 1/2 of the GPU today and after
    # need 16,000 + 0.1 x 37,500 x 1.15 = 20,312.5 MiB → 0.248 → 0.25 of 81,920: (0.9 - 0.25) x 81,920 = 53,248 freed
    assert rec.recommended.vllm is not None and rec.recommended.vllm.gpu_memory_utilization == 0.25
    assert ("vLLM --gpu-memory-utilization 0.9 → 0.25 of 81,920 MiB: worth it: frees 53,248 MiB of the device for "
            "the other clients sharing it") in rec.reasons


MPS = Allocation(Sharing.MPS, gpus=1, gpu_model="A100-80GB", device_memory_mib=81_920, gpu_equivalents=0.5,
                   share=MpsShare(50.0, 30_720.0))


@pytest.mark.parametrize(
    ("recommended", "expected"),
    [
        # 50% of the SMs binds (0.5 GPU-equivalents) on both sides: 30,720 - 20,480 = 10,240 MiB go to the others
        (replace(MPS, share=MpsShare(50.0, 20_480.0)),
         "mps share resized within the 0.50 GPU-equivalents held (nothing saved)"
         ": worth it: pinned memory 30,720 MiB → 20,480 MiB leaves 10,240 MiB to the other clients of the GPU"),
        # 40,960 MiB of 81,920 binds (0.5) once the SMs drop to 45%: the memory need grew, today's limit is under it
        (replace(MPS, share=MpsShare(45.0, 40_960.0)),
         "mps share resized within the 0.50 GPU-equivalents held (nothing saved): worth it: SMs 50% → 45% leaves 5% "
         "to the other clients of the GPU; pinned memory 30,720 MiB → 40,960 MiB holds a need over today's limit"),
        (MPS, None),  # nothing changes
        (replace(MPS, share=MpsShare(50.0, 20_480.0), gpu_equivalents=0.45), None),  # fewer GPU-equivalents: a saving
        (replace(MPS, sharing=Sharing.HAMI), None),  # another mechanism: a move, not a resize
    ],
)
def test_a_share_resized_within_what_it_holds_says_what_that_gains(recommended: Allocation,
                                                                  expected: str | None) -> None:
    from policies.nogain import share_gain

    assert share_gain(MPS, recommended) == expected
