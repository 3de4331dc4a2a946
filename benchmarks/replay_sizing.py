"""Sizing read from the trace before the replay runs: the static-peak replica count (the provisioning
baseline, which sees the whole trace) and the MIG slice ``ours`` runs on, chosen from the first hour as the
product's MIG policy would.
"""

from __future__ import annotations

import math

import numpy as np
from replay_capacity import Capacity, floor_pct
from replay_ours import histogram_over
from replay_sim import simulate
from replay_trace import Trace, make_trace, per_bin

from policies.mig import fitting_profiles
from recommender.core.catalogue import GpuModel


def static_peak(trace: Trace, cap: Capacity, objective_s: float) -> int:
    """The fewest fixed replicas that keep the peak hour within 1 point of the unavoidable TTFT violations.

    It reads the whole trace (the future included): the provisioning baseline, sized for the peak at the
    objective. Searched by simulation of the hour around the peak minute's load, from that load up.
    """
    per_minute = work_per_minute(trace, cap)
    peak_min = int(per_minute.argmax())
    lo_s, hi_s = max(0, peak_min * 60 - 1800), peak_min * 60 + 1800
    keep = (trace.arrival_s >= lo_s) & (trace.arrival_s < hi_s)
    part = make_trace(trace.arrival_s[keep], trace.input_tokens[keep], trace.output_tokens[keep])
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


def work_per_minute(trace: Trace, cap: Capacity) -> np.ndarray:
    """Replica-seconds of work arriving in each minute of the (non-empty) trace (``per_bin``)."""
    return per_bin(trace.arrival_s, 60, int(trace.arrival_s[-1] // 60) + 1,
                   lambda part: cap.work_s(trace.input_tokens[part], trace.output_tokens[part]))


def choose_slice(trace: Trace, cap: Capacity, gpu: GpuModel, objective_s: float, min_kv_tokens: float,
                 decide_s: float, prefill_budget_pct: float, min_efficiency: float,
                 clump_bar: float | None = None, before: int = 1) -> tuple[Capacity, str]:
    """The replica shape ``ours`` runs on, as the product's MIG policy picks it (``policies.mig``): the smallest
    profile that holds the model with a KV cache of ``min_kv_tokens``, kept only if the requests of the first
    ``decide_s`` (what the service showed before the change) lose at most ``prefill_budget_pct`` points more
    to prefill alone (the slice's slower prefill) than on the whole GPU, and only if it serves at least
    ``min_efficiency`` of the whole GPU's requests/s per GPU share (3 SM slices of 7 hold half the GPU:
    prefill-heavy traffic loses more than it gains). The whole GPU when none qualifies.

    ``clump_bar`` (a share; None: not checked) is a what-if, a check the product does not make: a profile is
    also refused where more than that share of those requests, served as before the change (``before`` whole
    GPUs), had a TTFT over the objective x the slice's SM share, as vLLM's histogram tells it
    (``histogram_over``). A slice prefills at that share of the GPU's speed, a request and the prefills it
    queued behind alike, so a clump that a whole GPU clears in time misses on a slice in its place."""
    early = trace.arrival_s < decide_s
    seen = make_trace(trace.arrival_s[early], trace.input_tokens[early], trace.output_tokens[early])
    whole = floor_pct(seen, cap, objective_s)
    need_mib = (cap.overhead_kib(gpu) + min_kv_tokens * cap.kv_kib_per_token) / cap.gpu_memory_utilization / 1024
    means = float(seen.input_tokens.mean()), float(seen.output_tokens.mean())
    ttft_whole: np.ndarray | None = None
    for profile in fitting_profiles(gpu, need_mib, 0.0):
        on = cap.on_slice(gpu, profile)
        efficiency = on.requests_per_s(*means) / on.gpu_share / cap.requests_per_s(*means)
        if on.gpu_share < 1.0 and efficiency >= min_efficiency and \
                floor_pct(seen, on, objective_s) <= whole + prefill_budget_pct:
            if clump_bar is not None:
                if ttft_whole is None:
                    ttft_whole = simulate(seen, cap, lambda obs: before, "slice check, whole GPUs", before).ttft_s
                over = histogram_over(ttft_whole, objective_s * on.prefill_tps / cap.prefill_tps)
                if over > clump_bar * ttft_whole.size:
                    continue
            return on, profile.name
    return cap, "whole GPU"
