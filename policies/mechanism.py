"""Which sharing mechanism a workload may get: by class and isolation, narrowed by the user.

Real-time work needs isolation it can count on (a MIG slice has its own memory and SMs), near-real-time
work tolerates an MPS share inside its own namespace, batch work only needs throughput (MPS or
time-slicing). The cluster settings, the namespace and the workload's annotations can only narrow that
list; a required mechanism that is not allowed is a contradiction, reported as such, and the workload
falls back to what it holds (design.md, "Mechanism by class and isolation").
"""

from __future__ import annotations

from dataclasses import dataclass

from recommender.core.annotations import ALLOWED_ANNOTATION, REQUIRED_ANNOTATION, quoted
from recommender.core.inventory import Sharing, Workload
from recommender.core.plan import WorkloadClass
from recommender.core.settings import MechanismSettings

MIG, FRACTION, TIME_SLICING, EXCLUSIVE = "mig", "fraction", "time-slicing", "exclusive"

# Preference per class, best first. "fraction" is the cluster's fraction backend (MPS, DRA-MPS, HAMi, KAI).
PREFERENCE: dict[WorkloadClass | None, tuple[str, ...]] = {
    WorkloadClass.REAL_TIME: (MIG, EXCLUSIVE),
    WorkloadClass.NEAR_REAL_TIME: (MIG, FRACTION, EXCLUSIVE),
    WorkloadClass.BATCH: (FRACTION, TIME_SLICING, MIG, EXCLUSIVE),
    None: (MIG, EXCLUSIVE),  # class unknown: isolation first
}
_BACKEND_MECHANISM = {"mps": "mps", "dra": "mps", "hami": "hami", "kai": "kai", "volcano-vgpu": "volcano-vgpu",
                      "runai": "runai"}
# a workload on a batch scheduler's own fractions keeps that scheduler: its fraction is the scheduler's mechanism
SCHEDULER_FRACTIONS = {Sharing.VOLCANO: "volcano-vgpu", Sharing.RUNAI: "runai"}


@dataclass(frozen=True)
class MechanismChoice:
    """The mechanisms to try, best first (names as in settings), and why the list is what it is.

    ``conflict`` is set when the constraints contradict each other: no recommendation then.
    """

    order: tuple[str, ...]
    reasons: tuple[str, ...]
    conflict: str | None = None


def _split(raw: str) -> tuple[str, ...]:
    return tuple(x.strip().lower() for x in raw.split(",") if x.strip())


def mechanisms(workload: Workload, cls: WorkloadClass | None, settings: MechanismSettings) -> MechanismChoice:
    """Mechanisms this workload may get, in the order its class prefers them."""
    # a workload that gets its GPUs through DRA claims gets fractions as the DRA driver's MPS sharing; one on
    # Volcano vGPU or Run:ai fractions gets its own scheduler's
    dra = workload.allocation.sharing is Sharing.DRA
    fraction = "mps" if dra else (SCHEDULER_FRACTIONS.get(workload.allocation.sharing)
                                  or _BACKEND_MECHANISM[settings.fraction_backend])
    allowed = set(settings.allowed)
    reasons: list[str] = []
    ns_allowed = settings.by_namespace.get(workload.ref.namespace)
    if ns_allowed is not None:
        allowed &= set(ns_allowed)
        reasons.append(f"namespace {workload.ref.namespace} allows {', '.join(ns_allowed) or 'nothing'}")
    raw_allowed = workload.annotations.get(ALLOWED_ANNOTATION)
    if raw_allowed is not None:
        allowed &= set(_split(raw_allowed))
        reasons.append(f"annotation {ALLOWED_ANNOTATION}={quoted(raw_allowed)}")
    preferred = [fraction if m == FRACTION else m for m in PREFERENCE[cls]]
    required = workload.annotations.get(REQUIRED_ANNOTATION, "").strip().lower() or None
    if required is not None:
        if required not in allowed:
            why = (f"annotation {REQUIRED_ANNOTATION}={quoted(required)} asks for a mechanism that is not allowed here "
                   f"(allowed: {', '.join(sorted(allowed)) or 'none'})")
            return MechanismChoice((), tuple(reasons), why)
        return MechanismChoice((required,), (*reasons, f"annotation {REQUIRED_ANNOTATION}={required}"))
    order = tuple(m for m in preferred if m in allowed)
    if not order:
        why = f"no mechanism left for a {cls or 'unclassified'} workload: allowed here: {', '.join(sorted(allowed))}"
        return MechanismChoice((), tuple(reasons), why)
    label = cls.value if cls else "unclassified"
    reasons.append(f"{label}: tries {' → '.join(order)}")
    return MechanismChoice(order, tuple(reasons))
