"""Build the bundled demo cluster (recommender/demo/) from real public traces, reproducibly.

    python benchmarks/build_demo.py --shared ../shared/data --out recommender/demo

Demand is real: per-client 10-minute request rates from Alibaba ServeGen (language/m-mid, 14 days),
request token lengths from the Azure LLM inference 2023 traces (conv, code) and Mooncake, and a
SenseTime Helios virtual cluster's running-GPU share for the batch Job. The capacity model below turns
that demand into the DCGM and vLLM series a cluster would show. Fixed seed and a fixed end time: the
same inputs give the same snapshot. Licences and commits: NOTICE; what is derived from what:
recommender/demo/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from collectors.files import read_snapshot, write_snapshot
from recommender.core import usage as m
from recommender.core.inventory import Allocation, GpuNode, Sharing, VllmArgs, Workload, WorkloadRef
from recommender.core.usage import Snapshot
from recommender.mechanisms.mig import MigShare

# -- Window: 14 days at 10 minutes, stamped at each step's end (as a Prometheus range query is). --------
END = datetime(2026, 11, 1, tzinfo=UTC)
STEP_S = 600  # ServeGen's own window
STEPS = 2016  # 14 days
SEED = 20261101
SCENARIO = "demo.gpu-rightsizer.io/scenario"  # annotation saying what each workload is there to show
SOURCE = ("demo (derived from public traces: Alibaba ServeGen, Azure LLM inference 2023, Mooncake, "
          "SenseTime Helios)")

# -- Capacity model, per vLLM replica and 10-minute step (serve() below is this, line by line) ----------
#   load      = rate x prompt / prefill_tok_s + rate x output / decode_tok_s   (share of engine time)
#   TPOT      = tpot_s x (1 + TPOT_LOAD_SLOPE x load);  latency = prompt / prefill_tok_s + output x TPOT
#   running   = rate x latency (Little's law), capped by max_num_seqs and by KV capacity / context
#   KV cap    = (util x memory - weights / TP - activations) / (KV bytes per token / TP), in whole blocks
#   KV usage  = peak running x context / KV cap, context = prompt + output / 2 (max over the step)
#   waiting   = demand beyond those caps + QUEUE_HORIZON_S of backlog while load > 1
#   TTFT p95  = p95 prompt / prefill_tok_s / (1 - min(load, MAX_RHO)) + waiting / rate; NaN with no requests
#   GR_ACTIVE = min(1, load + BUSY_FLOOR_FRAC x P(any request running));  SM_ACTIVE = SM_PER_GR x GR
#   FB_USED   = util x memory + CUDA_CONTEXT_MIB, flat: vLLM pre-allocates its KV cache (the trap)
#   POWER     = idle + (max - idle) x POWER_ACTIVE_SHARE x GR, per device
# Throughputs scale with the GPU's speed (H100 = 1) and the replica's share of it (3g slice: 3/7 of the
# SMs; time-sliced: what the neighbours leave). They are round figures in line with public vLLM
# benchmarks (bf16), not measurements: the demo needs the right shapes and orders of magnitude.
MIB, GIB = 2**20, 2**30
CUDA_CONTEXT_MIB = 500  # CUDA context + cuBLAS/NCCL workspaces outside vLLM's budget: FB sits above util x memory
BLOCK_TOKENS = 16  # vLLM KV block size: capacity is a whole number of blocks
SAMPLES_PER_STEP = 32  # requests drawn from a token trace per step for its mean / p95 lengths
TPOT_LOAD_SLOPE = 2.0  # time per output token grows to 3x the batch-1 figure as the engine saturates
BUSY_FLOOR_FRAC = 0.10  # engine activity while any request decodes at tiny batch (short memory-bound kernels)
PEAK_Z = 3.0  # max over a step of a concurrency with mean L ~ L + 3 standard deviations ...
# ... with variance L x (1 + CV^2) / 2 (CV: ServeGen's inter-arrival CV; 1 = Poisson): bursty steps peak higher
PREEMPT_SHARE = 0.5  # preemptions per arrival per unit of peak KV demand beyond capacity
QUEUE_HORIZON_S = 60.0  # overload backlog counted over one minute (clients time out and retry after that)
MAX_RHO = 0.95  # queueing factor 1/(1 - rho) is capped here so TTFT stays finite at saturation
POWER_ACTIVE_SHARE = 0.8  # serving is memory-bound: full activity draws idle + 0.8 x (max - idle) watts
SM_PER_GR = 0.7  # SM_ACTIVE / GR_ENGINE_ACTIVE for decode-heavy serving (warps stall on memory)


@dataclass(frozen=True)
class Gpu:
    product: str  # DCGM modelName / GFD nvidia.com/gpu.product
    model: str | None  # canonical catalogue key; None = not in the catalogue
    memory_mib: float  # FB_USED + FB_FREE of the whole device
    speed: float  # serving throughput relative to one H100 SXM (A100: ~0.55 by FLOPs and bandwidth)
    idle_w: float
    max_w: float
    dcp_sm_active: bool  # DCGM_FI_PROF_SM_ACTIVE enabled on this node pool


GPUS = {
    "A100": Gpu("NVIDIA A100-SXM4-80GB", "A100-80GB", 81920, 0.55, 60, 400, False),
    "H100": Gpu("NVIDIA H100 80GB HBM3", "H100-80GB", 81559, 1.0, 75, 700, True),
    "FOO": Gpu("NVIDIA Foo-9000", None, 49152, 0.45, 40, 300, False),  # a product the catalogue lacks
}


@dataclass(frozen=True)
class Llm:
    hf_id: str
    weights_gib: float  # bf16 weights (policies/data/models.yaml)
    kv_bytes_per_token: int  # 2 (K,V) x layers x KV heads x head dim x 2 bytes, whole model (TP splits it)
    activation_gib: float  # vLLM's profiled activation peak per GPU
    prefill_tok_s: float  # prompt tokens/s at full activity on one H100 (70B: on its TP pair)
    decode_tok_s: float  # generated tokens/s at full batch on one H100 (70B: on its TP pair)
    tpot_s: float  # time per output token at batch 1 on one H100 (weights / HBM bandwidth + overhead)


MODELS = {
    "llama-3-8b": Llm("meta-llama/Meta-Llama-3-8B-Instruct", 14.96, 2 * 32 * 8 * 128 * 2, 1.5, 40000, 10000, 0.010),
    "qwen2.5-7b": Llm("Qwen/Qwen2.5-7B-Instruct", 14.19, 2 * 28 * 4 * 128 * 2, 1.5, 42000, 10500, 0.009),
    "qwen2.5-coder-7b": Llm("Qwen/Qwen2.5-Coder-7B-Instruct", 14.19, 2 * 28 * 4 * 128 * 2, 1.5, 42000, 10500, 0.009),
    "mistral-7b": Llm("mistralai/Mistral-7B-Instruct-v0.3", 13.49, 2 * 32 * 8 * 128 * 2, 1.5, 42000, 10500, 0.009),
    "llama-3.2-3b": Llm("meta-llama/Llama-3.2-3B-Instruct", 5.98, 2 * 28 * 8 * 128 * 2, 1.0, 90000, 20000, 0.005),
    "llama-3-70b": Llm("meta-llama/Meta-Llama-3-70B-Instruct", 131.4, 2 * 80 * 8 * 128 * 2, 2.0, 8000, 2000, 0.028),
}

# Non-vLLM workloads: a Triton cross-encoder reranker and a training Job.
RERANK_GPU_S_PER_REQ = 0.012  # one request scores ~64 passages with a small cross-encoder on one A100
RERANK_BASE_MIB, RERANK_WORKSPACE_MIB = 2600, 9000  # weights + context; batch workspace the allocator keeps
TRAIN_GR_ACTIVE = 0.92  # a training step keeps the engine nearly always busy
TRAIN_FB_MIB, TRAIN_IDLE_FB_MIB = 71000, 1200  # per device while training / between runs (context only)
TIME_SLICE_NEIGHBOURS = 3  # other pods on the time-sliced GPU, each like ours at util 0.2
NEIGHBOUR_GR_ACTIVE = 0.12
HELIOS_VC, HELIOS_FROM = "vc8Sj", "2020-05-11"  # 14 full days (May 10 is a gap in that trace); its clock read as UTC
HELIOS_FLOOR_Q = 0.4  # the VC's load below this quantile is other teams' steady work; the swing above is ours
GAP_CLIENTS = (36, 60, 73, 23)  # steady ServeGen clients: steps where all are zero are trace gaps -> NaN


@dataclass(frozen=True)
class Spec:
    """One demo workload: where it runs, what it serves, whose demand it replays, what it shows."""

    ns: str
    name: str
    scenario: str
    gpu: str
    llm: str | None  # None: not a vLLM server (DCGM only)
    client: int | None  # ServeGen m-mid client id (None: the Helios batch Job)
    tokens: str = "conv"  # conv | code | long (Azure conv, Azure code, Mooncake)
    rate_scale: float = 1.0  # the client's rate times this (shape kept, level fitted to the service)
    kind: str = "Deployment"
    sharing: Sharing = Sharing.EXCLUSIVE
    gpus: int = 1  # devices per replica (tensor parallel size for vLLM)
    replicas: int = 1
    util: float = 0.9  # --gpu-memory-utilization
    max_model_len: int = 8192
    annotations: tuple[tuple[str, str], ...] = ()  # set by the user on the workload (e.g. its class)
    max_num_seqs: int = 256


SPECS = (
    Spec("chat", "assistant", "over-provisioned: 8B model on a whole H100 at ~1.5 req/s", "H100", "llama-3-8b", 61),
    Spec("chat", "support-bot", "over-provisioned and intermittent: half the steps idle", "A100", "mistral-7b", 91,
         max_model_len=32768),
    Spec("chat", "qwen-chat", "well-sized and busy: long prompts keep 2 H100 replicas working", "H100",
         "qwen2.5-7b", 43, tokens="long", rate_scale=0.8, replicas=2, max_model_len=32768, max_num_seqs=512),
    Spec("chat", "assistant-70b", "70B on 2 H100 tensor-parallel: KV cache tight at peaks", "H100", "llama-3-70b", 2,
         rate_scale=0.6, kind="StatefulSet", gpus=2, util=0.95, max_num_seqs=64),
    Spec("chat", "translate", "too many replicas: 3 whole A100s for ~4 req/s; its team load-tested 5 req/s per "
         "replica", "A100", "qwen2.5-7b", 99, replicas=3, max_model_len=32768,
         annotations=(("rightsizer.io/replica-capacity", "5"),)),
    Spec("devtools", "code-complete", "over-provisioned: prefill-heavy completions at ~0.5 req/s", "A100",
         "qwen2.5-coder-7b", 85, tokens="code", max_model_len=32768),
    Spec("devtools", "code-review", "already on a MIG 3g.40gb slice", "A100", "mistral-7b", 69, tokens="code",
         sharing=Sharing.MIG, max_model_len=16384),
    Spec("devtools", "docs-qa", "idle for days: scale-to-zero candidate", "A100", "llama-3-8b", 75),
    Spec("search", "query-expander", "time-sliced: 1 of 4 pods on a shared A100 (DCGM sees the device)", "A100",
         "llama-3.2-3b", 87, sharing=Sharing.TIME_SLICING, util=0.2),
    Spec("search", "reranker", "no vLLM metrics: a Triton service seen only through DCGM", "A100", None, 18),
    Spec("search", "query-rewrite", "unknown GPU product (not in the catalogue)", "FOO", "llama-3-8b", 56),
    Spec("research", "train-ranker", "batch Job (Helios-shaped): busier by day, often idle at night", "A100",
         None, None, kind="Job", gpus=2),
    Spec("research", "eval-harness", "bursty evaluation runs that fill the GPU, idle in between; its team "
         "annotated it batch", "H100", "llama-3-8b", 26, rate_scale=0.6,
         annotations=(("rightsizer.io/class", "batch"),)),
    Spec("research", "summarizer", "long documents at ~0.3 req/s: KV need, not compute, sets its size; a 30 s "
         "time-to-first-token objective", "H100", "mistral-7b", 68, tokens="long", max_model_len=32768,
         annotations=(("rightsizer.io/ttft-slo-seconds", "30"),)),
)
MIG_3G = ("3g.40gb", 40192, 3 / 7, 0.5)  # profile, usable MiB (catalogue), SM share, gpu-equivalents max(4/8, 3/7)


# -- Real traces ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Traces:
    rates: dict[int, np.ndarray]  # ServeGen client -> req/s per step
    cvs: dict[int, np.ndarray]  # ServeGen client -> inter-arrival CV per step (0 when idle)
    tokens: dict[str, tuple[np.ndarray, np.ndarray]]  # pool -> (prompt tokens, output tokens) per request
    helios_busy: np.ndarray  # share of the VC's GPUs running, per step
    gaps: np.ndarray  # bool per step: the demand trace has no data


def load_traces(shared: Path) -> Traces:
    """Read the slices of the public traces the demo uses (a few MB, a second or two)."""
    clients = {s.client for s in SPECS if s.client is not None} | set(GAP_CLIENTS)
    rates, cvs = {}, {}
    for c in sorted(clients):
        raw = pd.read_csv(shared / f"alibaba-servegen/data/language/m-mid/chunk-{c}-trace.csv", header=None)
        if len(raw) != STEPS or not (np.diff(raw[0]) == STEP_S).all():
            sys.exit(f"error: ServeGen client {c}: expected {STEPS} windows of {STEP_S} s, found {len(raw)}")
        rates[c] = raw[1].to_numpy(float)
        cvs[c] = np.nan_to_num(raw[2].to_numpy(float))
    azure = shared / "azure-llm-inference-2023"
    conv, code = (pd.read_csv(azure / f"AzureLLMInferenceTrace_{k}.csv") for k in ("conv", "code"))
    moon = pd.read_json(shared / "mooncake-traces/conversation_trace.jsonl", lines=True)
    tokens = {"conv": (conv["ContextTokens"].to_numpy(), conv["GeneratedTokens"].to_numpy()),
              "code": (code["ContextTokens"].to_numpy(), code["GeneratedTokens"].to_numpy()),
              "long": (moon["input_length"].to_numpy(), moon["output_length"].to_numpy())}
    gaps = np.logical_and.reduce([rates[c] == 0 for c in GAP_CLIENTS])
    return Traces(rates, cvs, tokens, _helios(shared), gaps)


def _helios(shared: Path) -> np.ndarray:
    """Running share of a Helios VC's GPUs, 10-minute means over 14 days."""
    path = shared / f"helios-sensetime/Earth_vcs/{HELIOS_VC}_cluster_sequence_vc.csv"
    raw = pd.read_csv(path, usecols=["time", "running_gpu_num", "total_gpu_num"], parse_dates=["time"])
    start = pd.Timestamp(HELIOS_FROM)
    raw = raw[(raw["time"] >= start) & (raw["time"] < start + pd.Timedelta(days=14))]
    share = (raw["running_gpu_num"] / raw["total_gpu_num"].clip(lower=1)).to_numpy(float)
    return share.reshape(STEPS, -1).mean(axis=1)


def token_stats(traces: Traces, spec: Spec, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Per step: mean prompt and output length and p95 prompt length of requests drawn from the trace."""
    prompt, output = traces.tokens[spec.tokens]
    pick = rng.integers(0, len(prompt), size=(STEPS, SAMPLES_PER_STEP))
    out = output[pick].astype(float)
    inp = np.minimum(prompt[pick], spec.max_model_len - out)  # vLLM rejects longer; clients truncate
    return {"prompt": inp.mean(axis=1), "output": out.mean(axis=1), "prompt_p95": np.quantile(inp, 0.95, axis=1)}


# -- Capacity model ---------------------------------------------------------------------------------


def memory_mib(spec: Spec) -> float:
    """Memory one device (or the MIG slice) shows the process."""
    return MIG_3G[1] if spec.sharing is Sharing.MIG else GPUS[spec.gpu].memory_mib


def compute_share(spec: Spec) -> float:
    """H100-equivalents of compute behind one replica (its TP group counted once: the model's figures are)."""
    gpu = GPUS[spec.gpu]
    if spec.sharing is Sharing.MIG:
        return gpu.speed * MIG_3G[2]
    if spec.sharing is Sharing.TIME_SLICING:
        return gpu.speed * (1 - TIME_SLICE_NEIGHBOURS * NEIGHBOUR_GR_ACTIVE)
    return gpu.speed


def kv_capacity_tokens(spec: Spec) -> int:
    """(util x memory - weights - activations) / KV bytes per token, per GPU of the TP group, in whole blocks."""
    llm = MODELS[spec.llm or ""]
    budget_b = spec.util * memory_mib(spec) * MIB - (llm.weights_gib / spec.gpus + llm.activation_gib) * GIB
    tokens = int(budget_b / (llm.kv_bytes_per_token / spec.gpus))
    return tokens // BLOCK_TOKENS * BLOCK_TOKENS


def serve(spec: Spec, rate: np.ndarray, cv: np.ndarray, tok: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One vLLM replica's engine state per step: load, Little's-law concurrency, KV use, queueing, TTFT."""
    llm, share = MODELS[spec.llm or ""], compute_share(spec)
    prefill_s = tok["prompt"] / (llm.prefill_tok_s * share)
    load = rate * tok["prompt"] / (llm.prefill_tok_s * share) + rate * tok["output"] / (llm.decode_tok_s * share)
    tpot_s = llm.tpot_s / share * (1 + TPOT_LOAD_SLOPE * np.minimum(load, 1))
    wanted = rate * (prefill_s + tok["output"] * tpot_s)  # Little's law: arrivals x time in the engine
    context = tok["prompt"] + tok["output"] / 2  # KV tokens a running request holds on average
    capacity = kv_capacity_tokens(spec)
    running = np.minimum(wanted, np.minimum(spec.max_num_seqs, capacity / context))
    backlog = rate * np.clip(1 - 1 / np.maximum(load, 1e-9), 0, None) * QUEUE_HORIZON_S
    waiting = wanted - running + backlog
    peak = running + PEAK_Z * np.sqrt(running * (1 + cv**2) / 2)
    kv_peak = np.where(rate > 0, peak * context / capacity, 0.0)
    rho = np.minimum(load, MAX_RHO)
    ttft = tok["prompt_p95"] / (llm.prefill_tok_s * share) / (1 - rho) + waiting / np.maximum(rate, 1e-9)
    return {"load": np.minimum(load, 1), "load_raw": load, "running": running, "waiting": waiting,
            "kv": np.minimum(kv_peak, 1), "preempt": rate * np.clip(kv_peak - 1, 0, None) * PREEMPT_SHARE,
            "ttft": np.where(rate > 0, ttft, np.nan)}


# -- Series per workload ----------------------------------------------------------------------------


def vllm_series(spec: Spec, traces: Traces, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """vLLM's own metrics (summed over replicas where they add up) plus what DCGM shows."""
    assert spec.client is not None
    rate = traces.rates[spec.client] * spec.rate_scale
    tok = token_stats(traces, spec, rng)
    eng = serve(spec, rate / spec.replicas, traces.cvs[spec.client], tok)
    done = rate * np.minimum(1, 1 / np.maximum(eng["load_raw"], 1))  # finished, not arrived, requests
    gr = np.minimum(1, eng["load"] + BUSY_FLOOR_FRAC * (1 - np.exp(-eng["running"])))
    fb_mib = np.full(STEPS, spec.util * memory_mib(spec) + CUDA_CONTEXT_MIB)  # pre-allocated: flat
    if spec.sharing is Sharing.TIME_SLICING:  # DCGM sees the device: our pod plus its neighbours
        share = compute_share(spec) / GPUS[spec.gpu].speed
        gr = gr * share + (1 - share)
        fb_mib = fb_mib + TIME_SLICE_NEIGHBOURS * (0.2 * memory_mib(spec) + CUDA_CONTEXT_MIB)
    return {
        m.KV_USAGE_FRAC: eng["kv"], m.REQUESTS_RUNNING: eng["running"] * spec.replicas,
        m.REQUESTS_WAITING: eng["waiting"] * spec.replicas, m.REQUEST_RATE: done,
        m.PROMPT_TOKENS_RATE: done * tok["prompt"], m.GENERATION_TOKENS_RATE: done * tok["output"],
        m.TTFT_P95_S: eng["ttft"], m.PREEMPTIONS_RATE: eng["preempt"] * spec.replicas,
        **dcgm_series(spec, gr, fb_mib, POWER_ACTIVE_SHARE),
    }


def dcgm_series(spec: Spec, gr: np.ndarray, fb_mib: np.ndarray, power_share: float) -> dict[str, np.ndarray]:
    """Per device: framebuffer, activity; power summed over devices; none per MIG instance (DCGM has none)."""
    gpu = GPUS[spec.gpu]
    out = {m.FB_USED_MIB: fb_mib, m.FB_TOTAL_MIB: np.full(STEPS, memory_mib(spec)), m.GR_ENGINE_ACTIVE_FRAC: gr}
    if spec.sharing is not Sharing.MIG:
        per_device_w = gpu.idle_w + (gpu.max_w - gpu.idle_w) * power_share * gr
        out[m.POWER_W] = per_device_w * spec.gpus * spec.replicas
    if gpu.dcp_sm_active:
        out[m.SM_ACTIVE_FRAC] = gr * SM_PER_GR
    return out


def reranker_series(spec: Spec, traces: Traces) -> dict[str, np.ndarray]:
    """A Triton service: activity from its request rate; PyTorch's allocator keeps a day's peak workspace."""
    assert spec.client is not None
    gr = np.minimum(1, traces.rates[spec.client] * spec.rate_scale * RERANK_GPU_S_PER_REQ)
    day_peak = pd.Series(gr).rolling(86_400 // STEP_S, min_periods=1).max().to_numpy()
    return dcgm_series(spec, gr, RERANK_BASE_MIB + RERANK_WORKSPACE_MIB * day_peak, POWER_ACTIVE_SHARE)


def training_series(spec: Spec, traces: Traces) -> dict[str, np.ndarray]:
    """The Job trains when its VC's load is above the VC's usual floor: that swing is the team's own runs."""
    busy = traces.helios_busy
    low, high = np.quantile(busy, [HELIOS_FLOOR_Q, 0.95])
    active = np.clip((busy - low) / (high - low), 0, 1)
    fb_mib = np.where(active > 0.02, TRAIN_FB_MIB, TRAIN_IDLE_FB_MIB).astype(float)
    return dcgm_series(spec, TRAIN_GR_ACTIVE * active, fb_mib, power_share=1.0)


# -- Inventory --------------------------------------------------------------------------------------

_POD_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # Kubernetes' SafeEncodeString alphabet


def pod_names(spec: Spec, rng: np.random.Generator) -> tuple[str, ...]:
    def rand(n: int) -> str:
        return "".join(rng.choice(list(_POD_CHARS), size=n))

    if spec.kind == "StatefulSet":
        return tuple(f"{spec.name}-{i}" for i in range(spec.replicas))
    if spec.kind == "Job":
        return (f"{spec.name}-{rand(5)}",)
    template = rand(10)
    return tuple(f"{spec.name}-{template}-{rand(5)}" for _ in range(spec.replicas))


def allocation(spec: Spec) -> Allocation:
    """What one replica holds; gpu_equivalents: whole GPUs 1 each, 3g max(4/8, 3/7), time-sliced 1/pods."""
    gpu, llm = GPUS[spec.gpu], MODELS.get(spec.llm or "")
    vllm = VllmArgs(llm.hf_id, spec.util, spec.max_model_len, spec.max_num_seqs, spec.gpus) if llm else None
    gpus, profile, count, share = spec.gpus, None, 0, float(spec.gpus)
    if spec.sharing is Sharing.MIG:
        gpus, profile, count, share = 0, MIG_3G[0], 1, MIG_3G[3]
    elif spec.sharing is Sharing.TIME_SLICING:
        share = 1 / (1 + TIME_SLICE_NEIGHBOURS)
    mig = MigShare(profile, count) if profile else None
    return Allocation(spec.sharing, gpus=gpus, share=mig, gpu_equivalents=share,
                      gpu_model=gpu.model, gpu_product=gpu.product, device_memory_mib=memory_mib(spec), vllm=vllm,
                      replicas=spec.replicas)


def workload(spec: Spec, rng: np.random.Generator) -> Workload:
    llm = MODELS.get(spec.llm or "")
    component = "llm-server" if llm else ("training" if spec.kind == "Job" else "inference-server")
    notes = ((f"dcgm-exporter attributes its GPU to {1 + TIME_SLICE_NEIGHBOURS} pods: usage is per device, "
              "not per pod (time-slicing or MPS)",) if spec.sharing is Sharing.TIME_SLICING else ())
    return Workload(
        WorkloadRef(spec.ns, spec.kind, spec.name), allocation(spec), pods=pod_names(spec, rng),
        labels={"app.kubernetes.io/name": spec.name, "app.kubernetes.io/component": component, "team": spec.ns},
        annotations={SCENARIO: spec.scenario, **dict(spec.annotations)}, source="demo", notes=notes,
        kv_capacity_tokens=float(kv_capacity_tokens(spec)) if llm else None,
        served_model=llm.hf_id if llm else None, nodes=(node_of(spec),))


# Where the demo's pods run: one 8-GPU node per product; the MIG workload on a node partitioned into
# 3g.40gb pairs (mig-parted's all-3g.40gb), so the per-node MIG plan has a current layout to keep.
NODES = (
    GpuNode("gpu-a100-0", "A100-80GB", 8),
    GpuNode("gpu-a100-mig-0", "A100-80GB", 8, "all-3g.40gb", tuple({"3g.40gb": 2} for _ in range(8))),
    GpuNode("gpu-h100-0", "H100-80GB", 8),
    GpuNode("gpu-foo-0", None, 4),
)


def node_of(spec: Spec) -> str:
    if spec.sharing is Sharing.MIG:
        return "gpu-a100-mig-0"
    return {"A100": "gpu-a100-0", "H100": "gpu-h100-0"}.get(spec.gpu, "gpu-foo-0")


# -- Build, write, report ---------------------------------------------------------------------------


def build(shared: Path) -> Snapshot:
    """The demo snapshot: every spec's workload and series; trace gaps are NaN in every series."""
    traces = load_traces(shared)
    index = pd.date_range(end=END, periods=STEPS, freq=pd.Timedelta(seconds=STEP_S), tz=UTC)
    workloads: list[Workload] = []
    columns: dict[str, dict[str, np.ndarray]] = {}
    for i, spec in enumerate(SPECS):
        rng = np.random.default_rng([SEED, i])  # one stream per workload: editing one leaves the rest alone
        workloads.append(workload(spec, rng))
        if spec.llm:
            series = vllm_series(spec, traces, rng)
        else:
            series = reranker_series(spec, traces) if spec.client is not None else training_series(spec, traces)
        for metric, values in series.items():
            columns.setdefault(metric, {})[workloads[-1].ref.key] = np.where(traces.gaps, np.nan, values)
    usage = {metric: pd.DataFrame(columns[metric], index=index) for metric in m.USAGE_METRICS if metric in columns}
    return Snapshot(tuple(workloads), usage, END - timedelta(seconds=STEP_S * STEPS), END, float(STEP_S),
                    (), SOURCE, NODES)


def _stat(snapshot: Snapshot, metric: str, ref: WorkloadRef, q: float | None) -> str:
    s = snapshot.series(metric, ref)
    return "-" if s is None else f"{s.mean() if q is None else s.quantile(q):.2f}"


def describe(snapshot: Snapshot) -> str:
    """One line per workload: what it holds and how busy it is, to eyeball each scenario."""
    lines = [f"{'workload':38} {'holds (per replica)':28} {'req/s':>6} {'kv p95':>6} {'gr p95':>6}  scenario"]
    for w in snapshot.workloads:
        a = w.allocation
        holds = f"{a.replicas}x {a.mig_profile or a.gpu_model or a.gpu_product} = {a.gpu_equivalents:.2g} GPU"
        lines.append(f"{w.ref.key:38} {holds:28} {_stat(snapshot, m.REQUEST_RATE, w.ref, None):>6} "
                     f"{_stat(snapshot, m.KV_USAGE_FRAC, w.ref, 0.95):>6} "
                     f"{_stat(snapshot, m.GR_ENGINE_ACTIVE_FRAC, w.ref, 0.95):>6}  {w.annotations[SCENARIO]}")
    return "\n".join(lines)


def default_shared() -> Path:
    """$GPU_RIGHTSIZER_SHARED (the shared folder or its data/), else ../shared/data beside the repository."""
    env = os.environ.get("GPU_RIGHTSIZER_SHARED")
    if env:
        return Path(env) / "data" if (Path(env) / "data").is_dir() else Path(env)
    return Path(__file__).resolve().parents[2] / "shared" / "data"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the bundled demo cluster from public traces.")
    parser.add_argument("--shared", type=Path, default=default_shared(),
                        help="folder holding the public traces (default: $GPU_RIGHTSIZER_SHARED or ../shared/data)")
    parser.add_argument("--out", type=Path, default=Path("recommender/demo"), help="where to write the snapshot")
    args = parser.parse_args(argv)
    if not (args.shared / "alibaba-servegen").is_dir():
        sys.exit(f"error: public traces not found under {args.shared} (need alibaba-servegen, "
                 "azure-llm-inference-2023, mooncake-traces, helios-sensetime); pass --shared DIR. "
                 "The bundled demo in recommender/demo works without them.")
    snapshot = build(args.shared)
    write_snapshot(snapshot, args.out)
    written = read_snapshot(args.out)  # what users will load (float32 values)
    print(describe(written))
    sizes = {p.name: p.stat().st_size for p in sorted(args.out.iterdir()) if p.suffix in (".json", ".parquet")}
    print(f"wrote {len(written.workloads)} workloads, {len(written.usage)} metrics, {STEPS} steps of {STEP_S} s "
          f"ending {END.isoformat()} to {args.out}: " + json.dumps(sizes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
