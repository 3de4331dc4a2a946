"""What the actuator is asked (:class:`Request`) and what it answers (:class:`Outcome`, one line, never an
exception): the records the loop, the per-workload modes and the rollback pass between them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from recommender.controller import records as rec
from recommender.controller.changes import Desired
from recommender.controller.changeset import ObjectRef
from recommender.controller.guardrails import Health
from recommender.controller.policy import ChangeLimits


@dataclass(frozen=True)
class Outcome:
    """``status``: applied, dry-run, no-change, blocked, recommended, rolled-back; or conflict, failed, refused
    (a change record the controller must not act on: nothing written, a Warning Event says why)."""

    workload: str
    status: str
    message: str
    record: rec.ChangeRecord | None = None
    obj: dict[str, Any] | None = field(default=None, repr=False, compare=False)  # the workload as left (or read)

    @property
    def ok(self) -> bool:
        return self.status in ("applied", "dry-run", "no-change", "blocked", "rolled-back", "recommended")


@dataclass(frozen=True)
class Request:
    """Everything one apply needs besides the cluster."""

    ref: ObjectRef
    desired: Desired
    now: datetime
    limits: ChangeLimits
    history_s: float
    window_open: bool = True
    policy: str | None = None
    reason: str = ""
    baseline: Health | None = None  # from metrics; the actuator adds what the pods show
    baseline_s: float = 3600.0  # the window before the change that OOM kills and disruptions count in
    obj: dict[str, Any] | None = None  # the workload as read this cycle (None: read it); its guards keep it honest
