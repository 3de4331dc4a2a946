"""Replay a real request trace against a vLLM service's replicas under several scaling policies.

    python benchmarks/replay.py --trace ../shared/data/azure-llm-inference-2023/AzureLLMInferenceTrace_conv.csv \
        --format azure
    python benchmarks/replay.py --trace ../shared/data/alibaba-servegen/data/language/m-mid/chunk-2-trace.csv \
        --format servegen

Prints one line per policy: ``policy=<name> gpu_hours=<x> ttft_violation_pct=<x> cold_starts=<n> ...``;
``--chart FILE.svg`` also draws them over time (``replay_charts.py``).

Capacity model (fixed, stated, every number a flag; defaults for an 8B dense model, BF16, one H100-80GB):
- prefill 15,000 tokens/s per replica; decode 4,000 tokens/s per replica in all, at most 100 tokens/s
  per sequence; each second decode of the running sequences goes first (vLLM V1 schedules running
  requests before new ones), prefill gets the rest of the replica-second;
- KV cache 400,000 tokens per replica (72 GiB at utilisation 0.9, less 16 GiB weights and 4 GiB
  activations, at 128 KiB per token); a request reserves prompt + output tokens when admitted
  (no preemption); at most 256 sequences per replica;
- a new pod is ready 120 s after it starts (image cached, weights load, CUDA graphs) and holds its GPU
  from start to removal: GPU-hours count starting pods. Requests are served FIFO by the replica pool.
TTFT = admission wait + prefill; a request still unserved at the end counts as over the objective.
- on a MIG slice (``--slice``; ``Capacity.on_slice``): prefill x SM slices / 7, decode and per-sequence
  speed x memory slices / 8 (reference.md §1: a memory slice carries 1/8 of the bandwidth), KV = the
  slice's usable memory at the same utilisation less the whole GPU's weights and activations; a pod
  counts the slice's share of a GPU (3g.40gb: 0.5). ``auto`` picks the shape as the product's MIG policy
  would, from the first hour (``choose_slice``).

Policies (every one starts with the static-peak count of warm replicas: the service ran before the trace):
- ``static-peak``: replicas for the peak minute of the whole trace (load = prompt/prefill + output/decode
  replica-seconds per second), all the time. It sees the future: it is the provisioning baseline.
- ``reactive``: KEDA + HPA on ``vllm:num_requests_waiting`` with AverageValue 5 per replica, read at every
  HPA sync (15 s; KEDA queries afresh, ``useCachedMetrics`` false) with tolerance 0.1, scale-up at most
  max(+4 pods, x2) per 15 s, scale-down stabilisation 300 s, minReplicaCount 1 (with 0 KEDA would
  deactivate a busy service that keeps up: waiting is 0 then). ``reactive-zero`` is the same with
  minReplicaCount 0, KEDA's activation checked every 30 s (pollingInterval) and cooldownPeriod 300 s.
  Requests wait only when the pool is saturated (admission each second takes every request that arrives
  within it, up to the budget), so this metric is 0 until a replica is full: it scales on a queue, late.
  Both on whole GPUs, as services run today; ``reactive-slice`` is reactive on ours' shape: what the
  slice buys without our scaling (an ablation, not the baseline). ``reactive-bounded`` (not run by
  default) is reactive with maxReplicaCount at the static-peak count instead of KEDA's 100: an operator's
  sane ceiling, which takes away the queue's overshoot but not its late scaling.
- ``ours``: on the ``--slice`` shape, ``policies.replicas.scaling_plan`` refitted every ``--refit-s`` (300 s:
  the controller's default interval, so the published forecast is as old as in a cluster) on the history so
  far only (a ``recommender.analysis.forecast`` forecast of the per-minute arrival rate, the request rate the
  collector reads (finished + growth of running and waiting), capacity from the model above
  and the token means seen so far as the annotation, class from ``--class``, the previous plan); every 15 s
  the HPA sees three metrics, each proposing replicas with the HPA's 0.1 tolerance, and follows the largest:
  the forecast band over the next cold start (the external scaler, once the plan acts on a forecast: from
  ``min_forecast_history_s`` of history, two days; before, the plan's floor) and the arrival rate over the rate
  trigger's window (``rate_window_s``, 120 s: two scrapes at 60 s), per ``target_per_replica``, and, as the
  plan's second trigger, waiting / ``waiting_per_replica`` (target x the TTFT objective: 5 on a 3g.40gb slice,
  11 on the whole GPU); scale-down stabilisation from ``scale_down_window_s`` (the window ``hpa_behavior``
  sets); to zero only when the plan allows it (real-time: only with ``--wake-budget-frac``, where its past
  wakes fit that share of the error budget, ``policies.replicas.wake_cost``, once a forecast and two days of
  history exist) and the forecast expects no
  request within a cold start, the cooldown after the last one. At zero, KEDA activates one pod at a poll
  (30 s) for the forecast or a request held at zero (a gateway such as KEDA's HTTP add-on holds it); until a
  replica serves, the rate and waiting triggers read nothing (vLLM's metrics come from serving replicas), so
  the cold start's backlog is no demand. Its
  headroom follows the TTFT error budget (``policies.replicas.error_budget_headroom``): each refit reads every
  past minute's p95 TTFT of the requests served, by first-token time as vLLM's histogram records it, and the
  minute's ready replicas. From the same history the plan measures capacity at the knee
  (``policies.replicas.locate_knee``) and keeps the model's figure while it lies within the knee's bracket, as
  the product does by default. On a slice, once a day of history exists, it moves to whole GPUs where the
  right-size policy would (``policies.mig.missed_too_often``: over 2x the error budget of the last 24 h's
  requests over the objective, read as the collector reads vLLM's TTFT histogram, ``histogram_over``), rolled
  out as :func:`simulate` describes.
- ``oracle``: reads the requests of the next cold start (not causal, not a contender): replicas for the
  busiest minute of work ahead plus the backlog, at the class's headroom, with the same HPA behaviour. It
  reads further ahead where a jump needs more HPA syncs to reach than its lead of two (x2 or +4 per 15 s:
  from 2 to 60 pods takes five), so it starts the ramp in time. Where it misses the goal, an exact forecast
  of each minute's work would not have met it with these replicas and this HPA either.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import dataclasses
import heapq
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replay_charts import chart_path_problem, replay_figure, save

from collectors.prometheus.queries import within_objective
from policies.mig import fitting_profiles, missed_too_often
from policies.replicas import (
    BAND_BY_CLASS,
    NoScalingPlan,
    ReplicaHistory,
    replicas_for,
    scale_down_window_s,
    scaling_plan,
)
from recommender.analysis.features import after_zero
from recommender.analysis.forecast import NotEnoughHistory, forecast_series
from recommender.core.annotations import CAPACITY_ANNOTATION
from recommender.core.catalogue import GpuModel, MigProfile, load_catalogue
from recommender.core.inventory import Allocation, Sharing, Workload, WorkloadRef
from recommender.core.plan import Classification, ScalingPlan, WorkloadClass
from recommender.core.settings import PolicySettings, ScalingSettings

HPA_SYNC_S = 15
KEDA_POLL_S = 30
HPA_TOLERANCE = 0.1  # cluster default (--horizontal-pod-autoscaler-tolerance)
KEDA_WAITING_TARGET = 5.0  # the reactive baseline: requests waiting per replica
GOAL_TERMS = "(>= 50%, >= 15%, <= 1 point)"  # ends the goal line (verdict): replay_sweep.py reads it


@dataclass(frozen=True)
class Capacity:
    prefill_tps: float = 15_000.0
    decode_tps: float = 4_000.0
    seq_tps: float = 100.0
    kv_tokens: float = 400_000.0
    max_seqs: int = 256
    cold_start_s: float = 120.0
    kv_kib_per_token: float = 128.0
    gpu_memory_utilization: float = 0.9
    gpu_share: float = 1.0  # share of one GPU a replica holds: what its GPU-hours count

    def on_slice(self, gpu: GpuModel, profile: MigProfile) -> Capacity:
        """The same model on a MIG slice (reference.md §1: an SM slice is 1/7 of the SMs, a memory slice 1/8
        of memory capacity and bandwidth). Prefill is compute-bound: it scales with the SM slices; decode,
        per-sequence speed included, is bandwidth-bound: it scales with the memory slices. The KV cache is
        what the slice's usable memory leaves at the same utilisation after the whole-GPU overhead (weights,
        activations: whole memory x utilisation - kv_tokens x kv_kib_per_token). GPU-hours count the slice's
        share of the GPU (the larger of its memory and SM fractions)."""
        sm = profile.shape.sm_slices / gpu.sm_slices
        mem = profile.shape.mem_slices / gpu.memory_slices
        kv = (self.gpu_memory_utilization * profile.usable_mib * 1024 - self.overhead_kib(gpu)) / self.kv_kib_per_token
        return replace(self, prefill_tps=self.prefill_tps * sm, decode_tps=self.decode_tps * mem,
                       seq_tps=self.seq_tps * mem, kv_tokens=kv, gpu_share=gpu.share(profile))

    def overhead_kib(self, gpu: GpuModel) -> float:
        """Memory a replica holds besides its KV cache (weights, activations), from the whole-GPU figures."""
        return self.gpu_memory_utilization * gpu.memory_mib * 1024 - self.kv_tokens * self.kv_kib_per_token

    def work_s(self, trace: Trace) -> np.ndarray:
        """Replica-seconds each request costs: prompt at the prefill rate plus output at the decode rate."""
        return trace.input_tokens / self.prefill_tps + trace.output_tokens / self.decode_tps

    def requests_per_s(self, mean_in: float, mean_out: float) -> float:
        """Sustained requests/s of one replica for these token means: the tightest of compute, slots, KV."""
        busy_s = mean_out / self.seq_tps  # how long one request holds a slot and its KV
        compute = 1.0 / (mean_in / self.prefill_tps + mean_out / self.decode_tps)
        return min(compute, self.max_seqs / busy_s, self.kv_tokens / ((mean_in + mean_out) * busy_s))


@dataclass(frozen=True)
class Trace:
    arrival_s: np.ndarray  # sorted, from 0
    input_tokens: np.ndarray
    output_tokens: np.ndarray


# ---------------------------------------------------------------- traces
def load_azure(path: Path) -> Trace:
    df = pd.read_csv(path)
    t = pd.to_datetime(df["TIMESTAMP"]).astype("int64").to_numpy() / 1e9
    return _trace(t, df["ContextTokens"].to_numpy(), df["GeneratedTokens"].to_numpy())


def load_mooncake(path: Path) -> Trace:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return _trace(np.array([r["timestamp"] for r in rows]) / 1000.0, np.array([r["input_length"] for r in rows]),
                  np.array([r["output_length"] for r in rows]))


def load_servegen(path: Path, seed: int, mean_in: float, mean_out: float) -> Trace:
    """Arrivals from each 10-minute window's rate and inter-arrival law (Gamma/Weibull shape, scale),
    rescaled to the window's rate; token lengths are not in these files: lognormal (sigma 1) with the given means."""
    rng = np.random.default_rng(seed)
    df = pd.read_csv(path, header=None, names=["start", "rate", "cv", "dist", "p1", "p2"])
    times = []
    for start, rate, dist, p1, _p2 in df[["start", "rate", "dist", "p1", "p2"]].itertuples(index=False):
        if not rate > 0:
            continue
        n = int(rate * 600 * 1.5 + 20)
        if dist == "Gamma" and p1 > 0:
            gaps = rng.gamma(p1, 1.0, n)
        elif dist == "Weibull" and p1 > 0:
            gaps = rng.weibull(p1, n)
        else:
            gaps = rng.exponential(1.0, n)
        gaps *= (1.0 / rate) / max(gaps.mean(), 1e-12)
        arr = np.cumsum(gaps) - gaps[0] * rng.random()
        times.append(start + arr[(arr >= 0) & (arr < 600)])
    t = np.concatenate(times) if times else np.array([])
    sigma = 1.0
    lengths = [rng.lognormal(math.log(m) - sigma**2 / 2, sigma, t.size) for m in (mean_in, mean_out)]
    return _trace(t, np.maximum(1, lengths[0].round()), np.maximum(1, lengths[1].round()))


def _trace(t: np.ndarray, tin: np.ndarray, tout: np.ndarray) -> Trace:
    order = np.argsort(t, kind="stable")
    t = t[order] - t[order][0] if t.size else t
    return Trace(t.astype("float64"), tin[order].astype("float64"), np.maximum(tout[order], 1).astype("float64"))


# ---------------------------------------------------------------- simulation
@dataclass
class Observed:
    """What a policy may read at second ``k``: only the past and the present, never the future."""

    k: int
    pods: int  # pods that exist (starting or ready): the scale target's replicas
    ready: int
    serving: int  # ready pods of either shape during a rollout: vLLM's metrics come from these alone
    waiting: int
    arrivals_per_s: np.ndarray  # arrivals in each whole second before k
    tokens_in: np.ndarray  # token lengths of requests arrived so far
    tokens_out: np.ndarray
    served_ttft_s: np.ndarray  # TTFT of the requests served so far (FIFO: the first ones), as vLLM's histogram
    served_arrival_s: np.ndarray  # their arrival times


Policy = Callable[[Observed], int]


@dataclass(frozen=True)
class Result:
    gpu_hours: float
    ttft_s: np.ndarray  # inf: never served
    cold_starts: int  # scale-ups from zero pods
    pod_starts: int
    waited_on_cold_start: int  # requests that arrived while no replica was ready
    mean_pods: float
    # GPU-equivalents held (starting pods included), the mean of each minute: what --chart draws
    gpus_per_min: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))


def simulate(trace: Trace, cap: Capacity, policy: Policy, name: str, warm: int = 1) -> Result:
    """Step the replica pool second by second (``warm`` replicas ready at 0); requests are admitted FIFO.

    A policy with a ``cap`` attribute may change the replica shape: when it differs from the pool's, the change
    rolls out as a Deployment with maxSurge 100% would: pods of the new shape start for the same requests/s, the
    old pods serve until they are ready, then go; the policy's count is in the new shape from then on. While
    both serve, the pool's figures add up and a sequence decodes at the slower shape's speed."""
    n = trace.arrival_s.size
    last = math.ceil(trace.arrival_s[-1]) + 1 if n else 1
    arr_idx = np.searchsorted(trace.arrival_s, np.arange(1, last + 3601), side="left").tolist()
    per_sec = np.bincount(trace.arrival_s.astype(np.int64), minlength=last + 3600).astype("float64")
    tin, tout, at = trace.input_tokens.tolist(), trace.output_tokens.tolist(), trace.arrival_s.tolist()
    ttft = np.full(n, np.inf)
    pods: list[float] = [-cap.cold_start_s] * warm  # ready times, ascending
    old: list[float] = []  # the previous shape's pods during a rollout
    old_cap, old_until = cap, 0.0
    heap: list[tuple[float, float]] = []
    head, done_head, g, kv_used, gpu_s = 0, 0.0, 0.0, 0.0, 0.0
    cold_starts = pod_starts = waited_cold = 0
    k, ready = 0, warm
    report = max(1, last // 20)
    gpu_min = np.zeros((last + 3600) // 60 + 1)
    while k < last + 3600 and (k < last or head < n or heap):
        if k % HPA_SYNC_S == 0:
            seen = arr_idx[k - 1] if k else 0  # arrived before second k: the next second's are still ahead
            obs = Observed(k, len(pods), ready, ready + len(old), seen - head, per_sec[:k],
                           trace.input_tokens[:seen], trace.output_tokens[:seen], ttft[:head], trace.arrival_s[:head])
            want = max(0, policy(obs))
            shape = getattr(policy, "cap", cap)
            if shape != cap and pods:  # a rollout to the policy's new shape
                means = float(obs.tokens_in.mean()), float(obs.tokens_out.mean())
                want = math.ceil(len(pods) * cap.requests_per_s(*means) / shape.requests_per_s(*means) - 1e-9)
                old, old_cap, old_until, cap, pods = pods, cap, k + shape.cold_start_s, shape, []
            elif shape != cap:
                cap = shape
            if want > len(pods):
                cold_starts += not pods and not old
                pod_starts += want - len(pods)
                pods.extend([k + cap.cold_start_s] * (want - len(pods)))
            del pods[want:]
        if old and k >= old_until:
            old = []
        ready = bisect.bisect_right(pods, k)
        held = len(pods) * cap.gpu_share + len(old) * old_cap.gpu_share
        gpu_s += held
        gpu_min[k // 60] += held / 60.0
        prefill, decode, seq_tps = ready * cap.prefill_tps, ready * cap.decode_tps, cap.seq_tps
        slots, kv_cap, serving = ready * cap.max_seqs, ready * cap.kv_tokens, ready
        if old:  # both shapes serve: the pool's figures add up
            prefill, decode = prefill + len(old) * old_cap.prefill_tps, decode + len(old) * old_cap.decode_tps
            seq_tps, serving = min(seq_tps, old_cap.seq_tps), serving + len(old)
            slots, kv_cap = slots + len(old) * old_cap.max_seqs, kv_cap + len(old) * old_cap.kv_tokens
        if serving == 0:
            waited_cold += arr_idx[k] - (arr_idx[k - 1] if k else 0)
        if heap:
            rate = min(seq_tps, max(decode, cap.decode_tps) / len(heap))
            g += rate
            tokens = len(heap) * rate
            while heap and heap[0][0] <= g:
                finish, kv = heapq.heappop(heap)
                kv_used -= kv
                tokens -= g - finish  # a sequence that ends mid-second decodes only what it had left
            busy = tokens / max(decode, cap.decode_tps)  # share of the pool's replica-second spent decoding
        else:
            busy = 0.0
        budget = max(0.0, 1.0 - busy) * prefill
        per_replica = prefill / serving if serving else cap.prefill_tps
        arrived, max_kv = arr_idx[k], max(cap.kv_tokens, old_cap.kv_tokens) if old else cap.kv_tokens
        while head < arrived and budget > 0 and len(heap) < slots:
            need_kv = min(tin[head] + tout[head], max_kv)
            if kv_used + need_kv > kv_cap:
                break
            need = tin[head] - done_head
            if need > budget:
                done_head += budget
                break
            budget -= need
            ttft[head] = max(k + 1 - budget / prefill - at[head], tin[head] / per_replica)
            heapq.heappush(heap, (g + tout[head], need_kv))
            kv_used += need_kv
            head, done_head = head + 1, 0.0
        if k % report == 0:
            print(f"  {name}: {min(100, 100 * k // last)}%", file=sys.stderr, flush=True)
        k += 1
    return Result(gpu_s / 3600.0, ttft, cold_starts, pod_starts, waited_cold, gpu_s / cap.gpu_share / max(k, 1),
                  gpu_min[:(k + 59) // 60])


# ---------------------------------------------------------------- policies
def static_peak(trace: Trace, cap: Capacity, objective_s: float) -> int:
    """The fewest fixed replicas that keep the peak hour within 1 point of the unavoidable TTFT violations.

    It reads the whole trace (the future included): the provisioning baseline, sized for the peak at the
    objective. Searched by simulation of the hour around the peak minute's load, from that load up.
    """
    minute = (trace.arrival_s // 60).astype(np.int64)
    work = cap.work_s(trace)
    per_minute = np.bincount(minute, weights=work)
    peak_min = int(per_minute.argmax())
    lo_s, hi_s = max(0, peak_min * 60 - 1800), peak_min * 60 + 1800
    keep = (trace.arrival_s >= lo_s) & (trace.arrival_s < hi_s)
    part = _trace(trace.arrival_s[keep], trace.input_tokens[keep], trace.output_tokens[keep])
    allowed = floor_pct(part, cap, objective_s) + 1.0

    def ok(n: int) -> bool:
        r = simulate(part, cap, lambda obs: n, f"static-peak search n={n}", n)
        return float((r.ttft_s > objective_s).mean() * 100) <= allowed

    lo = max(1, math.ceil(per_minute[peak_min] / 60))
    hi = lo
    while not ok(hi) and hi < 512:
        lo, hi = hi + 1, hi * 2
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid + 1, hi)
    return hi


def choose_slice(trace: Trace, cap: Capacity, gpu: GpuModel, objective_s: float, min_kv_tokens: float,
                 decide_s: float, prefill_budget_pct: float, min_efficiency: float) -> tuple[Capacity, str]:
    """The replica shape ``ours`` runs on, as the product's MIG policy picks it (``policies.mig``): the smallest
    profile that holds the model with a KV cache of ``min_kv_tokens``, kept only if the requests of the first
    ``decide_s`` (what the service showed before the change) lose at most ``prefill_budget_pct`` points more
    to prefill alone (the slice's slower prefill) than on the whole GPU, and only if it serves at least
    ``min_efficiency`` of the whole GPU's requests/s per GPU share (3 SM slices of 7 hold half the GPU:
    prefill-heavy traffic loses more than it gains). The whole GPU when none qualifies."""
    early = trace.arrival_s < decide_s
    seen = _trace(trace.arrival_s[early], trace.input_tokens[early], trace.output_tokens[early])
    whole = floor_pct(seen, cap, objective_s)
    need_mib = (cap.overhead_kib(gpu) + min_kv_tokens * cap.kv_kib_per_token) / cap.gpu_memory_utilization / 1024
    means = float(seen.input_tokens.mean()), float(seen.output_tokens.mean())
    for profile in fitting_profiles(gpu, need_mib, 0.0):
        on = cap.on_slice(gpu, profile)
        efficiency = on.requests_per_s(*means) / on.gpu_share / cap.requests_per_s(*means)
        if on.gpu_share < 1.0 and efficiency >= min_efficiency and \
                floor_pct(seen, on, objective_s) <= whole + prefill_budget_pct:
            return on, profile.name
    return cap, "whole GPU"


def floor_pct(trace: Trace, cap: Capacity, objective_s: float) -> float:
    """Share (%) of requests whose prefill alone, on one idle replica, exceeds the objective."""
    return float((trace.input_tokens / cap.prefill_tps > objective_s).mean() * 100) if trace.input_tokens.size else 0.0


class Reactive:
    """KEDA + HPA on num_requests_waiting, AverageValue ``target`` per replica (reference.md §10, §12)."""

    def __init__(self, min_replicas: int, target: float = KEDA_WAITING_TARGET, max_replicas: int = 100,
                 cooldown_s: int = 300, down_window_s: int = 300) -> None:
        self.min, self.target, self.max = min_replicas, target, max_replicas
        self.cooldown, self.window = cooldown_s, down_window_s
        self.last_active = 0
        self.recs: list[tuple[int, int]] = []

    def __call__(self, obs: Observed) -> int:
        poll = obs.k % KEDA_POLL_S == 0  # KEDA's own activation check (0 <-> 1) runs at its polling interval
        if poll and obs.waiting > 0:
            self.last_active = obs.k
        if obs.pods == 0:
            return 1 if poll and obs.waiting > 0 else 0
        if self.min == 0 and poll and obs.k - self.last_active >= self.cooldown:
            return 0
        cur = obs.pods  # the HPA reads the metric at every sync: KEDA queries it afresh (useCachedMetrics: false)
        rec = hpa_proposal(cur, float(obs.waiting), self.target)
        return hpa_step(self.recs, obs.k, cur, min(max(rec, max(1, self.min)), self.max), self.window)


def hpa_proposal(cur: int, usage: float, target: float) -> int:
    """One AverageValue metric's replica proposal (reference.md §12): the current count while usage / (target x
    current) is within the tolerance (0.1) of 1, else ceil(usage / target)."""
    if cur > 0 and abs(usage / (target * cur) - 1) <= HPA_TOLERANCE:
        return cur
    return replicas_for(usage, target)


def hpa_step(recs: list[tuple[int, int]], k: int, cur: int, rec: int, window_s: int) -> int:
    """HPA behaviour: scale up at most max(+4, x2) per 15 s; scale down to the highest recommendation in the window."""
    recs.append((k, rec))
    while recs and recs[0][0] < k - window_s:
        recs.pop(0)
    if rec > cur:
        return min(rec, max(cur + 4, 2 * cur))
    return min(cur, max(r for _, r in recs))


class Oracle:
    """Not causal: reads the requests of the next cold start. Replicas for the busiest minute of work ahead
    (prompt / prefill + output / decode replica-seconds per second, the static-peak load) plus the backlog
    drained within one cold start, at the class's headroom: how far a perfect forecast could take ours."""

    def __init__(self, trace: Trace, cap: Capacity, headroom: float, bin_s: int = 60) -> None:
        work = cap.work_s(trace)
        per_sec = np.bincount(trace.arrival_s.astype(np.int64), weights=work)
        self.cum = np.concatenate(([0.0], np.cumsum(per_sec)))
        self.mean_work = float(work.mean()) if work.size else 0.0
        self.cap, self.bin_s, self.busy = cap, bin_s, 1.0 - headroom
        self.recs: list[tuple[int, int]] = []

    def _load(self, start: int) -> float:
        a = min(max(start, 0), self.cum.size - 1)
        return float(self.cum[min(a + self.bin_s, self.cum.size - 1)] - self.cum[a]) / self.bin_s

    def __call__(self, obs: Observed) -> int:
        """The busiest load it must start for now: within a cold start and two syncs, or further ahead where
        the HPA's scale-up limit needs more syncs than that to reach it from today's pods."""
        cold = int(self.cap.cold_start_s)
        ahead = 0.0
        for s in range(obs.k, obs.k + cold + (2 + ORACLE_MAX_RAMP_SYNCS) * HPA_SYNC_S, HPA_SYNC_S):
            load = self._load(s)
            syncs = ramp_syncs(obs.pods, replicas_for(load, self.busy))
            if s - obs.k < cold + (2 + syncs) * HPA_SYNC_S:
                ahead = max(ahead, load)
        backlog = obs.waiting * self.mean_work / self.cap.cold_start_s
        want = max(1, hpa_proposal(obs.pods, ahead + backlog, self.busy))
        return hpa_step(self.recs, obs.k, obs.pods, want, 300) if obs.pods else want


ORACLE_MAX_RAMP_SYNCS = 8  # x256 at the HPA's scale-up limit: no jump in these traces needs more


def ramp_syncs(pods: int, need: int) -> int:
    """HPA syncs from ``pods`` to ``need`` at the scale-up limit (:func:`hpa_step`: max(+4, x2) per sync); from
    zero the first sync asks for all of it."""
    if need <= pods:
        return 0
    if pods == 0:
        return 1
    n = 0
    while pods < need:
        pods, n = max(pods + 4, 2 * pods), n + 1
    return n


class Ours:
    """The product's replica policy, refitted on the past every ``refit_s`` and applied every 15 s."""

    def __init__(self, cap: Capacity, cls: WorkloadClass, refit_s: int, settings: ScalingSettings,
                 bin_s: int = 60, history_s: int = 7 * 86_400, whole: Capacity | None = None) -> None:
        self.cap, self.cls, self.refit_s, self.settings = cap, cls, refit_s, settings
        self.whole = whole  # the whole GPU a slice gives way to (policies.mig.missed_too_often); None: no change
        self.escalated_s: float | None = None
        self.bin_s, self.history_s = bin_s, history_s
        self.plan: ScalingPlan | None = None
        self.band = np.array([0.0])
        self.band_start = 0
        self.next_refit = 0
        self.recs: list[tuple[int, int]] = []
        self.last_arrival = -10**9
        self.refits = 0
        self.pending_served = 0
        self.ttft_p95 = np.array([])  # per step, by first-token time: what the TTFT histogram gives
        self.pending = pd.DataFrame({"step": np.array([], dtype=np.int64), "ttft": np.array([])})
        self.ready_sum = np.zeros(0)  # ready replicas summed over the syncs of each step, and their count
        self.ready_n = np.zeros(0)
        self.pods_sum = np.zeros(0)  # pods (starting or ready) summed likewise: kube-state-metrics' count

    @property
    def shape_since(self) -> pd.Timestamp | None:
        """When the pool took its current shape (the move's start, as its ReplicaSet's creation): the knee and
        the error budget read from here on (``Workload.shape_since``)."""
        return None if self.escalated_s is None else pd.Timestamp(self.escalated_s, unit="s", tz="UTC")

    def __call__(self, obs: Observed) -> int:
        step = obs.k // self.bin_s
        if step >= self.ready_sum.size:
            grow = step + 1 - self.ready_sum.size + 1440
            self.ready_sum, self.ready_n = np.pad(self.ready_sum, (0, grow)), np.pad(self.ready_n, (0, grow))
            self.pods_sum = np.pad(self.pods_sum, (0, grow))
        self.ready_sum[step] += obs.ready
        self.ready_n[step] += 1
        self.pods_sum[step] += obs.pods
        if obs.k >= self.next_refit:
            self._refit(obs)
        recent = obs.arrivals_per_s[-self.bin_s:]
        if recent.any():
            self.last_arrival = obs.k - (recent.size - 1 - int(np.flatnonzero(recent)[-1]))
        plan = self.plan
        if plan is None:  # no plan yet: KEDA's usual 5 waiting per replica
            return max(1, math.ceil(obs.waiting / KEDA_WAITING_TARGET), obs.pods)
        ahead = self._band_ahead(obs.k)  # the external scaler's metric
        # the rate trigger: arrivals, as policies.replicas.arrival_rate_query reads them (finished + growth); both
        # it and the waiting trigger read vLLM, whose metrics come from serving replicas: while none serves (a
        # wake from zero) they read nothing, 0 for KEDA, and the requests held at zero only activate the service
        observed = float(obs.arrivals_per_s[-plan.rate_window_s:].sum()) / plan.rate_window_s if obs.serving else 0.0
        waiting = obs.waiting if obs.serving else 0
        want = max(hpa_proposal(obs.pods, ahead, plan.target_per_replica),
                   hpa_proposal(obs.pods, observed, plan.target_per_replica),
                   hpa_proposal(obs.pods, waiting, plan.waiting_per_replica or KEDA_WAITING_TARGET))
        if plan.scale_to_zero:
            if obs.pods == 0:  # KEDA activates 0 -> 1 at its polling interval: forecast ahead, or a request held
                active = ahead > plan.activation_threshold or obs.waiting > 0
                return 1 if active and obs.k % KEDA_POLL_S == 0 else 0
            idle = ahead <= plan.activation_threshold and obs.waiting == 0
            if idle and obs.k - self.last_arrival >= plan.cooldown_s:
                return 0
            want = max(want, 1)
        want = min(max(want, plan.min_replicas), plan.max_replicas)
        if obs.pods == 0:
            return want
        window = scale_down_window_s(plan, self.cap.cold_start_s)
        return hpa_step(self.recs, obs.k, obs.pods, want, window)

    def _band_ahead(self, k: int) -> float:
        """Largest forecast band value over the next cold start (the horizon's last value beyond it)."""
        lo = max(0, (k - self.band_start) // self.bin_s)
        hi = max(lo + 1, (k + int(self.cap.cold_start_s) - self.band_start) // self.bin_s + 1)
        part = self.band[min(lo, self.band.size - 1): hi]
        return float(part.max()) if part.size else float(self.band[-1])

    def _refit(self, obs: Observed) -> None:
        self.next_refit = obs.k + self.refit_s
        full = obs.k // self.bin_s
        if full < 1 or obs.tokens_in.size == 0:
            return
        start = max(0, full - self.history_s // self.bin_s)
        counts = obs.arrivals_per_s[start * self.bin_s: full * self.bin_s].reshape(-1, self.bin_s).sum(axis=1)
        index = pd.to_datetime((np.arange(start, full) * self.bin_s), unit="s", utc=True)
        rate = pd.Series(counts / self.bin_s, index=index)
        self._observe_ttft(obs, full)
        history = ReplicaHistory(float(self.bin_s), rate, pd.Series(self.ttft_p95[start:full], index=index),
                                 replicas=pd.Series(self._serving(start, full), index=index))
        capacity = self.cap.requests_per_s(float(obs.tokens_in.mean()), float(obs.tokens_out.mean()))
        workload = Workload(WorkloadRef("replay", "Deployment", "vllm"), Allocation(Sharing.EXCLUSIVE, gpus=1),
                            annotations={CAPACITY_ANNOTATION: f"{capacity:.6g}"}, cold_start_s=self.cap.cold_start_s,
                            shape_since=self.shape_since)
        horizon = (self.refit_s + int(self.cap.cold_start_s)) // self.bin_s + 2
        forecasts = []
        self.band, self.band_start = np.array([0.0]), full * self.bin_s
        with contextlib.suppress(NotEnoughHistory):  # as the pipeline: on any history, its band widened while short
            forecasts.append(forecast_series(rate, horizon, metric="request_rate_per_s"))
        cls = Classification(self.cls, 1.0, ("--class",), "annotation")
        plan = scaling_plan(workload, history, cls, forecasts, self.settings, self.plan)
        self.plan = None if isinstance(plan, NoScalingPlan) else plan
        if forecasts and self.plan is not None and self.plan.demand_source == "forecast":  # as serve.targets
            self.band = forecasts[0].frame[BAND_BY_CLASS[self.cls]].clip(lower=0).to_numpy(dtype="float64")
        self.refits += 1
        self._escalate(obs)

    def _serving(self, lo: int, hi: int) -> np.ndarray:
        """Serving replicas of steps ``lo:hi`` as the product collects them (``m.SERVING_REPLICAS``): the pods that
        report vLLM metrics (ready ones, averaged over the step's syncs), 0 only where no pod existed at all
        (``snapshot.fill_at_zero`` on kube-state-metrics' count), NaN where pods were starting and none served
        (a cold start) or no sync has run yet. So a wake's run at zero ends when its pod is created."""
        with np.errstate(invalid="ignore", divide="ignore"):
            ready = self.ready_sum[lo:hi] / self.ready_n[lo:hi]
        return np.where((ready == 0) & (self.pods_sum[lo:hi] > 0), np.nan, ready)

    def _escalate(self, obs: Observed) -> None:
        """Whole GPUs instead of the slice where the right-size policy would give them (``policies.mig``): over
        the error-budget window, once a day of history exists (``policy.min_history_s``), the requests over the
        objective, as the collector reads them from vLLM's TTFT histogram, against the requests that arrived;
        the steps of a wake from zero left out of both, as ``over_objective_share`` leaves them out."""
        s = self.settings
        if self.whole is None or self.cls is WorkloadClass.BATCH or obs.k < PolicySettings().min_history_s:
            return
        window = int(s.error_budget_window_s)
        start = max(0, obs.k - window)
        first = obs.served_arrival_s + obs.served_ttft_s
        done = first >= start
        lo, hi = start // self.bin_s, (obs.k + 1) // self.bin_s + 1  # a first token comes within k + 1
        woke = after_zero(pd.Series(self._serving(lo, hi)), s.wake_s(self.cap.cold_start_s),
                          self.bin_s).to_numpy(dtype=bool)
        arrived = float(obs.arrivals_per_s[start:obs.k][~woke[np.arange(start, obs.k) // self.bin_s - lo]].sum())
        at = np.minimum((first[done] // self.bin_s).astype(np.int64) - lo, woke.size - 1)
        recent = obs.served_ttft_s[done][~woke[at]]
        share = histogram_over(recent, s.ttft_objective_s) / arrived if arrived else None
        if missed_too_often(share, s.ttft_error_budget, s.whole_gpu_over_budget):
            self.cap, self.whole, self.escalated_s = self.whole, None, float(obs.k)
            self.recs.clear()  # the HPA's recommendations were counts of the old shape

    def _observe_ttft(self, obs: Observed, full: int) -> None:
        """p95 TTFT of each step before ``full``, by first-token time, from the requests served since the last
        refit (a step is complete once the sync is past it: a request admitted in second k has its first
        token within k + 1)."""
        done = self.pending_served
        first = obs.served_arrival_s[done:] + obs.served_ttft_s[done:]
        self.pending_served = obs.served_ttft_s.size
        new = pd.DataFrame({"step": (first // self.bin_s).astype(np.int64), "ttft": obs.served_ttft_s[done:]})
        frame = pd.concat([self.pending, new], ignore_index=True) if len(self.pending) else new
        complete = frame["step"] < full
        if self.ttft_p95.size < full:
            self.ttft_p95 = np.pad(self.ttft_p95, (0, full - self.ttft_p95.size), constant_values=np.nan)
        if complete.any():
            p95 = frame[complete].groupby("step")["ttft"].quantile(0.95)
            self.ttft_p95[p95.index.to_numpy()] = p95.to_numpy()
        self.pending = frame[~complete]


def histogram_over(ttft_s: np.ndarray, objective_s: float) -> float:
    """How many of these TTFTs exceed the objective as vLLM's histogram tells it: all of them less those its
    buckets put within the objective (``collectors.prometheus.queries.within_objective``, as the collector's
    query reads them)."""
    within = sum(float((ttft_s <= bound).sum()) * weight for bound, weight in within_objective(objective_s))
    return float(ttft_s.size - within)


# ---------------------------------------------------------------- command line
LOADERS = {"azure": load_azure, "mooncake": load_mooncake}


JUMP_FACTOR = 3.0  # a jump: a minute with more than 3x the mean arrivals per minute of the 10 before it
JUMP_LOOKBACK_MIN = 10


def after_jumps(arrival_s: np.ndarray, within_s: float) -> np.ndarray:
    """Per request: whether it arrived within ``within_s`` (a cold start) of the start of a demand jump, the
    requests no replica started after the jump could serve. A jump is a minute with more than
    ``JUMP_FACTOR`` times the mean arrivals per minute of the ``JUMP_LOOKBACK_MIN`` before it (at least
    one a minute: a service waking from idle jumps too), after the trace's first ``JUMP_LOOKBACK_MIN``; the
    minutes that follow one while the lookback catches up belong to it."""
    if not arrival_s.size:
        return np.zeros(0, dtype=bool)
    minute = (arrival_s // 60).astype(np.int64)
    per_min = np.bincount(minute).astype("float64")
    before = np.convolve(np.concatenate((np.zeros(JUMP_LOOKBACK_MIN), per_min)), np.ones(JUMP_LOOKBACK_MIN),
                         "valid")[:per_min.size] / JUMP_LOOKBACK_MIN  # mean of the minutes before each one
    jump = per_min > JUMP_FACTOR * np.maximum(before, 1.0)
    jump[:JUMP_LOOKBACK_MIN] = False  # the trace's start is no jump: every policy starts warm
    first = jump & ~np.concatenate(([False], jump[:-1]))  # a step lifts the next minutes too: one jump
    starts = np.flatnonzero(first) * 60.0
    if not starts.size:
        return np.zeros(arrival_s.size, dtype=bool)
    last = starts[np.maximum(np.searchsorted(starts, arrival_s, side="right") - 1, 0)]  # latest jump at or before
    return (arrival_s >= last) & (arrival_s < last + within_s)


def summary(name: str, r: Result, objective_s: float, floor: float, jumps: np.ndarray | None = None) -> str:
    """The policy's line; with ``jumps`` (:func:`after_jumps`) also the share of its misses that arrived within
    a cold start of a demand jump (``misses_after_jumps_pct``): misses no replica started after the jump could
    have prevented, short of holding the jump's capacity beforehand. A lower bound of what jumps cost: the
    requests after that cold start that wait behind its backlog are not counted."""
    n = r.ttft_s.size
    missed = r.ttft_s > objective_s
    over = float(missed.mean() * 100) if n else 0.0
    p99 = float(np.quantile(r.ttft_s, 0.99)) if n else 0.0
    at_jumps = "" if jumps is None else \
        f" misses_after_jumps_pct={100.0 * (missed & jumps).sum() / missed.sum() if missed.any() else 0.0:.1f}"
    return (f"policy={name} gpu_hours={r.gpu_hours:.2f} ttft_violation_pct={over:.2f} cold_starts={r.cold_starts} "
            f"waited_on_cold_start={r.waited_on_cold_start} pod_starts={r.pod_starts} p99_ttft_s={p99:.2f} "
            f"mean_replicas={r.mean_pods:.2f} requests={n} unavoidable_pct={floor:.2f}{at_jumps}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    d = Capacity()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trace", type=Path, required=True)
    p.add_argument("--format", choices=["azure", "mooncake", "servegen"], required=True)
    p.add_argument("--ttft-objective-s", type=float, default=2.0)
    p.add_argument("--class", dest="cls", choices=[c.value for c in WorkloadClass], default="real-time",
                   help="class 'ours' sizes the trace as (real-time: hi_95 band, 30%% headroom, never to zero unless "
                   "--wake-budget-frac)")
    p.add_argument("--refit-s", type=int, default=300, help="refit period of 'ours': the controller's interval "
                   "(its default, 300 s, publishes a new forecast every 5 minutes)")
    p.add_argument("--policies", default="static-peak,reactive,reactive-zero,reactive-slice,ours,oracle",
                   help="oracle reads the future: a bound on what a forecast could buy, not a contender")
    p.add_argument("--seed", type=int, default=0, help="ServeGen arrivals and token lengths")
    p.add_argument("--chart", type=Path, help="also draw demand, GPUs held and misses over time per policy to this "
                   ".svg, .png or .pdf file")
    p.add_argument("--servegen-mean-input", type=float, default=1000.0)
    p.add_argument("--servegen-mean-output", type=float, default=250.0)
    p.add_argument("--gpu", default="H100-80GB", help="GPU model (policies/data/gpus.yaml) of the capacity figures")
    p.add_argument("--slice", default="auto", help="replica shape of 'ours', 'reactive-slice' and 'oracle': auto "
                   "(the smallest MIG profile that fits, see choose_slice), none (whole GPU) or a profile name")
    p.add_argument("--min-kv-tokens", type=float, default=32_768.0, help="KV cache a slice must hold (auto)")
    p.add_argument("--slice-prefill-budget-pct", type=float, default=0.25, help="points of requests a slice may add "
                   "to those whose prefill alone exceeds the objective (auto; of the 1 point the goal allows)")
    p.add_argument("--slice-min-efficiency", type=float, default=0.9, help="requests/s per GPU share a slice must "
                   "keep, as a share of the whole GPU's (auto)")
    p.add_argument("--whole-gpu-over-budget", type=float,
                   default=ScalingSettings().whole_gpu_over_budget, help="'ours' on a slice moves to whole GPUs "
                   "past this many times its TTFT error budget (scaling.whole_gpu_over_budget; 0: never)")
    p.add_argument("--wake-budget-frac", type=float, default=ScalingSettings().wake_budget_frac,
                   help="'ours' may take a real-time service to zero where its past wakes cost at most this share "
                   "of the TTFT error budget (scaling.wake_budget_frac, opt-in; default: never)")
    for field in CAPACITY_FLAGS:
        value = getattr(d, field)
        p.add_argument(f"--{field.replace('_', '-')}", type=type(value), default=value)
    args = p.parse_args(argv)
    if min(getattr(args, f) for f in CAPACITY_FLAGS) <= 0 or args.ttft_objective_s <= 0 or args.refit_s <= 0:
        p.error("capacity figures, the TTFT objective and the refit period must be positive")
    if args.whole_gpu_over_budget is not None and args.whole_gpu_over_budget < 0:
        p.error("--whole-gpu-over-budget must be 0 (never) or more")
    if args.wake_budget_frac is not None and not 0 <= args.wake_budget_frac <= 1:
        p.error("--wake-budget-frac must lie in [0, 1]")
    problem = chart_path_problem(args.chart)
    if problem:
        p.error(problem)
    return args


CAPACITY_FLAGS = [f for f in vars(Capacity()) if f != "gpu_share"]


def replica_shape(args: argparse.Namespace, trace: Trace, cap: Capacity) -> tuple[Capacity, str]:
    """The capacity 'ours' runs on from ``--slice``; a one-line ValueError for an unknown GPU or profile."""
    if args.slice == "none":
        return cap, "whole GPU"
    gpu = load_catalogue().get(args.gpu)
    if gpu is None or not gpu.supports_mig:
        raise ValueError(f"--gpu {args.gpu}: not a MIG-capable GPU model in policies/data/gpus.yaml")
    if args.slice == "auto":
        return choose_slice(trace, cap, gpu, args.ttft_objective_s, args.min_kv_tokens, 3600.0,
                            args.slice_prefill_budget_pct, args.slice_min_efficiency)
    profile = gpu.profile(args.slice)
    if profile is None:
        raise ValueError(f"--slice {args.slice}: {args.gpu} has profiles {', '.join(p.name for p in gpu.profiles)}")
    on = cap.on_slice(gpu, profile)
    if on.kv_tokens <= 0:
        raise ValueError(f"--slice {args.slice}: the model does not fit ({on.kv_tokens:.0f} KV tokens left)")
    return on, profile.name


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.trace.is_file():
        print(f"replay: trace {args.trace} not found: skipped (see ../shared/data/README.md)")
        return 0
    try:
        if args.format == "servegen":
            trace = load_servegen(args.trace, args.seed, args.servegen_mean_input, args.servegen_mean_output)
        else:
            trace = LOADERS[args.format](args.trace)
    except (ValueError, KeyError, TypeError, json.JSONDecodeError, pd.errors.ParserError) as exc:
        print(f"error: {args.trace} is not a {args.format} trace: {exc}", file=sys.stderr)
        return 2
    if trace.arrival_s.size == 0:
        print(f"replay: {args.trace} holds no requests: nothing to replay")
        return 0
    cap = Capacity(**{f: getattr(args, f) for f in CAPACITY_FLAGS})
    try:
        shaped, shape = replica_shape(args, trace, cap)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    span = float(trace.arrival_s[-1])
    print(f"# {trace.arrival_s.size} requests over {span / 3600:.2f} h; mean tokens in {trace.input_tokens.mean():.0f} "
          f"out {trace.output_tokens.mean():.0f}; capacity {cap}; objective {args.ttft_objective_s:g} s")
    print(f"# ours, reactive-slice and oracle run on {shape}: {shaped}")
    policies: dict[str, tuple[Callable[[], Policy], Capacity]] = {
        "static-peak": (lambda: lambda obs: warm, cap),
        "reactive": (lambda: Reactive(min_replicas=1), cap),
        "reactive-zero": (lambda: Reactive(min_replicas=0), cap),
        "reactive-slice": (lambda: Reactive(min_replicas=1), shaped),
        "reactive-bounded": (lambda: Reactive(min_replicas=1, max_replicas=warm), cap),
        "ours": (lambda: Ours(shaped, WorkloadClass(args.cls), args.refit_s,
                              ScalingSettings(ttft_objective_s=args.ttft_objective_s,
                                              whole_gpu_over_budget=args.whole_gpu_over_budget or None,
                                              wake_budget_frac=args.wake_budget_frac),
                              whole=cap if shaped != cap else None), shaped),
        "oracle": (lambda: Oracle(trace, shaped, ScalingSettings().headroom_frac.get(args.cls, 0.0)), shaped),
    }
    unknown = [n for n in args.policies.split(",") if n not in policies]
    if unknown:
        print(f"error: unknown policy {unknown[0]!r} (known: {', '.join(policies)})", file=sys.stderr)
        return 2
    warm = static_peak(trace, cap, args.ttft_objective_s)  # every policy starts at the provisioned size
    floor = floor_pct(trace, cap, args.ttft_objective_s)
    jumps = after_jumps(trace.arrival_s, cap.cold_start_s)
    means = float(trace.input_tokens.mean()), float(trace.output_tokens.mean())
    results = {}
    moves: dict[str, float] = {}  # a policy's change of shape, for the chart
    for name in args.policies.split(","):
        make, capacity = policies[name]
        start = math.ceil(warm * cap.requests_per_s(*means) / capacity.requests_per_s(*means) - 1e-9)
        policy = make()
        results[name] = simulate(trace, capacity, policy, name, start)
        print(summary(name, results[name], args.ttft_objective_s, floor, jumps), flush=True)
        if isinstance(policy, Ours) and policy.escalated_s is not None:
            moves[f"{name}: {shape} → whole GPUs"] = policy.escalated_s
            print(f"# {name} moved from {shape} to whole GPUs at {policy.escalated_s / 86_400:.2f} d: over "
                  f"{policy.settings.whole_gpu_over_budget:g}x its TTFT error budget (policies.mig.missed_too_often)")
    for name in ("ours", "oracle"):
        if {name, "static-peak", "reactive"} <= results.keys():
            print(verdict(name, results, args.ttft_objective_s, floor))
    if args.chart is not None:
        fig = replay_figure(trace.arrival_s, {k: (r.gpus_per_min, r.ttft_s) for k, r in results.items()},
                            args.ttft_objective_s, f"{args.trace.name}: ours on {shape}", moves)
        try:
            save(fig, args.chart, args.trace.name)
        except OSError as exc:
            print(f"error: --chart {args.chart}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        print(f"# chart: {args.chart}")
    return 0


def verdict(name: str, results: dict[str, Result], objective_s: float, floor: float) -> str:
    """The goal line: >= 50% fewer GPU-hours than static-peak, >= 15% fewer than reactive, <= 1 point of
    requests over the objective beyond those whose prefill alone exceeds it (``unavoidable_pct``)."""
    gpu = results[name].gpu_hours
    vs = {k: 100 * (1 - gpu / results[k].gpu_hours) for k in ("static-peak", "reactive")}
    over = float((results[name].ttft_s > objective_s).mean() * 100) - floor
    met = vs["static-peak"] >= 50 and vs["reactive"] >= 15 and over <= 1.0
    return (f"# {name} uses {vs['static-peak']:.1f}% fewer GPU-hours than static-peak, {vs['reactive']:.1f}% fewer "
            f"than reactive, {over:.2f} points over the objective beyond the unavoidable: goal "
            f"{'met' if met else 'NOT met'} {GOAL_TERMS}")


if __name__ == "__main__":
    sys.exit(main())
