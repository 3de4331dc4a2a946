"""Pure guardrails: whether the controller may act now, how far one step may go, and whether the last
change made things worse. Clock and history are parameters; nothing here reads a cluster.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import pandas as pd

from recommender.controller.policy import ChangeLimits
from recommender.model import PREEMPTIONS_RATE, REQUESTS_WAITING, TTFT_P95_S, Snapshot


@dataclass(frozen=True)
class Verdict:
    """Whether to act, and every reason not to (empty when allowed)."""

    allowed: bool
    reasons: tuple[str, ...] = ()


def may_act(limits: ChangeLimits, history_s: float, past_changes: Sequence[datetime], now: datetime,
            window_open: bool = True) -> Verdict:
    """Minimum history, cooldown since the last change, at most N changes per window, maintenance window."""
    why: list[str] = []
    if history_s < limits.min_history_seconds:
        why.append(f"only {history_s / 3600:.1f} h of history (need {limits.min_history_seconds / 3600:.1f} h)")
    if past_changes:
        since = (now - max(past_changes)).total_seconds()
        if since < limits.cooldown_seconds:
            why.append(f"cooldown: last change {since:.0f} s ago (cooldown {limits.cooldown_seconds:.0f} s)")
    start = now - timedelta(seconds=limits.window_seconds)
    recent = sum(1 for t in past_changes if t > start)
    if recent >= limits.max_changes_per_window:
        why.append(f"{recent} changes in the last {limits.window_seconds / 3600:g} h "
                   f"(limit {limits.max_changes_per_window})")
    if not window_open:
        why.append("outside every maintenance window")
    return Verdict(not why, tuple(why))


def step_replicas(current: int, target: int, max_step: int) -> int:
    """Move at most ``max_step`` replicas towards ``target`` (3 → 9 with step 2 gives 5)."""
    return current + max(-max_step, min(max_step, target - current))


@dataclass(frozen=True)
class Health:
    """What the regression check compares: TTFT p95 (s), waiting requests, preemptions/s, OOM kills."""

    ttft_p95_s: float | None = None
    requests_waiting: float | None = None
    preemptions_per_s: float | None = None
    oom_kills: int = 0


@dataclass(frozen=True)
class RegressionLimits:
    """How much worse counts as a regression: relative and absolute slack must both be exceeded."""

    ttft_rel: float = 0.25
    ttft_abs_s: float = 0.1
    waiting_rel: float = 0.5
    waiting_abs: float = 2.0
    preemptions_rel: float = 0.5
    preemptions_abs_per_s: float = 0.05


def health_from(snapshot: Snapshot, key: str, start: datetime, end: datetime, oom_kills: int = 0) -> Health:
    """Means of one workload's series in (``start``, ``end``]: the window before or after a change."""
    def mean(metric: str) -> float | None:
        frame = snapshot.usage.get(metric)
        if frame is None or key not in frame.columns:
            return None
        s = frame[key]
        s = s[(s.index > pd.Timestamp(start)) & (s.index <= pd.Timestamp(end))].dropna()
        return None if s.empty else float(s.mean())

    return Health(mean(TTFT_P95_S), mean(REQUESTS_WAITING), mean(PREEMPTIONS_RATE), oom_kills)


def regressions(before: Health, after: Health, limits: RegressionLimits = RegressionLimits(),
                ttft_objective_s: float | None = None) -> tuple[str, ...]:
    """Why ``after`` is worse than ``before``, in words; empty when it is not (missing data is no evidence)."""
    out: list[str] = []
    checks = (("TTFT p95", "s", before.ttft_p95_s, after.ttft_p95_s, limits.ttft_rel, limits.ttft_abs_s),
              ("waiting requests", "", before.requests_waiting, after.requests_waiting, limits.waiting_rel,
               limits.waiting_abs),
              ("preemptions", "/s", before.preemptions_per_s, after.preemptions_per_s, limits.preemptions_rel,
               limits.preemptions_abs_per_s))
    for name, unit, b, a, rel, abs_ in checks:
        if a is not None and b is not None and a > b * (1 + rel) and a - b > abs_:
            out.append(f"{name} {b:.3g}{unit} → {a:.3g}{unit}")
    if ttft_objective_s is not None and after.ttft_p95_s is not None and after.ttft_p95_s > ttft_objective_s \
            and (before.ttft_p95_s is None or before.ttft_p95_s <= ttft_objective_s):
        out.append(f"TTFT p95 {after.ttft_p95_s:.3g}s is over the objective {ttft_objective_s:g}s")
    if after.oom_kills > before.oom_kills:
        out.append(f"OOM kills {before.oom_kills} → {after.oom_kills}")
    return tuple(out)
