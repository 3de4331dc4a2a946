"""The replay's simulator: the replica pool stepped second by second against a trace, requests admitted
FIFO within the pool's prefill, decode, slot and KV budgets, a policy asked for a replica count at every HPA
sync (15 s) with only the past visible to it (``Observed``), and a change of replica shape rolled out as a
Deployment would. It returns GPU-hours, each request's TTFT and the pod starts (``Result``).
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from replay_capacity import Capacity
from replay_trace import Trace, per_bin

HPA_SYNC_S = 15
CHUNK = 1 << 20  # requests whose figures the loop holds as Python floats at once


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


def simulate(trace: Trace, cap: Capacity, policy: Policy, name: str, warm: int = 1, skip_idle: bool = True) -> Result:
    """Step the replica pool second by second (``warm`` replicas ready at 0); requests are admitted FIFO.

    ``skip_idle`` steps an idle stretch (no request queued or running, no pod starting or leaving) up to the next
    HPA sync or arrival in one go: only GPU time passes there, added as the plain loop (False) adds it, so the
    result is the same to the bit, the time a sparse trace takes is not.

    A policy with a ``cap`` attribute may change the replica shape: when it differs from the pool's, the change
    rolls out as a Deployment with maxSurge 100% would: pods of the new shape start for the same requests/s, the
    old pods serve until they are ready, then go; the policy's count is in the new shape from then on. While
    both serve, the pool's figures add up and a sequence decodes at the slower shape's speed."""
    n = trace.arrival_s.size
    last = math.ceil(trace.arrival_s[-1]) + 1 if n else 1
    arr_idx = np.searchsorted(trace.arrival_s, np.arange(1, last + 3601), side="left").tolist()
    per_sec = per_bin(trace.arrival_s, 1, last + 3600)
    # the next CHUNK requests' figures as Python floats (the loop reads them one by one, from the head on): a list
    # of the whole trace would hold ~100 bytes a request, which a client of 100 M requests cannot afford
    base, lim, tin, tout, at = 0, 0, [], [], []
    ttft = np.full(n, np.inf)
    served: list[float] = []  # TTFT of the requests served since the last sync, copied into ttft at each sync
    pods: list[float] = [-cap.cold_start_s] * warm  # ready times, ascending
    old: list[float] = []  # the previous shape's pods during a rollout
    old_cap, old_until = cap, 0.0
    heap: list[tuple[float, float]] = []
    head, done_head, g, kv_used, gpu_s = 0, 0.0, 0.0, 0.0, 0.0
    cold_starts = pod_starts = waited_cold = 0
    k, ready, synced = 0, warm, 0
    report = max(1, last // 20)
    gpu_min = [0.0] * ((last + 3600) // 60 + 1)  # a list: cheaper per second than an array, the same sums
    heappush, heappop, bisect_right = heapq.heappush, heapq.heappop, bisect.bisect_right
    c_prefill, c_decode, c_seq, c_slots, c_kv, c_share = (cap.prefill_tps, cap.decode_tps, cap.seq_tps, cap.max_seqs,
                                                          cap.kv_tokens, cap.gpu_share)
    while k < last + 3600 and (k < last or head < n or heap):
        if k % HPA_SYNC_S == 0:
            ttft[synced:head], synced = served, head
            served = []
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
            c_prefill, c_decode, c_seq, c_slots, c_kv, c_share = (cap.prefill_tps, cap.decode_tps, cap.seq_tps,
                                                                  cap.max_seqs, cap.kv_tokens, cap.gpu_share)
            if want > len(pods):
                cold_starts += not pods and not old
                pod_starts += want - len(pods)
                pods.extend([k + cap.cold_start_s] * (want - len(pods)))
            del pods[want:]
        if old and k >= old_until:
            old = []
        ready = bisect_right(pods, k)
        held = len(pods) * c_share + len(old) * old_cap.gpu_share
        if skip_idle and not heap and head == arr_idx[k] and ready == len(pods) and not old:
            # idle until the next sync or arrival: the same additions in the same order as the full step
            end = min((k // HPA_SYNC_S + 1) * HPA_SYNC_S, bisect_right(arr_idx, head, k),
                      last if head == n else last + 3600)
            per_min = held / 60.0
            for j in range(k, end):
                gpu_s += held
                gpu_min[j // 60] += per_min
            for j in range(-(-k // report) * report, end, report):
                print(f"  {name}: {min(100, 100 * j // last)}%", file=sys.stderr, flush=True)
            k = end
            continue
        gpu_s += held
        gpu_min[k // 60] += held / 60.0
        prefill, decode, seq_tps = ready * c_prefill, ready * c_decode, c_seq
        slots, kv_cap, serving = ready * c_slots, ready * c_kv, ready
        if old:  # both shapes serve: the pool's figures add up
            prefill, decode = prefill + len(old) * old_cap.prefill_tps, decode + len(old) * old_cap.decode_tps
            seq_tps, serving = min(seq_tps, old_cap.seq_tps), serving + len(old)
            slots, kv_cap = slots + len(old) * old_cap.max_seqs, kv_cap + len(old) * old_cap.kv_tokens
        if serving == 0:
            waited_cold += arr_idx[k] - (arr_idx[k - 1] if k else 0)
        if heap:
            pool_decode = max(decode, c_decode)
            rate = min(seq_tps, pool_decode / len(heap))
            g += rate
            tokens = len(heap) * rate
            while heap and heap[0][0] <= g:
                finish, kv = heappop(heap)
                kv_used -= kv
                tokens -= g - finish  # a sequence that ends mid-second decodes only what it had left
            busy = tokens / pool_decode  # share of the pool's replica-second spent decoding
        else:
            busy = 0.0
        budget = max(0.0, 1.0 - busy) * prefill
        per_replica = prefill / serving if serving else c_prefill
        arrived, max_kv = arr_idx[k], max(c_kv, old_cap.kv_tokens) if old else c_kv
        running = len(heap)
        while head < arrived and budget > 0 and running < slots:
            if head >= lim:
                base, lim = head, min(n, head + CHUNK)
                tin, tout = trace.input_tokens[base:lim].tolist(), trace.output_tokens[base:lim].tolist()
                at = trace.arrival_s[base:lim].tolist()
            i = head - base
            need_kv = min(tin[i] + tout[i], max_kv)
            if kv_used + need_kv > kv_cap:
                break
            need = tin[i] - done_head
            if need > budget:
                done_head += budget
                break
            budget -= need
            served.append(max(k + 1 - budget / prefill - at[i], tin[i] / per_replica))
            heappush(heap, (g + tout[i], need_kv))
            kv_used += need_kv
            head, done_head, running = head + 1, 0.0, running + 1
        if k % report == 0:
            print(f"  {name}: {min(100, 100 * k // last)}%", file=sys.stderr, flush=True)
        k += 1
    ttft[synced:head] = served
    return Result(gpu_s / 3600.0, ttft, cold_starts, pod_starts, waited_cold, gpu_s / cap.gpu_share / max(k, 1),
                  np.array(gpu_min[:(k + 59) // 60]))
