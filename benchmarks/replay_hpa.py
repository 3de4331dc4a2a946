"""The autoscalers the replay compares against: KEDA + HPA on vLLM's waiting requests (``Reactive``), the
HPA's replica proposal and scale-up/scale-down behaviour they and ``ours`` share, and the oracle, which reads
the next cold start's requests (not causal: a bound on what a perfect forecast could buy).
"""

from __future__ import annotations

import numpy as np
from replay_capacity import Capacity
from replay_sim import HPA_SYNC_S, Observed
from replay_trace import Trace

from policies.replicas import replicas_for

KEDA_POLL_S = 30
HPA_TOLERANCE = 0.1  # cluster default (--horizontal-pod-autoscaler-tolerance)
KEDA_WAITING_TARGET = 5.0  # the reactive baseline: requests waiting per replica


class Reactive:
    """KEDA + HPA on num_requests_waiting, AverageValue ``target`` per replica (reference.md §10, §12), between
    ``min_replicas`` and ``max_replicas`` (maxReplicaCount: the replay sets static peak's count, not KEDA's
    default of 100, on which the queue's overshoot ran away)."""

    def __init__(self, min_replicas: int, max_replicas: int, target: float = KEDA_WAITING_TARGET,
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
