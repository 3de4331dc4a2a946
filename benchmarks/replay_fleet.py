"""The sweep's clients added up (``replay_sweep.py``): each population's half as one fleet (:func:`fleet`),
GPU-hours summed and misses weighted by requests, issue 43's fleet goal, and the table the README shows
(:func:`fleet_table`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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
    above_worst: dict[str, int]  # clients over FLEET_WORST_PCT of their requests over the objective

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
                 {p: 100 * over[p] / max(served[p], 1) for p in common}, worst, sum(r.goal_met for r in results),
                 {p: sum(r.figures[p].over_pct > FLEET_WORST_PCT for r in results) for p in common})


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
        cells += [f"{hours(f.gpu_hours[p])} / {f.over_pct[p]:.2f}" if p in f.gpu_hours else "not run" for p in policies]
        changes = [f.vs(who, b) for b in BASELINES if b != who]
        cells.append(" / ".join("–" if c is None else f"{100 * c:+.0f}%".replace("-", "−") for c in changes))
        cells.append(f"{f.worst[who][0]}: {f.worst[who][1]:.2f}" if who in f.worst else "not run")
        goal = f.goal(who)
        cells.append("–" if goal is None else "met" if goal else "not met")
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def hours(x: float) -> str:
    """GPU-hours as the tables give them: whole hours from 100, three figures below (a one-hour trace's 1.80)."""
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"
