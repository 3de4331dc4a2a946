"""A small, realistic Plan and Snapshot built by hand, for the report formats' golden tests.

Five workloads, each exercising one path of the formatters:

- ``llm/Deployment/llama-3-8b-chat``: vLLM on 2 × A100-80GB, recommended a MIG 3g.40gb each with
  ``--gpu-memory-utilization`` 0.9 → 0.82 (32,900 MiB need / 40,192 usable = 0.819, rounded up);
  class real-time (model) and a 24-hour request-rate forecast with 80/95% bands.
- ``vision/StatefulSet/detector-mig``: a MIG 1g.10gb slice with 6 h of history: no recommendation.
- ``batch/Job/nightly-embed``: time-sliced 1/4 of an L4, recommended a whole L4 (costs more); batch by rule.
- ``ml/Deployment/legacy-cuda-svc``: an unknown GPU model (Tesla K80), no engine-activity series.
- ``research/Deployment/a<b>&"c"``: a name that must be escaped in HTML, Markdown and CSV.

Its MIG node plan (:func:`mig_nodes`) has one real node whose last two GPUs keep MIG disabled (one run of
GPUs in the reports) and a pseudo node whose name (``<A100-80GB, node unknown 1>``) must be escaped.

The numbers are hand-set (not run through the policies) so that the golden files change only when
a formatter does. Usage is built from sines, not random numbers, so it is the same everywhere.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd

from recommender.core import usage as m
from recommender.core.catalogue import load_catalogue
from recommender.core.inventory import Allocation, Sharing, VllmArgs, Workload, WorkloadRef
from recommender.core.plan import (
    Bound,
    Classification,
    Forecast,
    NodeMigPlan,
    Plan,
    Recommendation,
    Summary,
    WorkloadClass,
)
from recommender.core.usage import Snapshot
from recommender.mechanisms.mig import MigShare
from recommender.pipeline.advice import with_advice

END = datetime(2026, 11, 1, tzinfo=UTC)
STEP_S = 600.0
DAYS = 14
NASTY = 'a<b>&"c"'
INDEX = pd.date_range(end=END, periods=int(DAYS * 86_400 / STEP_S), freq=pd.Timedelta(seconds=STEP_S), tz=UTC)
START = INDEX[0].to_pydatetime() - timedelta(seconds=STEP_S)
HISTORY_S = (INDEX[-1] - INDEX[0]).total_seconds()  # 2,015 steps x 600 s = 1,209,000 s
A100 = {"gpu_model": "A100-80GB", "gpu_product": "NVIDIA A100-SXM4-80GB"}

_t = np.arange(len(INDEX), dtype=float)
_day = np.sin(2 * np.pi * _t * STEP_S / 86_400)  # one cycle a day
_ripple = np.sin(_t * 1.7) * np.cos(_t * 0.31)  # deterministic "noise" in [-1, 1]
_hour = INDEX.hour.to_numpy()


def _wl(ns: str, kind: str, name: str, alloc: Allocation, **kw: object) -> Workload:
    kw.setdefault("source", "kubernetes")
    return Workload(WorkloadRef(ns, kind, name), alloc, pods=(f"{name}-0",), **kw)  # type: ignore[arg-type]


def llama() -> Recommendation:
    vllm = VllmArgs("meta-llama/Meta-Llama-3-8B-Instruct", 0.9, 8192, 256)
    now = Allocation(Sharing.EXCLUSIVE, gpus=1, gpu_equivalents=1.0, device_memory_mib=81920, vllm=vllm,
                     replicas=2, **A100)  # type: ignore[arg-type]
    rec = replace(now, sharing=Sharing.MIG, gpus=0, share=MigShare("3g.40gb", 1), gpu_equivalents=0.5,
                  device_memory_mib=40192, vllm=replace(vllm, gpu_memory_utilization=0.82))
    reasons = (
        "MIG 3g.40gb: smallest A100-80GB slice with ≥ 32,900 MiB (40,192 usable) and ≥ 0.22 GPU of compute",
        "vLLM: non-KV memory 17,310 MiB (framebuffer peak 73,850 − KV pool 56,540 MiB) + KV in use p95 24% "
        "of the pool, +15% margin; never below one 8,192-token sequence (18,334 MiB)",
        "engine active p95 19% of a 1.00-GPU share = 0.19 GPU, +15% margin",
        "vLLM --gpu-memory-utilization 0.9 → 0.82 of 40,192 MiB",
    )
    # held 2 x 1.0 = 2.0 GPU, needed 2 x 0.5 = 1.0; saved 1.0 GPU x $2.20/h x 730 h = $1,606/month
    cls = Classification(WorkloadClass.REAL_TIME, 0.91, ("daily seasonality 0.71", "idle in 2% of windows"),
                           "model")
    return Recommendation(_wl("llm", "Deployment", "llama-3-8b-chat", now, served_model="llama-3-8b"), rec,
                          reasons, 0.86, Bound(27_400, 32_900, 36_800), Bound(0.16, 0.22, 0.29), 2.0, 1.0,
                          1606.0, "low", HISTORY_S, cls, (rate_forecast(),),
                          risk_reasons=("memory upper bound 36,800 MiB fits the 40,192 MiB one replica sees on "
                                        "MIG 3g.40gb; no requests waiting; confidence 86%",))


def rate_forecast() -> Forecast:
    """24 hourly steps after the window: a daily wave around 12 requests/s, bands ±2 and ±3.5."""
    idx = pd.date_range(END + timedelta(hours=1), periods=24, freq="1h", tz=UTC)
    mean = 12 + 4 * np.sin(2 * np.pi * np.arange(24) / 24)
    frame = pd.DataFrame({"mean": mean, "lo_80": mean - 2, "hi_80": mean + 2, "lo_95": mean - 3.5,
                          "hi_95": mean + 3.5}, index=idx)
    why = ("chosen by backtest: sMAPE 18% vs 24% for seasonal naive",)
    return Forecast(m.REQUEST_RATE, "HoltWinters(144)", frame, why, 18.0, 0.72)


def nasty() -> Recommendation:
    now = Allocation(Sharing.EXCLUSIVE, gpus=1, gpu_equivalents=1.0, gpu_model="H100-80GB",
                     gpu_product="NVIDIA H100 80GB HBM3", device_memory_mib=81559)
    reasons = ("whole GPU: no smaller MIG slice holds the need", "sized from framebuffer used p95 +10% margin",
               "engine active p95 62% of a 1.00-GPU share = 0.62 GPU, +10% margin")
    # upper bound 83,900 MiB > 81,559 on the device: risk high
    return Recommendation(_wl("research", "Deployment", NASTY, now), now, reasons, 0.81,
                          Bound(70_100, 76_800, 83_900), Bound(0.55, 0.68, 0.80), 1.0, 1.0, 0.0, "high", HISTORY_S,
                          risk_reasons=("memory upper bound 83,900 MiB exceeds the 81,559 MiB one replica sees "
                                        "on one H100-80GB: a peak above the target could run out of memory",))


def nightly() -> Recommendation:
    now = Allocation(Sharing.TIME_SLICING, gpus=1, gpu_equivalents=0.25, gpu_model="L4", gpu_product="NVIDIA L4",
                     device_memory_mib=23034)
    rec = replace(now, sharing=Sharing.EXCLUSIVE, gpu_equivalents=1.0)
    reasons = ("whole GPU: L4 has no MIG", "sized from framebuffer used p95 +10% margin",
               "engine active p95 43% of a 1.00-GPU share = 0.43 GPU, +10% margin",
               "engine activity is per device under GPU sharing: it includes the other tenants")
    # held 0.25, needed 1.0: costs 0.75 GPU x $2.50/h x 730 h = $1,368.75/month more
    cls = Classification(WorkloadClass.BATCH, 0.9, ("owner is a Job",), "rule")
    return Recommendation(_wl("batch", "Job", "nightly-embed", now), rec, reasons, 0.64,
                          Bound(15_800, 18_900, 22_100), Bound(0.35, 0.47, 0.60), 0.25, 1.0, -1368.75, "high",
                          HISTORY_S, cls)


def detector() -> Recommendation:
    now = Allocation(Sharing.MIG, share=MigShare("1g.10gb", 1), gpu_equivalents=1 / 7,
                     device_memory_mib=9728, **A100)  # type: ignore[arg-type]
    why = ("no recommendation: not enough history (6.0 h of usage, need 24 h)",)
    return Recommendation(_wl("vision", "StatefulSet", "detector-mig", now), None, why, 0.0,
                          gpus_held=1 / 7, gpus_needed=1 / 7, monthly_savings_usd=0.0, history_s=21_000.0)


def legacy() -> Recommendation:
    now = Allocation(Sharing.EXCLUSIVE, gpus=1, gpu_equivalents=1.0, gpu_product="Tesla K80", device_memory_mib=11441)
    note = "owner inferred from the pod name (no Kubernetes API)"
    why = ("no recommendation: unknown GPU model (Tesla K80); add it to the GPU catalogue (--gpu-catalogue FILE)",
           note)
    return Recommendation(_wl("ml", "Deployment", "legacy-cuda-svc", now, notes=(note,), source="kube-state-metrics"),
                          None, why, 0.0, gpus_held=1.0, gpus_needed=1.0, monthly_savings_usd=0.0, history_s=HISTORY_S)


def recommendations() -> tuple[Recommendation, ...]:
    """In the pipeline's order: most GPUs saved first, then by namespace/kind/name."""
    recs = [llama(), nasty(), nightly(), detector(), legacy()]
    return tuple(sorted(recs, key=lambda r: (-(r.gpus_held - r.gpus_needed), r.ref)))


def _frames(recs: tuple[Recommendation, ...]) -> dict[str, pd.DataFrame]:
    key = {r.ref.name: r.ref.key for r in recs}
    night = (_hour >= 1) & (_hour < 5)
    short = np.where(_t >= len(_t) - 36, 1.0, np.nan)  # the MIG slice: only the last 6 h
    fb = {
        "llama-3-8b-chat": 73_728 + 120 * _ripple,
        NASTY: 68_500 + 3_000 * _day + 800 * _ripple,
        "nightly-embed": np.where(night, 17_200 + 600 * _ripple, 2_100.0),
        "detector-mig": short * (6_900 + 400 * _ripple),
        "legacy-cuda-svc": 5_300 + 300 * _ripple,
    }
    engine = {
        "llama-3-8b-chat": 0.11 + 0.06 * _day + 0.02 * _ripple,
        NASTY: 0.5 + 0.1 * _day + 0.05 * _ripple,
        "nightly-embed": np.where(night, 0.41 + 0.03 * _ripple, 0.02),
        "detector-mig": short * (0.3 + 0.05 * _ripple),
    }
    kv = {"llama-3-8b-chat": 0.14 + 0.08 * _day + 0.02 * _ripple}
    rate = {"llama-3-8b-chat": 12 + 4 * _day + 0.5 * _ripple}
    return {
        metric: pd.DataFrame({key[n]: np.asarray(v, dtype=float) for n, v in cols.items()}, index=INDEX)
        for metric, cols in ((m.FB_USED_MIB, fb), (m.GR_ENGINE_ACTIVE_FRAC, engine), (m.KV_USAGE_FRAC, kv),
                             (m.REQUEST_RATE, rate))
    }


WARNINGS = (
    "dcgm-exporter: DCGM_FI_PROF_SM_ACTIVE is not enabled; compute need uses DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "Kubernetes API not reachable: 1 workload's owner inferred from its pod name",
)


def summary(recs: tuple[Recommendation, ...]) -> Summary:
    # held 2 + 1 + 0.25 + 1/7 + 1 = 4.393; needed 1 + 1 + 1 + 1/7 + 1 = 4.143; x 336 h for GPU-hours
    # packed: 2 x 3g.40gb fill one A100, the 1g.10gb another, + H100 + L4 + K80 = 5 whole GPUs
    held = sum(r.gpus_held for r in recs)
    needed = sum(r.gpus_needed for r in recs)
    hours = (END - START).total_seconds() / 3600
    return Summary(len(recs), sum(r.actionable for r in recs), round(held, 3), round(needed, 3), 5,
                   round(sum(r.monthly_savings_usd or 0.0 for r in recs), 2), round(held * hours, 1),
                   round(needed * hours, 1))


def snapshot() -> Snapshot:
    recs = recommendations()
    return Snapshot(tuple(r.workload for r in recs), _frames(recs), START, END, STEP_S, WARNINGS, "prometheus")


EVICTS = ("each reconfiguration evicts every GPU pod on that GPU and the MIG manager pauses the node's GPU clients: "
          "node-level maintenance, plan it for a window")


def mig_nodes() -> tuple[NodeMigPlan, ...]:
    """llama's two 3g.40gb slices (one replica's node unknown) and detector's 1g.10gb, hand-placed."""
    llama_key, detector_key = "llm/Deployment/llama-3-8b-chat", "vision/StatefulSet/detector-mig"
    node = NodeMigPlan("gpu-a100-7", "A100-80GB", 3, ({"3g.40gb": 1, "1g.10gb": 1}, {}, {}),
                         (llama_key, detector_key), "rightsizer-5f0c2a91", 1,
                         ("2 MIG slices of 2 workload(s) need 1 A100-80GB GPU(s) (fewest possible); the node has 3 "
                          "for MIG", "GPU 0: 1×1g.10gb → 1×1g.10gb + 1×3g.40gb", f"1 GPU(s) reconfigured: {EVICTS}"))
    pseudo = NodeMigPlan("<A100-80GB, node unknown 1>", "A100-80GB", 1, ({"3g.40gb": 1},), (llama_key,),
                           "rightsizer-9d3e4b10", 1,
                           ("node unknown for 1 workload(s): their 1 slices packed on 1 A100-80GB GPU(s) of their own",
                            "1 GPU(s) to set up with MIG before the workloads move there"))
    return node, pseudo


MIG_PARTED_CONFIG = {"version": "v1", "mig-configs": {
    "rightsizer-5f0c2a91": [{"devices": [0], "mig-enabled": True, "mig-devices": {"1g.10gb": 1, "3g.40gb": 1}},
                            {"devices": [1, 2], "mig-enabled": False}],
    "rightsizer-9d3e4b10": [{"devices": [0], "mig-enabled": True, "mig-devices": {"3g.40gb": 1}}],
}}


def plan() -> Plan:
    recs = recommendations()
    return advised(Plan(END, START, END, STEP_S, recs, summary(recs), WARNINGS, {"features": 0.01}, "prometheus",
                        mig_nodes(), MIG_PARTED_CONFIG), snapshot())


def advised(p: Plan, snap: Snapshot | None) -> Plan:
    """``p`` with what its formats show beyond the numbers, as ``run_once`` leaves it."""
    return with_advice(p, snap, load_catalogue())


def fleet(n: int, days: float = 14, step_s: float = 60.0) -> tuple[Plan, Snapshot]:
    """``n`` copies of the llama workload in ``n`` namespaces at ``step_s``: for timing big reports."""
    base = llama()
    idx = pd.date_range(end=END, periods=int(days * 86_400 / step_s), freq=pd.Timedelta(seconds=step_s), tz=UTC)
    i = np.arange(len(idx), dtype=float)
    recs = tuple(replace(base, workload=replace(base.workload, ref=WorkloadRef(f"team-{k:04d}", "Deployment",
                                                                                 "llama")),
                         gpus_needed=1.0 + (k % 5) * 0.1) for k in range(n))
    wave = np.sin(2 * np.pi * i * step_s / 86_400)
    fb = pd.DataFrame({r.ref.key: 73_000 + 100 * np.sin(i * (1 + k / n)) for k, r in enumerate(recs)}, index=idx)
    act = pd.DataFrame({r.ref.key: 0.12 + 0.05 * wave + 0.01 * np.cos(i * (1 + k / n)) for k, r in enumerate(recs)},
                       index=idx)
    start = idx[0].to_pydatetime() - timedelta(seconds=step_s)
    snap = Snapshot(tuple(r.workload for r in recs), {m.FB_USED_MIB: fb, m.GR_ENGINE_ACTIVE_FRAC: act}, start, END,
                    step_s, (), "test")
    return advised(Plan(END, start, END, step_s, recs, summary(recs), (), {}, "test"), snap), snap
