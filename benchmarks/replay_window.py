"""Replay ``ours`` (and optionally the oracle and static peak) over a window of days of one ServeGen client: the
quick loop for trying a rule on a tune client before a full 14-day sweep (issue 43's closed loop was measured
with it; benchmarks/REPLAY.md). The window is a trace of its own: history starts at its first request.

    python benchmarks/replay_window.py ../shared/data/alibaba-servegen/data/language/m-small/chunk-20-trace.csv \\
        --days 0 4 --policies ours,oracle

Prints ``replay.py``'s line per policy and, for ours, where its plan ended (escalation to whole GPUs, target,
headroom); with ``--plan-every S``, also what ours saw and decided every S seconds of the window while it held
pods or requests arrived (the diagnosis of a client's misses, benchmarks/REPLAY.md). Capacity, class (real-time),
objective (2 s), shape (auto), seed (0) and ours' replica cap (``replay.ours_max_replicas``) are replay.py's.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replay import ours_max_replicas, same_capacity
from replay_capacity import Capacity, floor_pct
from replay_hpa import Oracle
from replay_ours import Ours
from replay_results import summary
from replay_sim import Observed, Policy, simulate
from replay_sizing import choose_slice, static_peak
from replay_trace import Trace, load_servegen, make_trace

from policies.autoscalerobjects import scale_down_window_s
from recommender.core.catalogue import load_catalogue
from recommender.core.plan import WorkloadClass
from recommender.core.settings import ForecastSettings
from recommender.core.settings_scaling import ScalingSettings

OBJECTIVE_S = 2.0
REFIT_S = 300  # ours' refit period, as replay.py's default --refit-s


def ours_settings(trace: Trace, cap: Capacity, shaped: Capacity, warm: int, burst_floor: float | None
                  ) -> ScalingSettings:
    """Ours' settings as replay.py gives them: capped at ``ours_max_replicas`` of static peak's ``warm`` whole
    GPUs in ours' shape, the recurring-burst floor over the refit period; ``burst_floor``:
    scaling.burst_floor_budget_frac (the default setting's when None)."""
    cap_at = ours_max_replicas(same_capacity(warm, trace, cap, shaped))
    base = ScalingSettings(max_replicas=cap_at, recurring_floor_interval_s=float(REFIT_S))
    return base if burst_floor is None else base.model_copy(update={"burst_floor_budget_frac": burst_floor})


class Logged:
    """``ours``, printing every ``every_s`` seconds (while it holds pods or requests arrived in the last minute)
    what it saw (arrivals/s over the last minute, pods, ready, serving, waiting), what it asked for, and its
    plan's bounds, target, waiting trigger, demand source, headroom, capacity source, scale-down window and
    shape. It passes ours' ``cap`` on, so the simulator rolls out ours' move to whole GPUs as it does unlogged
    (a plain function has no ``cap``: the pool stayed on the slice while ours counted whole GPUs)."""

    def __init__(self, ours: Ours, every_s: int) -> None:
        self.ours, self.every_s = ours, every_s

    @property
    def cap(self) -> Capacity:
        return self.ours.cap

    def __call__(self, obs: Observed) -> int:
        ours = self.ours
        want = ours(obs)
        arrived = float(obs.arrivals_per_s[-60:].sum()) / 60
        if obs.k % self.every_s == 0 and (obs.pods or want or arrived):
            p = ours.plan
            plan = "no plan" if p is None else (
                f"min {p.min_replicas} max {p.max_replicas} target {p.target_per_replica:g} waiting "
                f"{p.waiting_per_replica or 0:g} {p.demand_source} headroom {p.headroom_frac:g} {p.capacity_source}"
                f" scale-down {scale_down_window_s(p, ours.cap.cold_start_s)} s"
                f"{' to-zero' if p.scale_to_zero else ''}{' whole GPUs' if ours.escalated_s is not None else ''}")
            print(f"#  {obs.k / 3600:8.3f} h  {arrived:8.2f} req/s  pods {obs.pods} ready {obs.ready} serving "
                  f"{obs.serving} waiting {obs.waiting} -> {want} | {plan}", flush=True)
        return want


HELD_BY = ("minReplicas", "forecast band", "rate trigger", "waiting trigger", "objective trigger, first plan")


class Attributed:
    """``ours``, putting the GPU-hours of the pods it holds after each sync down to what held them: the largest of
    the asks the scale-down window keeps (``Ours.asks``: minReplicas, the forecast band, the rate and waiting
    triggers, at each sync of the window); pods above all of them to the objective trigger (or, before the first
    plan, to the replicas found). Passes ours' ``cap`` on as ``Logged`` does."""

    def __init__(self, policy: Ours | Logged) -> None:
        self.policy = policy
        self.ours = policy if isinstance(policy, Ours) else policy.ours
        self.held = dict.fromkeys(HELD_BY, 0.0)  # GPU-hours by what held the pods
        self.window: list[tuple[int, dict[str, int]]] = []
        self.last: tuple[int, int, float, str, int] | None = None  # sync, pods, GPU share, held by, up to

    @property
    def cap(self) -> Capacity:
        return self.ours.cap

    def __call__(self, obs: Observed) -> int:
        want = self.policy(obs)
        ours = self.ours
        plan = ours.plan
        self._count(obs.k)
        asks = {**ours.asks, HELD_BY[0]: plan.min_replicas} if plan is not None and ours.asks else {}
        hold_s = scale_down_window_s(plan, ours.cap.cold_start_s) if plan is not None else 0
        self.window = [(k, a) for k, a in self.window if k >= obs.k - hold_s] + [(obs.k, asks)]
        held_by, most = HELD_BY[-1], 0
        for _, seen in self.window:
            for name, n in seen.items():
                if n > most:
                    held_by, most = name, n
        self.last = obs.k, want, ours.cap.gpu_share, held_by, most
        return want

    def _count(self, until: int) -> None:
        """The pods of the last sync, held until ``until`` (s), counted in GPU-hours."""
        if self.last is None:
            return
        k, pods, share, held_by, most = self.last
        hours = (until - k) * share / 3600
        self.held[held_by] += min(pods, most) * hours
        self.held[HELD_BY[-1]] += max(0, pods - most) * hours

    def close(self, gpu_hours: float) -> str:
        """GPU-hours by what held the pods, in words; what is left of the run's ``gpu_hours`` (the pods after the
        last sync, and a move's rollout, while the old shape's pods serve beside the new) as such."""
        rest = gpu_hours - sum(self.held.values())
        parts = [f"{name} {hours:.2f}" for name, hours in self.held.items()] + [f"after the last sync, rollout "
                                                                              f"{rest:.2f}"]
        return f"# GPU-hours by what held the pods: {', '.join(parts)} (of {gpu_hours:.2f})"


class Recorded:
    """``ours`` (or any policy), recording at every sync what the pool held and what it asked for: the input of
    ``misses``. Passes the policy's ``cap`` on as ``Logged`` does (``on``, the pool's shape, for a policy without
    one); ``means``: the trace's mean input and output tokens, for the shape's sustained requests/s."""

    def __init__(self, policy: Policy, means: tuple[float, float], on: Capacity) -> None:
        self.policy, self.means, self.on = policy, means, on
        self.rows: list[tuple[int, int, int, int, int, float, int, int]] = []

    @property
    def cap(self) -> Capacity:
        cap: Capacity = getattr(self.policy, "cap", self.on)
        return cap

    def __call__(self, obs: Observed) -> int:
        want = self.policy(obs)
        plan = getattr(getattr(self.policy, "ours", self.policy), "plan", None)
        lo, hi = (plan.min_replicas, plan.max_replicas) if plan is not None else (0, 10**9)
        self.rows.append((obs.k, obs.ready, obs.serving, obs.waiting, want,
                          self.cap.requests_per_s(*self.means), lo, hi))
        return want


CAUSES = ("from zero", "asked too few (at max)", "asked too few (at min)", "asked too few", "pods starting",
          "backlog", "ready, no backlog")


def misses(trace: Trace, ttft_s: np.ndarray, rows: list[tuple[int, int, int, int, int, float, int, int]],
           objective_s: float) -> dict[str, int]:
    """Each request over the objective counted under the first cause that held at the HPA sync before its
    arrival: no replica serving; the policy asked fewer replicas than the next minute's arrivals need at the
    shape's sustained rate (at its plan's max, at its min, or between); enough asked but fewer ready at the next
    sync (pods starting); enough ready with requests waiting at the sync (a backlog from before); neither."""
    table = np.array(rows, dtype="float64")
    k, ready, serving, waiting, want, rps, lo, hi = table.T
    per_sec = np.bincount(trace.arrival_s.astype(np.int64), minlength=int(k[-1]) + 61).astype("float64")
    cum = np.concatenate(([0.0], np.cumsum(per_sec)))
    ks = k.astype(np.int64)
    need = np.ceil((cum[np.minimum(ks + 60, cum.size - 1)] - cum[ks]) / 60.0 / rps - 1e-9)
    ready_next = np.append(ready[1:], ready[-1])
    over = np.flatnonzero(ttft_s > objective_s)
    at = np.clip(np.searchsorted(k, trace.arrival_s[over], side="right") - 1, 0, k.size - 1)
    cause = np.select(
        [serving[at] == 0, (want[at] < need[at]) & (want[at] >= hi[at]), (want[at] < need[at]) & (want[at] <= lo[at]),
         want[at] < need[at], ready_next[at] < need[at], waiting[at] > 0],
        [0, 1, 2, 3, 4, 5], default=6)
    return {name: int((cause == i).sum()) for i, name in enumerate(CAUSES)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("trace", type=Path, help="a ServeGen chunk-<n>-trace.csv")
    p.add_argument("--days", type=float, nargs=2, default=(0.0, 4.0), metavar=("FROM", "TO"))
    p.add_argument("--policies", default="ours", help="comma-separated: ours, oracle, static-peak")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reselect-s", type=float, default=ForecastSettings().reselect_s,
                   help="ours' forecast model chosen by backtest at most this often (0: at every refit)")
    p.add_argument("--burst-floor", type=float, default=None, metavar="FRAC",
                   help="scaling.burst_floor_budget_frac for ours (the default setting's without it)")
    p.add_argument("--plan-every", type=int, default=0, metavar="S",
                   help="print what ours saw and decided every S seconds (0: not)")
    p.add_argument("--attribute", action="store_true",
                   help="put ours' GPU-hours down to what held its pods: minReplicas or a trigger")
    p.add_argument("--misses", action="store_true",
                   help="count each policy's requests over the objective by what the pool held when they arrived")
    args = p.parse_args(argv)
    if not args.trace.is_file():
        print(f"replay_window: trace {args.trace} not found: skipped (see ../shared/data/README.md)")
        return 0
    unknown = set(args.policies.split(",")) - {"ours", "oracle", "static-peak"}
    if args.burst_floor is not None and not 0 <= args.burst_floor <= 1:
        p.error("--burst-floor must lie in [0, 1]")
    if args.plan_every < 0:
        p.error("--plan-every must be 0 or more seconds")
    if unknown or not args.days[0] < args.days[1]:
        p.error(f"unknown policy {sorted(unknown)[0]!r}" if unknown else "--days FROM must be before TO")
    full = load_servegen(args.trace, args.seed, 1000.0, 250.0)
    keep = (full.arrival_s >= args.days[0] * 86_400) & (full.arrival_s < args.days[1] * 86_400)
    if not keep.any():
        print(f"replay_window: no requests in days {args.days[0]:g}-{args.days[1]:g}")
        return 0
    trace = make_trace(full.arrival_s[keep], full.input_tokens[keep], full.output_tokens[keep])
    cap = Capacity()
    gpu = load_catalogue().get("H100-80GB")
    assert gpu is not None
    shaped, shape = choose_slice(trace, cap, gpu, OBJECTIVE_S, 32_768.0, 3600.0, 0.25, 0.9)
    warm, floor = static_peak(trace, cap, OBJECTIVE_S), floor_pct(trace, cap, OBJECTIVE_S)
    means = float(trace.input_tokens.mean()), float(trace.output_tokens.mean())
    print(f"# {args.trace} days {args.days[0]:g}-{args.days[1]:g}: {trace.arrival_s.size} requests, ours on {shape}, "
          f"static peak {warm}")
    for name in args.policies.split(","):
        policy: Policy
        if name == "ours":
            policy = ours = Ours(shaped, WorkloadClass.REAL_TIME, REFIT_S,
                                 ours_settings(trace, cap, shaped, warm, args.burst_floor),
                                 whole=cap if shaped != cap else None, reselect_s=args.reselect_s)
            if args.plan_every:
                policy = Logged(ours, args.plan_every)
            if args.attribute:
                policy = attributed = Attributed(policy)
            on = shaped
        elif name == "oracle":
            policy, on = Oracle(trace, shaped, ScalingSettings().headroom_frac["real-time"]), shaped
        else:
            policy, on = (lambda obs: warm), cap
        start = math.ceil(warm * cap.requests_per_s(*means) / on.requests_per_s(*means) - 1e-9)
        if args.misses:
            policy = recorded = Recorded(policy, means, on)
        result = simulate(trace, on, policy, name, start)
        print(summary(name, result, OBJECTIVE_S, floor), flush=True)
        if name == "ours" and args.attribute:
            print(attributed.close(result.gpu_hours), flush=True)
        if args.misses:
            counts = misses(trace, result.ttft_s, recorded.rows, OBJECTIVE_S)
            total = max(1, sum(counts.values()))
            print("# misses by cause: " + ", ".join(f"{c} {n} ({100 * n / total:.0f}%)" for c, n in counts.items()),
                  flush=True)
            day = (trace.arrival_s // 86_400).astype(np.int64)
            arrived = np.bincount(day)
            over = np.bincount(day, weights=result.ttft_s > OBJECTIVE_S, minlength=arrived.size)
            print("# % over by day: " + " ".join(f"{100 * o / max(n, 1):.2f}" for o, n in
                                                 zip(over, arrived, strict=True)))
        if name == "ours" and ours.plan is not None:
            print(f"# ours ended: to whole GPUs at {ours.escalated_s}, target {ours.plan.target_per_replica:g} req/s, "
                  f"headroom {ours.plan.headroom_frac:g}, capacity {ours.plan.capacity_source}, "
                  f"min {ours.plan.min_replicas}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
