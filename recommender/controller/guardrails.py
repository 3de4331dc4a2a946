"""Pure guardrails: whether the controller may act now, how far one step may go, and whether the last
change made things worse. Clock and history are parameters; nothing here reads a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pandas as pd

from recommender.controller.policy import ChangeLimits, LabelSelector
from recommender.core.timestamps import parse_time
from recommender.core.usage import PREEMPTIONS_RATE, REQUESTS_WAITING, TTFT_P95_S, Snapshot


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


def step_keda(current: int, lo: int, hi: int, max_step: int) -> tuple[int, int]:
    """KEDA min/max move replicas only past the current count: a new minimum at most ``max_step`` above it,
    a new maximum at most ``max_step`` below it (current 2, min 5, step 1 → min 3; current 8, max 4 → 7)."""
    lo = min(lo, current + max_step)
    return lo, max(hi, current - max_step, lo)


def step_threshold(current: int, old: float, new: float, max_step: int) -> float:
    """A trigger's per-replica threshold closest to ``new`` that moves the HPA's count at today's load by at most
    ``max_step`` replicas: ``current`` replicas at ``old`` carry current x old, which asks that / t at threshold
    t (current 4 at 5 per replica, step 1: between 4, five replicas, and 6.67, three; 10 becomes 6.67)."""
    r = max(current, 1)
    lowest = old * r / (r + max_step)  # r + max_step replicas
    highest = old * r / (r - max_step) if r > max_step else float("inf")  # r - max_step replicas
    return min(max(new, lowest), highest)


@dataclass(frozen=True)
class Health:
    """What the regression check compares: TTFT p95 (s), waiting requests, vLLM preemptions/s, and from pod
    statuses OOM kills and pods preempted or evicted (before a change: in the baseline hour; after: since)."""

    ttft_p95_s: float | None = None
    requests_waiting: float | None = None
    preemptions_per_s: float | None = None
    oom_kills: int = 0
    pod_disruptions: int = 0


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
    if after.pod_disruptions > before.pod_disruptions:
        out.append(f"pods preempted or evicted {before.pod_disruptions} → {after.pod_disruptions}")
    return tuple(out)


OOM_KILLED = "OOMKilled"
DISRUPTED_REASONS = frozenset({"Preempting", "Evicted"})


@dataclass(frozen=True)
class PodState:
    """What one workload's pod statuses show now; keys are ``pod/container`` (terminations) and pod names.

    A container's terminations are its ``restartCount`` plus one while it is terminated; only the latest
    termination's reason is visible, so a rise in terminations whose latest reason is OOMKilled counts
    as that many OOM kills (an upper bound when other crashes came in between).
    """

    terminations: Mapping[str, int]
    oom_at: Mapping[str, datetime | None]  # containers whose latest termination is OOMKilled → when
    disrupted: Mapping[str, datetime | None]  # pods preempted or evicted → when


def workload_pods(workload: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The pods a Deployment/StatefulSet selects (``spec.selector``; an empty selector selects none)."""
    meta, spec = workload.get("metadata") or {}, workload.get("spec") or {}
    raw = spec.get("selector") or {"matchLabels": ((spec.get("template") or {}).get("metadata") or {}).get("labels")}
    try:
        selector = LabelSelector.model_validate({k: v for k, v in raw.items() if v})
    except ValueError:
        return []
    if not (selector.match_labels or selector.match_expressions):
        return []
    return [p for p in pods if (p.get("metadata") or {}).get("namespace") == meta.get("namespace")
            and selector.matches((p.get("metadata") or {}).get("labels") or {})]


def pod_state(pods: Sequence[Mapping[str, Any]]) -> PodState:
    terminations: dict[str, int] = {}
    oom_at: dict[str, datetime | None] = {}
    disrupted: dict[str, datetime | None] = {}
    for p in pods:
        name, status = str((p.get("metadata") or {}).get("name")), p.get("status") or {}
        for c in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
            key = f"{name}/{c.get('name')}"
            now_term = (c.get("state") or {}).get("terminated")
            latest = now_term or (c.get("lastState") or {}).get("terminated") or {}
            terminations[key] = int(c.get("restartCount") or 0) + (1 if now_term else 0)
            if latest.get("reason") == OOM_KILLED:
                oom_at[key] = parse_time(latest.get("finishedAt"))
        target = next((c for c in status.get("conditions") or [] if c.get("type") == "DisruptionTarget"
                       and c.get("status") == "True"), None)
        if target is not None or status.get("reason") in DISRUPTED_REASONS:
            disrupted[name] = parse_time((target or {}).get("lastTransitionTime"))
    return PodState(terminations, oom_at, disrupted)


def pod_counts_within(state: PodState, start: datetime, end: datetime) -> tuple[int, int]:
    """(OOM kills, disrupted pods) in (``start``, ``end``]: the baseline before a change; no time counts."""
    def within(t: datetime | None) -> bool:
        return t is None or start < t <= end

    return sum(1 for t in state.oom_at.values() if within(t)), sum(1 for t in state.disrupted.values() if within(t))


def pod_counts_since(terminations: Mapping[str, int], disrupted: Sequence[str], state: PodState) -> tuple[int, int]:
    """(OOM kills, newly disrupted pods) since a change, given what the pods showed when it was made."""
    ooms = sum(max(0, n - terminations.get(k, 0)) for k, n in state.terminations.items() if k in state.oom_at)
    seen = set(disrupted)
    return ooms, sum(1 for pod in state.disrupted if pod not in seen)

