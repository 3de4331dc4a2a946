"""The leader Lease as data: its timing settings, what a read Lease says, and the spec we write.

Pure (no API calls), so the rules of ``leader`` test without a server. A Lease anyone may have edited by
hand is read defensively: a field of the wrong type or an unparseable time becomes a ``problem`` (a
one-line log for the elector), never an exception.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from recommender.core.timestamps import parse_time

RELEASED = datetime.fromtimestamp(0, UTC)  # renewTime of a lease handed over on shutdown


class LeaseTiming(BaseModel):
    """Leader-election timing (controller ConfigMap ``leader_election``), seconds.

    The leader renews every ``retry_period_s``, on its own thread; it writes only while its last
    successful renewal is younger than ``renew_deadline_s``, and each write may take ``api_timeout_s``,
    so every write lands before another replica may take the lease over (``lease_duration_s`` after
    it last saw the lease change): hence ``renew_deadline_s + api_timeout_s < lease_duration_s``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    lease_duration_s: int = Field(30, gt=0, description="How long a lease is held without a renewal, s.")
    renew_deadline_s: float = Field(15.0, gt=0, description="How long after its last renewal the leader "
                                                            "still writes, s.")
    retry_period_s: float = Field(5.0, gt=0, description="Time between renewals (and between a follower's "
                                                         "attempts), s.")
    api_timeout_s: float = Field(10.0, gt=0, description="Timeout of each write and each Lease call, s.")

    @model_validator(mode="after")
    def _ordered(self) -> LeaseTiming:
        if self.retry_period_s >= self.renew_deadline_s:
            raise ValueError(f"retry_period_s {self.retry_period_s:g} must be less than renew_deadline_s "
                             f"{self.renew_deadline_s:g}: a renewal must get a second try before the deadline")
        if self.renew_deadline_s + self.api_timeout_s >= self.lease_duration_s:
            raise ValueError(f"renew_deadline_s {self.renew_deadline_s:g} + api_timeout_s {self.api_timeout_s:g} "
                             f"must be less than lease_duration_s {self.lease_duration_s}: a write sent just "
                             "before the deadline must land before the lease can be taken over")
        return self


@dataclass(frozen=True)
class LeaseView:
    """What one read of the Lease says; ``holder`` None when absent or not a string."""

    has_spec: bool
    raw_spec: Any
    resource_version: str | None
    holder: str | None
    renewed: datetime | None
    duration_s: int | None
    transitions: int
    problems: tuple[str, ...]

    @property
    def key(self) -> str:
        """Equal for two reads of an unchanged Lease (how a follower times an expiry)."""
        return json.dumps([self.raw_spec, self.resource_version], sort_keys=True, default=str)

    def guard(self) -> list[dict[str, Any]]:
        """JSON-patch ``test`` ops that fail when the Lease changed since this read."""
        ops: list[dict[str, Any]] = []
        if self.resource_version:
            ops.append({"op": "test", "path": "/metadata/resourceVersion", "value": self.resource_version})
        if self.has_spec:
            ops.append({"op": "test", "path": "/spec", "value": self.raw_spec})
        return ops

    def released(self, now: datetime, duration_s: int) -> bool:
        """Handed over on shutdown (no holder, renew time expired): free at once, no need to wait."""
        return (not self.problems and self.holder == "" and self.renewed is not None
                and now >= self.renewed + timedelta(seconds=duration_s))


def read_lease(obj: Any) -> LeaseView:
    """A Lease as returned by the API, every field checked for its type."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
    has_spec = isinstance(obj, dict) and "spec" in obj
    spec = obj.get("spec") if has_spec else None
    if not isinstance(spec, dict):
        why = "has no spec" if not has_spec else f"spec is {type(spec).__name__}, not a mapping"
        return LeaseView(has_spec, spec, str(rv) if rv else None, None, None, None, 0, (why,))
    problems: list[str] = []
    holder = spec.get("holderIdentity")
    if holder is not None and not isinstance(holder, str):
        problems.append(f"holderIdentity {_short(holder)} is not a string")
        holder = None
    renewed = _time(spec.get("renewTime"))
    if "renewTime" in spec and renewed is None:
        problems.append(f"renewTime {_short(spec['renewTime'])} is not a timestamp")
    duration = _count(spec.get("leaseDurationSeconds"), positive=True)
    if "leaseDurationSeconds" in spec and duration is None:
        problems.append(f"leaseDurationSeconds {_short(spec['leaseDurationSeconds'])} is not a positive integer")
    transitions = _count(spec.get("leaseTransitions"), positive=False)
    if "leaseTransitions" in spec and transitions is None:
        problems.append(f"leaseTransitions {_short(spec['leaseTransitions'])} is not a count")
    return LeaseView(True, spec, str(rv) if rv else None, holder, renewed, duration, transitions or 0,
                     tuple(problems))


def lease_spec(view: LeaseView | None, identity: str, duration_s: int, at: datetime) -> dict[str, Any]:
    """The spec that makes ``identity`` the holder, renewed ``at``; a change of holder is a transition."""
    base = dict(view.raw_spec) if view is not None and isinstance(view.raw_spec, dict) else {}
    spec = {**base, "holderIdentity": identity, "leaseDurationSeconds": duration_s, "renewTime": micro(at)}
    if view is None:
        return spec | {"acquireTime": micro(at), "leaseTransitions": 0}
    if view.holder != identity:
        return spec | {"acquireTime": micro(at), "leaseTransitions": view.transitions + 1}
    return spec


def micro(t: datetime) -> str:
    """A MicroTime as the API writes it."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _time(value: Any) -> datetime | None:
    t = parse_time(value) if isinstance(value, str) else None
    return t if t is not None and t.tzinfo is not None else None  # no zone: not a MicroTime


def _count(value: Any, *, positive: bool) -> int | None:
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    return value if value > 0 or (not positive and value == 0) else None


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."
