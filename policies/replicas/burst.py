"""Burst floor: the fewest replicas to keep that would have held the requests an autoscaler could not serve
within its budget. A reactive autoscaler serves at step t with the replicas it sized on the rate one wake
(KEDA's poll + a cold start) earlier; a step whose rate is above what those replicas serve at the objective
has its requests over it, unless a floor of replicas was already there. The floor read here is counterfactual:
from the request rate (demand, which the floor does not change), not from the misses (which it does), so it
cannot oscillate the way a floor gated on observed misses does (benchmarks/REPLAY.md): the floor is the
smallest count at which those steps would have held at most ``burst_floor_budget_frac`` of the TTFT error
budget's requests. It rises as bursts the autoscaler misses recur in the history and falls as they leave it.
Rates in req/s, times in seconds. Pure: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from policies.replicas.history import ReplicaHistory, clean_rate


@dataclass(frozen=True)
class BurstFloor:
    """Replicas to keep at least (0: none) and why; ``share_without`` is the share (0-1) of requests the reactive
    autoscaler alone would have left over the objective (None without requests)."""

    replicas: int
    share_without: float | None
    reason: str


def burst_floor(history: ReplicaHistory, capacity_rps: float, target_rps: float, wake_s: float,
                budget: float) -> BurstFloor:
    """The smallest replica floor F at which the steps whose rate was above ``capacity_rps`` x max(F, replicas
    sized at ``target_rps`` on the rate one ``wake_s`` earlier) held at most ``budget`` (a share, 0-1) of the
    history's requests (:func:`floor_needed`)."""
    rate = history.request_rate_per_s
    if rate is None or capacity_rps <= 0 or target_rps <= 0:
        return BurstFloor(0, None, "no burst floor: no request rate or capacity to read it from")
    r = clean_rate(rate.to_numpy(dtype="float64"))
    need = floor_needed(r, capacity_rps, target_rps, lag_steps(wake_s, history.step_s))
    total = float(r.sum())
    if total <= 0:
        return BurstFloor(0, None, "no burst floor: no requests in the history")
    share = float(r[need > 0].sum()) / total
    floor = weighted_floor(need, r, budget * total)
    why = (f"burst floor {floor} replica(s): without one, {share:.2%} of requests arrived in steps above what "
           f"the replicas sized on the rate {wake_s:g} s earlier (a poll and a cold start) serve; with {floor}, "
           f"at most {budget:.2%} would have")
    return BurstFloor(floor, share, why)


def lag_steps(wake_s: float, step_s: float) -> int:
    """Steps a reactive autoscaler is late by (a poll and a cold start, ``wake_s``): at least one."""
    return max(1, math.ceil(wake_s / step_s))


def late(values: np.ndarray, lag: int) -> np.ndarray:
    """``values`` as seen ``lag`` steps late; the first ``lag`` steps infinite (what served them lies before the
    history, so they count as served)."""
    return np.concatenate([np.full(min(lag, values.size), np.inf), values[:max(0, values.size - lag)]])


def floor_needed(rate: np.ndarray, capacity_rps: float, target_rps: float, lag: int) -> np.ndarray:
    """Per step, the replica floor that would have served it at the objective where the replicas sized on the
    rate ``lag`` steps earlier (ceil(rate / ``target_rps``)) did not (ceil(rate / ``capacity_rps``)), else 0.
    The first ``lag`` steps need none: what served them lies before the history."""
    sized = np.ceil(late(rate, lag) / target_rps - 1e-9)
    missed = rate > sized * capacity_rps
    return np.where(missed, np.ceil(rate / capacity_rps - 1e-9), 0.0).astype(np.int64)


def weighted_floor(need: np.ndarray, weight: np.ndarray, allowance: float) -> int:
    """The smallest F with sum(weight where need > F) <= ``allowance``."""
    order = np.argsort(need)[::-1]
    ranked, cum = need[order], np.cumsum(weight[order])
    over = np.nonzero(cum > allowance)[0]  # steps that cannot all be left over the objective
    return int(ranked[over[0]]) if over.size else 0
