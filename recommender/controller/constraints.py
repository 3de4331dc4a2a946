"""What policy objects fix for the workloads they select (``classOverride``, ``latencyObjectives.ttftSeconds``
and the ``bounds``), resolved before planning so the plan honours them (``run_once(constraints=)``).

Pure: policies and workloads in, constraints and one-line conflicts out. Two policies that select one
workload with different constraints: the first by namespace/name wins, the other is told so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from recommender.controller.policy import Mode, Policy
from recommender.core.inventory import Workload
from recommender.core.plan import WorkloadClass, WorkloadConstraints

# workloads of the snapshot → workload key → its constraints (what the controller hands the plan function)
Constrain = Callable[[Sequence[Workload]], Mapping[str, WorkloadConstraints]]


@dataclass(frozen=True)
class Resolved:
    """Constraints by workload key, and by policy key the one line saying why its constraints lost."""

    constraints: Mapping[str, WorkloadConstraints]
    conflicts: Mapping[str, str]


def constraints_of(policy: Policy) -> WorkloadConstraints:
    """A valid policy's constraints (all None when it sets none)."""
    assert policy.spec is not None
    spec = policy.spec
    cls = WorkloadClass(spec.class_override) if spec.class_override else None
    b = spec.bounds
    return WorkloadConstraints(cls, b.smallest_profile, b.largest_profile, spec.latency_objectives.ttft_seconds,
                               b.min_replicas, b.max_replicas, f"policy {policy.key}")


def resolve_constraints(policies: Sequence[Policy], workloads: Iterable[Workload]) -> Resolved:
    """Each workload's constraints from the valid, not Off, policies that select it, first by namespace/name."""
    ordered = sorted((p for p in policies if p.spec is not None and p.spec.mode != Mode.OFF),
                     key=lambda p: (p.namespace, p.name))
    found: dict[str, WorkloadConstraints] = {}
    lost: dict[str, list[tuple[str, str]]] = {}  # policy key → (workload key, winner's source)
    for w in workloads:
        for p in ordered:
            c = constraints_of(p)
            if c.empty or not p.selects(w.ref, w.labels):
                continue
            won = found.setdefault(w.ref.key, c)
            if not won.same_as(c):
                lost.setdefault(p.key, []).append((w.ref.key, won.source))
    return Resolved(found, {k: _lost(v) for k, v in lost.items()})


def _lost(workloads: list[tuple[str, str]]) -> str:
    key, winner = workloads[0]
    more = f" (and {len(workloads) - 1} more)" if len(workloads) > 1 else ""
    return (f"classOverride/latencyObjectives/bounds not applied to {key}{more}: {winner} also selects it with other "
            "constraints and comes first by namespace/name")
