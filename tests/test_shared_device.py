"""Shared GPUs (time-slicing, MPS): per-device DCGM figures are never sized as one pod's need, and the
MPS device-plugin replica count is how many of the share fit one physical GPU (issue 38)."""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache
from typing import Any

import pytest

from collectors.files import read_snapshot
from policies.shares import how_to_apply
from recommender.core import usage as m
from recommender.core.annotations import REQUIRED_ANNOTATION
from recommender.core.catalogue import load_catalogue
from recommender.core.inventory import Allocation, Sharing, VllmArgs
from recommender.core.plan import Plan, Recommendation
from recommender.core.settings import ForecastSettings, Settings
from recommender.core.usage import Snapshot
from recommender.demo import demo_path
from recommender.mechanisms.mps import MpsShare
from recommender.outputs import get_formatter
from recommender.pipeline.run import run_once
from tests.builders import END, snapshot, whole_gpu, workload

SETTINGS = Settings(forecast=ForecastSettings(max_workloads=0))


@cache
def demo() -> Snapshot:
    return read_snapshot(demo_path())


def run(snapshot: Snapshot) -> Plan:
    return run_once(snapshot, SETTINGS, snapshot.end)


@cache
def demo_json() -> dict[str, Any]:
    doc = json.loads(get_formatter("json")(run(demo()), demo()))
    return {w["name"]: w for w in doc["workloads"]}


def test_demo_query_expander_is_not_moved_to_a_whole_gpu_from_the_device_figure() -> None:
    """query-expander is 1 of 4 pods on a time-sliced A100: DCGM's 67 GiB framebuffer is the device's. Its own
    memory comes from vLLM's --gpu-memory-utilization 0.2 × 80 GiB = 16 GiB cap; its compute is an upper bound
    (the device's engine activity), so nothing bigger than its quarter is recommended from it."""
    qe = demo_json()["query-expander"]
    assert qe["current"]["sharing"] == "time-slicing" and qe["current"]["gpu_equivalents"] == 0.25
    assert qe["recommended"] is not None
    assert qe["gpus_needed"] <= qe["gpus_held"]
    assert qe["recommended"]["sharing"] != "exclusive"
    cap = 0.2 * 81920  # the pod's vLLM cap: its framebuffer cannot exceed it
    assert qe["memory_need_mib"]["target"] <= cap
    said = " ".join(qe["reasons"])
    assert "58,301" not in said  # the old "non-KV memory" read off the whole device
    assert "--gpu-memory-utilization 0.2 × 81,920 MiB = 16,384 MiB" in said and "4 pods" in said
    assert "upper bound" in said and "keeps its current allocation" in said
    assert qe["risk"] != "low"
    assert qe["confidence"] <= 0.5  # halved where kept for want of per-pod evidence


def test_docs_qa_on_mps_gets_the_device_plugin_replicas_that_fit() -> None:
    """docs-qa required onto MPS: 5% of the SMs and 19,456 MiB pinned on an 81,920 MiB A100. The device plugin
    gives each of R replicas 100 // R % and 81,920 / R MiB (reference.md §3): R = min(100 // 5 = 20,
    81,920 // 19,456 = 4) = 4 (4 × 19,456 = 77,824 ≤ 81,920 < 5 × 19,456 = 97,280)."""
    snap = demo()
    docs_qa = next(w for w in snap.workloads if w.ref.name == "docs-qa")
    required = replace(docs_qa, annotations={**docs_qa.annotations, REQUIRED_ANNOTATION: "mps"})
    snap = replace(snap, workloads=tuple(required if w is docs_qa else w for w in snap.workloads))
    rec = next(r for r in run(snap).recommendations if r.ref.name == "docs-qa")
    alloc = rec.recommended
    assert alloc is not None and alloc.sharing is Sharing.MPS
    assert (alloc.mps_active_thread_pct, alloc.mps_pinned_mem_mib) == (5, 19456)
    gpu = load_catalogue().get(alloc.gpu_model)
    assert gpu is not None and gpu.memory_mib == 81920
    assert how_to_apply(alloc)["device_plugin_mps_replicas"] == 4


# --------------------------------------------------------------------------- hand-made shared devices

def _one(alloc: Allocation, fb: float, active: float, cls: str = "real-time", **kw: object) -> Recommendation:
    w = workload("w", alloc, annotations={"rightsizer.io/class": cls}, **kw)
    snap = snapshot([w], {m.FB_USED_MIB: {"w": fb}, m.GR_ENGINE_ACTIVE_FRAC: {"w": active}})
    return run_once(snap, SETTINGS, END).recommendations[0]


def _sliced(pods: int = 4, **kw: object) -> Allocation:
    return replace(whole_gpu(), sharing=Sharing.TIME_SLICING, gpu_equivalents=1 / pods, **kw)  # type: ignore[arg-type]


def test_a_time_slice_without_per_pod_evidence_is_kept_not_grown() -> None:
    """60 GiB of framebuffer on a time-sliced A100 is the device's: sized as the pod's it would take a whole GPU;
    a time-slice bounds no memory, so nothing smaller can be shown either: the slice is kept, less confident."""
    rec = _one(_sliced(), 60_000.0, 0.40)
    assert rec.recommended == rec.workload.allocation and rec.gpus_needed == rec.gpus_held == 0.25
    said = " ".join(rec.reasons)
    assert "time-slicing isolates no memory" in said and "no per-pod figure exists" in said
    assert rec.risk in ("medium", "high")
    unshared = _one(whole_gpu(), 60_000.0, 0.40)
    assert rec.confidence == pytest.approx(unshared.confidence * 0.5, abs=1e-3)


def test_several_pods_on_an_exclusive_gpu_are_treated_as_shared() -> None:
    """DCGM saw 3 pods on a GPU the spec hands out whole (a time-sliced nvidia.com/gpu): the same rule."""
    alloc = replace(whole_gpu(), gpu_equivalents=0.5)  # what it holds, whole by its spec
    rec = _one(alloc, 70_000.0, 0.60, device_shared_with=3)
    assert rec.recommended == alloc
    assert any("3 pods on the device" in r for r in rec.reasons)
    alone = _one(alloc, 70_000.0, 0.60)  # one pod: the figures are its own, and a whole GPU is fine
    assert alone.recommended is not None and alone.recommended.gpu_equivalents == 1.0


def test_the_mps_pinned_limit_bounds_the_pods_memory() -> None:
    """The device shows 60 GiB but the pod cannot pin more than 12 GiB: its memory need is at most that (with
    margin), never the device figure; an MPS share no bigger than today's is fine."""
    alloc = replace(whole_gpu(), sharing=Sharing.MPS, share=MpsShare(50.0, 12_288.0),
                    gpu_equivalents=0.5)
    rec = _one(alloc, 60_000.0, 0.10, cls="batch")
    assert rec.memory_need_mib is not None and rec.memory_need_mib.target <= 12_288 * 1.15 + 1
    assert rec.recommended is not None and rec.gpus_needed <= rec.gpus_held
    assert any("MPS pinned limit 12,288 MiB" in r and "an upper bound" in r for r in rec.reasons)


def test_a_time_slice_may_shrink_on_per_pod_evidence() -> None:
    """vLLM's cap (0.1 × 81,920 = 8,192 MiB) and its own KV pool size the pod's memory; a busy-enough-for-nothing
    device (5% engine activity, an upper bound of the pod's) lets it move to a smaller MIG slice than its quarter."""
    vllm = VllmArgs(model="meta-llama/Llama-3.2-3B-Instruct", gpu_memory_utilization=0.1, max_model_len=2048)
    w = workload("w", _sliced(vllm=vllm), annotations={"rightsizer.io/class": "real-time"},
                 kv_capacity_tokens=20_000.0, served_model=vllm.model)
    snap = snapshot([w], {m.FB_USED_MIB: {"w": 60_000.0}, m.GR_ENGINE_ACTIVE_FRAC: {"w": 0.05},
                          m.KV_USAGE_FRAC: {"w": 0.3}})
    rec = run_once(snap, SETTINGS, END).recommendations[0]
    assert rec.recommended is not None and rec.recommended.sharing is Sharing.MIG
    assert rec.gpus_needed < rec.gpus_held
    assert rec.memory_need_mib is not None and rec.memory_need_mib.target < 8_192
    assert any("0.1 × 81,920 MiB = 8,192 MiB cap" in r and "KV pool and KV usage are its own" in r
               for r in rec.reasons)
