"""The replay's capacity model of one vLLM replica: prefill and decode tokens/s, KV cache tokens, sequence
slots and cold start, on a whole GPU or scaled onto a MIG slice; what a request costs in replica-seconds, the
requests/s a replica sustains, and the requests whose prefill alone exceeds the TTFT objective (the floor no
policy can avoid). ``replay.py``'s docstring states the figures and where they come from.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from replay_trace import Trace, minute_spans

from recommender.core.catalogue import GpuModel, MigProfile


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

    def work_s(self, tokens_in: np.ndarray, tokens_out: np.ndarray) -> np.ndarray:
        """Replica-seconds each request costs: prompt at the prefill rate plus output at the decode rate."""
        return tokens_in / self.prefill_tps + tokens_out / self.decode_tps

    def requests_per_s(self, mean_in: float, mean_out: float) -> float:
        """Sustained requests/s of one replica for these token means: the tightest of compute, slots, KV."""
        busy_s = mean_out / self.seq_tps  # how long one request holds a slot and its KV
        compute = 1.0 / (mean_in / self.prefill_tps + mean_out / self.decode_tps)
        return min(compute, self.max_seqs / busy_s, self.kv_tokens / ((mean_in + mean_out) * busy_s))


def floor_pct(trace: Trace, cap: Capacity, objective_s: float) -> float:
    """Share (%) of requests whose prefill alone, on one idle replica, exceeds the objective."""
    n = trace.input_tokens.size
    over = sum(int(np.count_nonzero(trace.input_tokens[part] / cap.prefill_tps > objective_s))
               for part in minute_spans(trace.arrival_s))
    return over / n * 100 if n else 0.0
