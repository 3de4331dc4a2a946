"""``GPURightsizingPolicy`` (rightsizer.io/v1alpha1) as pydantic models, plus the checks a CRD schema
cannot express. A malformed object never raises out of here: :func:`parse_policy` returns the reason,
which the loop writes to the object's status as a ``Valid=False`` condition.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from apscheduler.triggers.cron import CronTrigger
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from recommender.core.annotations import MODE_ANNOTATION, quoted
from recommender.core.inventory import Sharing, WorkloadRef
from recommender.core.resources import RESOURCES, owner_kind
from recommender.core.usage import VLLM_TTFT_BUCKETS_S

GROUP, VERSION, KIND = "rightsizer.io", "v1alpha1", "GPURightsizingPolicy"
MECHANISMS = frozenset(s.value for s in Sharing if s is not Sharing.NONE) | {"replicas", "vllm", "mig-node",
                                                                                   "device-plugin-node"}
_PROFILE = re.compile(r"^(\d+)g\.(\d+)gb(\+me)?$")
# the API group that serves each workload kind
KIND_GROUPS = {k: RESOURCES[k].group for k in ("Deployment", "StatefulSet", "Job", "CronJob", "LeaderWorkerSet")}


class Mode(StrEnum):
    OFF = "Off"
    RECOMMEND = "Recommend"
    AUTO = "Auto"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class WorkloadRefSpec(_Model):
    api_version: str | None = Field(None, alias="apiVersion")
    kind: str
    name: str = Field(min_length=1)

    @property
    def key(self) -> str:
        """The workload kind as the inventory keys it: ``<kind>.<group>`` where another group's resource has the
        plain kind (``Job`` of ``batch.volcano.sh/v1alpha1`` is ``Job.batch.volcano.sh``)."""
        return owner_kind(self.api_version, self.kind) if self.api_version else self.kind

    @model_validator(mode="after")
    def _group(self) -> WorkloadRefSpec:
        """Workloads are selected by kind and name; an apiVersion given must be of the group serving that kind."""
        key = self.key
        want = KIND_GROUPS.get(key) if key == self.kind else RESOURCES[key].group
        if self.api_version is not None and want is not None and self.api_version.rpartition("/")[0] != want:
            raise ValueError(f"apiVersion {self.api_version} does not serve {self.kind} (its group is {want})")
        return self


class LabelSelector(_Model):
    match_labels: dict[str, str] = Field(default_factory=dict, alias="matchLabels")
    match_expressions: tuple[dict[str, Any], ...] = Field((), alias="matchExpressions")

    @field_validator("match_expressions")
    @classmethod
    def _ops(cls, v: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
        for e in v:
            if e.get("operator") not in ("In", "NotIn", "Exists", "DoesNotExist") or not e.get("key"):
                raise ValueError(f"matchExpressions entry {e} needs a key and an operator In|NotIn|Exists|DoesNotExist")
        return v

    def matches(self, labels: Mapping[str, str]) -> bool:
        if any(labels.get(k) != v for k, v in self.match_labels.items()):
            return False
        for e in self.match_expressions:
            key, op, values = e["key"], e["operator"], set(e.get("values") or ())
            ok = {"In": key in labels and labels[key] in values, "NotIn": labels.get(key) not in values,
                  "Exists": key in labels, "DoesNotExist": key not in labels}[op]
            if not ok:
                return False
        return True


class Target(_Model):
    workload_ref: WorkloadRefSpec | None = Field(None, alias="workloadRef")
    selector: LabelSelector | None = None

    @model_validator(mode="after")
    def _one(self) -> Target:
        if (self.workload_ref is None) == (self.selector is None):
            raise ValueError("target needs exactly one of workloadRef or selector")
        if self.selector is not None and not (self.selector.match_labels or self.selector.match_expressions):
            raise ValueError("target.selector is empty: it would select every workload in the namespace")
        return self


MAX_TTFT_OBJECTIVE_S = 3600.0  # the CRD's maximum


class LatencyObjectives(_Model):
    # from vLLM's first TTFT bucket bound (1 ms): under it every request would count as over the objective
    ttft_seconds: float | None = Field(None, ge=VLLM_TTFT_BUCKETS_S[0], le=MAX_TTFT_OBJECTIVE_S, alias="ttftSeconds")


class Bounds(_Model):
    min_replicas: int | None = Field(None, ge=0, alias="minReplicas")
    max_replicas: int | None = Field(None, ge=1, alias="maxReplicas")
    smallest_profile: str | None = Field(None, alias="smallestProfile")
    largest_profile: str | None = Field(None, alias="largestProfile")

    @field_validator("smallest_profile", "largest_profile")
    @classmethod
    def _profile(cls, v: str | None) -> str | None:
        if v is not None and not _PROFILE.match(v):
            raise ValueError(f"{v!r} is not a MIG profile like 1g.10gb or 3g.40gb")
        return v

    @model_validator(mode="after")
    def _order(self) -> Bounds:
        if self.min_replicas is not None and self.max_replicas is not None and self.min_replicas > self.max_replicas:
            raise ValueError(f"bounds.minReplicas {self.min_replicas} > maxReplicas {self.max_replicas}")
        if self.smallest_profile and self.largest_profile and \
                profile_slices(self.smallest_profile) > profile_slices(self.largest_profile):
            raise ValueError(f"bounds.smallestProfile {self.smallest_profile} is larger than "
                             f"largestProfile {self.largest_profile}")
        return self


class MaintenanceWindow(_Model):
    schedule: str
    duration_minutes: int = Field(gt=0, le=7 * 24 * 60, alias="durationMinutes")

    @field_validator("schedule")
    @classmethod
    def _cron(cls, v: str) -> str:
        try:
            CronTrigger.from_crontab(v, timezone="UTC")
        except ValueError as exc:
            raise ValueError(f"schedule {v!r} is not a 5-field cron expression ({exc})") from None
        return v

    def open_at(self, now: datetime) -> bool:
        """True when a window that started at a cron fire time within ``durationMinutes`` is still open."""
        since = now - timedelta(minutes=self.duration_minutes)
        fire = CronTrigger.from_crontab(self.schedule, timezone="UTC").get_next_fire_time(None, since)
        return fire is not None and fire <= now


class ChangeLimits(_Model):
    max_replica_change_per_step: int = Field(1, ge=1, alias="maxReplicaChangePerStep")
    cooldown_seconds: float = Field(3600.0, ge=0, alias="cooldownSeconds")
    max_changes_per_window: int = Field(3, ge=1, alias="maxChangesPerWindow")
    window_seconds: float = Field(86_400.0, gt=0, alias="windowSeconds")
    min_history_seconds: float = Field(86_400.0, ge=0, alias="minHistorySeconds")
    watch_seconds: float = Field(1800.0, ge=0, alias="watchSeconds")


class PolicySpec(_Model):
    target: Target
    mode: Mode = Mode.RECOMMEND
    allowed_mechanisms: tuple[str, ...] = Field(("replicas", "vllm"), alias="allowedMechanisms")
    latency_objectives: LatencyObjectives = Field(default_factory=LatencyObjectives, alias="latencyObjectives")
    class_override: str | None = Field(None, alias="classOverride")
    bounds: Bounds = Field(default_factory=Bounds)
    maintenance_windows: tuple[MaintenanceWindow, ...] = Field((), alias="maintenanceWindows")
    change_limits: ChangeLimits = Field(default_factory=ChangeLimits, alias="changeLimits")

    @field_validator("allowed_mechanisms")
    @classmethod
    def _mechanisms(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = sorted(set(v) - MECHANISMS)
        if bad:
            raise ValueError(f"unknown mechanism {', '.join(bad)}; known: {', '.join(sorted(MECHANISMS))}")
        return v

    @field_validator("class_override")
    @classmethod
    def _class(cls, v: str | None) -> str | None:
        if v is not None and v not in ("real-time", "near-real-time", "batch"):
            raise ValueError(f"classOverride {v!r} is not one of real-time, near-real-time, batch")
        return v

    def in_window(self, now: datetime) -> bool:
        """No windows configured: always open (only MIG node changes insist on one)."""
        return not self.maintenance_windows or any(w.open_at(now) for w in self.maintenance_windows)


@dataclass(frozen=True)
class Policy:
    """A parsed policy object; ``spec`` is None when invalid, and ``problem`` says why in one line."""

    namespace: str
    name: str
    spec: PolicySpec | None
    problem: str | None = None
    generation: int | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def selects(self, ref: WorkloadRef, labels: Mapping[str, str]) -> bool:
        if self.spec is None or ref.namespace != self.namespace:
            return False
        t = self.spec.target
        if t.workload_ref is not None:
            return t.workload_ref.key == ref.kind and t.workload_ref.name == ref.name
        return t.selector is not None and t.selector.matches(labels)


def parse_policy(obj: Mapping[str, Any]) -> Policy:
    """A policy object as the API returns it → :class:`Policy`, never an exception."""
    meta = obj.get("metadata") or {}
    ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    gen = meta.get("generation")
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return Policy(ns, name, None, "spec is missing or not an object", gen)
    try:
        return Policy(ns, name, PolicySpec.model_validate(spec), None, gen)
    except ValidationError as exc:
        return Policy(ns, name, None, _first_error(exc), gen)


def annotation_policy(ref: WorkloadRef, value: str) -> Policy:
    """The lighter opt-in: ``rightsizer.io/mode`` on the workload acts as a policy with that mode and
    default settings targeting it alone; an invalid value comes back with ``problem`` set."""
    name = f"{MODE_ANNOTATION}:{ref.kind}/{ref.name}"
    if value not in {m.value for m in Mode}:
        return Policy(ref.namespace, name, None, f"annotation {MODE_ANNOTATION}: {quoted(value)} is not one of "
                      f"{', '.join(m.value for m in Mode)} (case matters); ignored")
    target = Target(workload_ref=WorkloadRefSpec(kind=ref.kind, name=ref.name))
    return Policy(ref.namespace, name, PolicySpec(target=target, mode=Mode(value)))


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(x) for x in err["loc"])
    msg = str(err["msg"]).removeprefix("Value error, ")
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"spec.{where}: {msg}{more}" if where else f"spec: {msg}{more}"


def profile_slices(profile: str) -> int:
    """Compute slices of a MIG profile name (``3g.40gb`` → 3), for ordering bounds."""
    m = _PROFILE.match(profile)
    return int(m.group(1)) if m else 0
