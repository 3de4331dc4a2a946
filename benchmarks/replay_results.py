"""The replay's figures per policy: the summary line each policy prints (GPU-hours, TTFT violations, cold
starts, the share of misses just after a demand jump) and the goal line that compares a policy with
static-peak and reactive. ``replay_sweep.py`` parses both, and this module adds the clients up: each
population's half as one fleet (:func:`fleet`), the table the README shows (:func:`fleet_table`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from replay_sim import Result

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


FLEET_OVER_PCT = 1.0  # issue 43's fleet goal: at most 1% of the fleet's requests over the objective...
FLEET_GPU_SHARE = 0.5  # ...at most half of static peak's GPU-hours...
FLEET_WORST_PCT = 3.0  # ...and no client above 3%
BASELINES = ("static-peak", "reactive", "reactive-rightsized")  # what a fleet's policies are set against


@dataclass(frozen=True)
class Figures:
    """One policy on one client: GPU-hours, % of its requests over the objective, the requests replayed."""

    gpu_hours: float
    over_pct: float
    requests: int


@dataclass(frozen=True)
class ClientResult:
    """One client's replay as the sweep records it (``replay_sweep.py``'s JSON lines)."""

    population: str
    client: str
    half: str  # replay_split.TUNE or REPORT
    figures: dict[str, Figures]  # by policy
    unavoidable_pct: float = 0.0
    goal_met: bool = False  # ours met the per-client goal line (verdict)


@dataclass(frozen=True)
class Fleet:
    """A population's half taken as one fleet, over the policies every one of its clients ran."""

    population: str
    half: str
    clients: int
    gpu_hours: dict[str, float]  # summed
    over_pct: dict[str, float]  # of all the fleet's requests: each client's share weighted by its requests
    worst: dict[str, tuple[str, float]]  # the client with the largest % over the objective, and that %
    goal_met: int  # clients on which ours met the per-client goal

    def vs(self, policy: str, baseline: str) -> float | None:
        """``policy``'s GPU-hours as a change from ``baseline``'s (-0.6: 60% fewer); None where either is absent."""
        base = self.gpu_hours.get(baseline)
        return self.gpu_hours[policy] / base - 1 if base and policy in self.gpu_hours else None

    def goal(self, policy: str = "ours") -> bool | None:
        """Issue 43's fleet goal for ``policy``: <= 1% of requests over the objective at <= 0.5x static peak's
        GPU-hours, no client above 3%. None where the policy or static peak did not run."""
        ratio = self.vs(policy, "static-peak")
        if ratio is None:
            return None
        return self.over_pct[policy] <= FLEET_OVER_PCT and 1 + ratio <= FLEET_GPU_SHARE and \
            self.worst[policy][1] <= FLEET_WORST_PCT


def fleet(population: str, half: str, results: Sequence[ClientResult]) -> Fleet:
    """The clients as one fleet, for the policies every one of them ran (in the first client's order)."""
    common = [p for p in (results[0].figures if results else {}) if all(p in r.figures for r in results)]
    served = {p: sum(r.figures[p].requests for r in results) for p in common}
    over = {p: sum(r.figures[p].over_pct / 100 * r.figures[p].requests for r in results) for p in common}
    worst = {p: max(((r.client, r.figures[p].over_pct) for r in results), key=lambda x: x[1]) for p in common}
    return Fleet(population, half, len(results), {p: sum(r.figures[p].gpu_hours for r in results) for p in common},
                 {p: 100 * over[p] / max(served[p], 1) for p in common}, worst, sum(r.goal_met for r in results))


def fleets(results: Sequence[ClientResult]) -> list[Fleet]:
    """One fleet per population and half, in the order the results first name them (TUNE before REPORT)."""
    groups: dict[tuple[str, str], list[ClientResult]] = {}
    for r in sorted(results, key=lambda r: r.half != "tune"):
        groups.setdefault((r.population, r.half), []).append(r)
    order = list(dict.fromkeys(r.population for r in results))
    return [fleet(pop, half, groups[(pop, half)]) for pop, half in sorted(groups, key=lambda k: order.index(k[0]))]


def fleet_table(fleets_: Sequence[Fleet], policies: Sequence[str]) -> list[str]:
    """Markdown: one row per population and half; each policy's GPU-hours / % of requests over the objective,
    ours' change from each baseline it ran beside, and the worst client of ours (else of the last policy)."""
    who = "ours" if "ours" in policies else policies[-1]
    head = ["population, half (clients)", *policies, f"{who} vs " + " / ".join(b for b in BASELINES if b != who),
            f"{who}: worst client", f"{who}: fleet goal"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for f in fleets_:
        cells = [f"{f.population}, {f.half} ({f.clients})"]
        cells += [f"{f.gpu_hours[p]:,.0f} / {f.over_pct[p]:.2f}" if p in f.gpu_hours else "not run" for p in policies]
        changes = [f.vs(who, b) for b in BASELINES if b != who]
        cells.append(" / ".join("–" if c is None else f"{100 * c:+.0f}%" for c in changes))
        cells.append(f"{f.worst[who][0]}: {f.worst[who][1]:.2f}" if who in f.worst else "not run")
        goal = f.goal(who)
        cells.append("–" if goal is None else "met" if goal else "not met")
        rows.append("| " + " | ".join(cells) + " |")
    return rows
