"""The replay's figures per policy: the summary line each policy prints (GPU-hours, TTFT violations, cold
starts, the share of misses just after a demand jump) and the goal line that compares a policy with
static-peak and reactive. ``replay_sweep.py`` parses both.
"""

from __future__ import annotations

import numpy as np
from replay_sim import Result
from replay_trace import minute_spans, per_bin

GOAL_TERMS = "(>= 50%, >= 15%, <= 1 point)"  # ends the goal line (verdict): replay_sweep.py reads it

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
    per_min = per_bin(arrival_s, 60, int(arrival_s[-1] // 60) + 1)
    before = np.convolve(np.concatenate((np.zeros(JUMP_LOOKBACK_MIN), per_min)), np.ones(JUMP_LOOKBACK_MIN),
                         "valid")[:per_min.size] / JUMP_LOOKBACK_MIN  # mean of the minutes before each one
    jump = per_min > JUMP_FACTOR * np.maximum(before, 1.0)
    jump[:JUMP_LOOKBACK_MIN] = False  # the trace's start is no jump: every policy starts warm
    first = jump & ~np.concatenate(([False], jump[:-1]))  # a step lifts the next minutes too: one jump
    starts = np.flatnonzero(first) * 60.0
    out = np.zeros(arrival_s.size, dtype=bool)
    if not starts.size:
        return out
    for part in minute_spans(arrival_s):  # a span at a time: whole-trace temporaries of 400 M requests do not fit
        t = arrival_s[part]
        last = starts[np.maximum(np.searchsorted(starts, t, side="right") - 1, 0)]  # latest jump at or before
        out[part] = (t >= last) & (t < last + within_s)
    return out


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


def goal_met(fewer_than_static_pct: float, fewer_than_reactive_pct: float, points_over: float) -> bool:
    """The per-client goal (``GOAL_TERMS``): GPU-hours >= 50% under static-peak's and >= 15% under reactive's,
    and <= 1 point of requests over the objective beyond the unavoidable."""
    return fewer_than_static_pct >= 50 and fewer_than_reactive_pct >= 15 and points_over <= 1.0


def verdict(name: str, results: dict[str, Result], objective_s: float, floor: float) -> str:
    """The goal line: >= 50% fewer GPU-hours than static-peak, >= 15% fewer than reactive, <= 1 point of
    requests over the objective beyond those whose prefill alone exceeds it (``unavoidable_pct``)."""
    gpu = results[name].gpu_hours
    vs = {k: 100 * (1 - gpu / results[k].gpu_hours) for k in ("static-peak", "reactive")}
    over = float((results[name].ttft_s > objective_s).mean() * 100) - floor
    met = goal_met(vs["static-peak"], vs["reactive"], over)
    return (f"# {name} uses {vs['static-peak']:.1f}% fewer GPU-hours than static-peak, {vs['reactive']:.1f}% fewer "
            f"than reactive, {over:.2f} points over the objective beyond the unavoidable: goal "
            f"{'met' if met else 'NOT met'} {GOAL_TERMS}")
