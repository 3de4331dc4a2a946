"""``past-peak``: not a policy, a reference for what a policy that holds at most its past peak can reach.

It reads only the past, yet never gives back a replica a peak took. On whole GPUs (no slice's prefill to wait
on), it holds never fewer than the most any earlier minute's work needed (the static-peak load: prompt / prefill
+ output / decode replica-seconds per second, at the class's headroom), and ours' cap (static peak's count, or
the product's default cap where higher) at once, in one sync, while requests wait; each held through the HPA's
shortest scale-down window, the pool it starts with too. That count is hindsight. So the requests it leaves over
the objective come from rises above every earlier minute's load: each waits a cold start, then a backlog drains.
A policy that holds no more than its past peak before such a rise leaves those too; only standing capacity above
the past peak, or foreknowledge, serves them. Where past-peak is over issue 43's 3%, reacting faster will not meet
that goal. Not a strict bound: a policy that drains a backlog otherwise can do better.
"""

from __future__ import annotations

import numpy as np
from replay_capacity import Capacity
from replay_sim import Observed

from policies.autoscalerobjects import base_scale_down_window_s
from policies.replicas import replicas_for


class PastPeak:
    """At each sync: max(1, the most replicas any ``window_s`` of past arrivals needed at ``busy`` (1 - headroom)
    utilisation on ``cap``, ``burst`` while any request waits), held as the HPA holds a recommendation through its
    shortest scale-down window (``hold_s``); the pool it starts with counts as its first."""

    def __init__(self, cap: Capacity, headroom: float, burst: int, window_s: int = 60) -> None:
        self.cap, self.busy, self.burst, self.window_s = cap, 1.0 - headroom, burst, window_s
        self.hold_s = base_scale_down_window_s(cap.cold_start_s)
        self.peak = 0
        self.recs: list[tuple[int, int]] = []  # (second, replicas asked) within the last hold_s

    def __call__(self, obs: Observed) -> int:
        if not self.recs:
            self.recs.append((obs.k, obs.pods))
        arrived = int(obs.arrivals_per_s[-self.window_s:].sum())
        if arrived:
            load = float(np.sum(self.cap.work_s(obs.tokens_in[-arrived:], obs.tokens_out[-arrived:]))) / self.window_s
            self.peak = max(self.peak, replicas_for(load, self.busy))
        want = max(1, self.peak, self.burst if obs.waiting else 0)
        self.recs = [(k, n) for k, n in self.recs if obs.k - k < self.hold_s] + [(obs.k, want)]
        return max(n for _, n in self.recs)
