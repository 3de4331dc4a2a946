"""The autoscalers the replay compares against: KEDA + HPA on vLLM's waiting requests (``Reactive``), the
HPA's replica proposal and scale-up/scale-down behaviour they and ``ours`` share, and the oracle, which reads
the next cold start's requests (not causal: a bound on what a perfect forecast could buy).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from replay_capacity import Capacity
from replay_sim import HPA_SYNC_S, Observed
from replay_trace import Trace, per_bin

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
    """HPA behaviour at the defaults (reference.md §12) with a ``window_s`` scale-down stabilisation: scale up at
    most max(+4, x2) per 15 s; scale down to the highest recommendation in the window."""
    return hpa_behave(HpaMemory(recs, started=bool(recs)), k, cur, rec, default_behavior(window_s))


def default_behavior(down_window_s: int = 300) -> dict[str, Any]:
    """The HPA's default ``behavior`` (reference.md §12), its scale-down window ``down_window_s``."""
    return {"scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                        "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15},
                                     {"type": "Percent", "value": 100, "periodSeconds": 15}]},
            "scaleDown": {"stabilizationWindowSeconds": down_window_s, "selectPolicy": "Max",
                          "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}}


@dataclass
class HpaMemory:
    """What the HPA controller keeps per autoscaler between syncs: its recommendations (second, replicas) for
    the stabilisation windows and the scale events (second, replicas added or removed) its policies' periods
    count; ``started``: whether it has synced yet (at its first sync it records the replicas it found)."""

    recs: list[tuple[int, int]] = field(default_factory=list)
    ups: list[tuple[int, int]] = field(default_factory=list)
    downs: list[tuple[int, int]] = field(default_factory=list)
    started: bool = False


def hpa_behave(mem: HpaMemory, k: int, cur: int, rec: int, behavior: Mapping[str, Any]) -> int:
    """One HPA sync at second ``k`` honouring an autoscaling/v2 ``behavior`` as the controller does
    (kubernetes pkg/controller/podautoscaler/horizontal.go): the recommendation ``rec`` (already within
    min/max) is stabilised, the lowest of the scale-up window and the highest of the scale-down window, then
    limited by each direction's policies from the replicas at the start of each policy's period (today's less
    the events within it), the policies combined by ``selectPolicy`` (Max: the largest change; Min: the
    smallest; Disabled: none). A recommendation exactly a window old still counts here (the controller
    compares timestamps that never fall on the boundary). A new HPA's first sync records the replicas it found
    as a recommendation made just before it (``recordInitialRecommendation``): it scales in from them only after
    its scale-down window, and a 0 s scale-up window leaves the record out."""
    up, down = behavior["scaleUp"], behavior["scaleDown"]
    if not mem.started:
        mem.recs.append((k - 1, cur))
        mem.started = True
    mem.recs.append((k, rec))
    longest = max(int(up["stabilizationWindowSeconds"]), int(down["stabilizationWindowSeconds"]))
    while mem.recs and mem.recs[0][0] < k - longest:
        mem.recs.pop(0)
    ups = [r for t, r in mem.recs if t >= k - int(up["stabilizationWindowSeconds"])]
    downs = [r for t, r in mem.recs if t >= k - int(down["stabilizationWindowSeconds"])]
    want = min(max(cur, min(ups)), max(downs))
    if want > cur:
        want = min(want, max(cur, _limit(mem, k, cur, up, +1)))
    elif want < cur:
        want = max(want, min(cur, _limit(mem, k, cur, down, -1)))
    if want != cur:
        (mem.ups if want > cur else mem.downs).append((k, abs(want - cur)))
    period = max(int(p["periodSeconds"]) for rules in (up, down) for p in rules["policies"])
    mem.ups[:] = [e for e in mem.ups if e[0] > k - period]
    mem.downs[:] = [e for e in mem.downs if e[0] > k - period]
    return want


def _limit(mem: HpaMemory, k: int, cur: int, rules: Mapping[str, Any], sign: int) -> int:
    """The furthest count one direction's policies allow from ``cur`` (``sign`` +1 up, -1 down)."""
    select = rules.get("selectPolicy", "Max")
    if select == "Disabled":
        return cur
    pick = max if (select == "Max") == (sign > 0) else min
    out: int | None = None
    for policy in rules["policies"]:
        period = int(policy["periodSeconds"])
        start = cur - _changed(mem.ups, k, period) + _changed(mem.downs, k, period)
        value = float(policy["value"])
        if policy["type"] == "Pods":
            proposed = start + sign * int(value)
        elif sign > 0:
            proposed = math.ceil(start * (1 + value / 100))
        else:
            proposed = int(start * (1 - value / 100))
        out = proposed if out is None else pick(out, proposed)
    return cur if out is None else out


def _changed(events: list[tuple[int, int]], k: int, period_s: int) -> int:
    """Replicas added (or removed) by the events within the last ``period_s`` seconds (strictly after its
    start, as the controller's ``getReplicasChangePerPeriod``)."""
    return sum(n for t, n in events if t > k - period_s)


class Oracle:
    """Not causal: reads the requests of the next cold start. Replicas for the busiest minute of work ahead
    (prompt / prefill + output / decode replica-seconds per second, the static-peak load) plus the backlog
    drained within one cold start, at the class's headroom: how far a perfect forecast could take ours."""

    def __init__(self, trace: Trace, cap: Capacity, headroom: float, bin_s: int = 60) -> None:
        work = cap.work_s(trace.input_tokens, trace.output_tokens)
        self.mean_work = float(work.mean()) if work.size else 0.0
        # the seconds' sums a span at a time: no whole-trace temporary beside the work itself
        per_sec = per_bin(trace.arrival_s, 1, int(trace.arrival_s[-1]) + 1 if trace.arrival_s.size else 0,
                          lambda part: work[part])
        self.cum = np.concatenate(([0.0], np.cumsum(per_sec)))
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
