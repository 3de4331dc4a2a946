"""Pure: the typed records of what the controller changes on one object — :class:`Change` (one value at one
JSON pointer, with the value it had) and :class:`ChangeSet` (the changes to one object, the ``test`` guards
that must hold first and what was left out, and why).

Every change carries its previous value, so its inverse is exact (:func:`recommender.controller.patch.inverse`)
and ``rightsizer rollback`` needs nothing but the record.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from recommender.core.resources import VOLCANO_JOB

# a Volcano Job: only its tasks' vGPU resources (recommender.controller.changes)
ACTUATED_KINDS = frozenset({"Deployment", "StatefulSet", VOLCANO_JOB})
REPLICAS = "/spec/replicas"


@dataclass(frozen=True)
class ObjectRef:
    kind: str
    namespace: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.kind}/{self.name}"


@dataclass(frozen=True)
class Change:
    """One value at one JSON pointer: ``old`` None means it was added, ``new`` None that it was removed."""

    path: str
    what: str  # for people: "replicas", "vllm --max-num-seqs", "env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
    old: Any
    new: Any

    def describe(self) -> str:
        return f"{self.what}: {_show(self.old)} → {_show(self.new)}"


@dataclass(frozen=True)
class ChangeSet:
    """Changes to one object, the ``test`` guards that must hold first, and what was left out and why."""

    target: ObjectRef
    changes: tuple[Change, ...] = ()
    guards: tuple[tuple[str, Any], ...] = ()
    skipped: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.changes

    def diff(self) -> str:
        """The dry-run diff: one line per change."""
        return "; ".join(c.describe() for c in self.changes) or "no change"


def without_replicas(cs: ChangeSet) -> ChangeSet:
    """``cs`` less its ``spec.replicas`` change: what an autoscaler owns now is not written back."""
    return replace(cs, changes=tuple(c for c in cs.changes if c.path != REPLICAS),
                   guards=tuple(g for g in cs.guards if g[0] != REPLICAS))


def _show(value: Any) -> str:
    return "(none)" if value is None else str(value)
