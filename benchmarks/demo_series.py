"""The demo's usage series, synthesised from public traces: vLLM serving (queueing, KV cache, TTFT), DCGM
figures that follow from it, a reranker and a training job. Read by build_demo.py.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from demo_specs import GAP_CLIENTS, GPUS, MIG_3G, MODELS, SPECS, STEP_S, STEPS, Spec

from recommender.core import usage as m
from recommender.core.inventory import Sharing

MIB, GIB = 2**20, 2**30
RERANK_BASE_MIB, RERANK_WORKSPACE_MIB = 2600, 9000  # weights + context; batch workspace the allocator keeps
TRAIN_FB_MIB, TRAIN_IDLE_FB_MIB = 71000, 1200  # per device while training / between runs (context only)
HELIOS_VC, HELIOS_FROM = "vc8Sj", "2020-05-11"  # 14 full days (May 10 is a gap in that trace); its clock read as UTC

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


# Non-vLLM workloads: a Triton cross-encoder reranker and a training Job.
RERANK_GPU_S_PER_REQ = 0.012  # one request scores ~64 passages with a small cross-encoder on one A100


TRAIN_GR_ACTIVE = 0.92  # a training step keeps the engine nearly always busy


TIME_SLICE_NEIGHBOURS = 3  # other pods on the time-sliced GPU, each like ours at util 0.2


NEIGHBOUR_GR_ACTIVE = 0.12


HELIOS_FLOOR_Q = 0.4  # the VC's load below this quantile is other teams' steady work; the swing above is ours


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
