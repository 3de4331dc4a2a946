"""Node maintenance as a resumable state machine, its state kept on the node itself: the machine behind MIG
reconfiguration (:mod:`recommender.controller.mig`) and device-plugin sharing configs
(:mod:`recommender.controller.devplugin`).

A change is: cordon, evict the node's GPU pods through the Eviction API (the server enforces
PodDisruptionBudgets: 429 means wait), set the kind's node label, wait until the kind's check says the node
took it (``success`` → uncordon; ``failed`` or the deadline → revert the label and uncordon). The phase and
its deadline live in the kind's node annotation, written in the same patch as each step, so a restarted
controller resumes where it was, and a deadline guarantees no node stays cordoned forever: the loop advances
changes in flight every cycle, planned or not, and a state that cannot be read whole (not JSON, a field
missing or mistyped) is reverted at once as far as it can be (uncordoned, the previous label back where it
is named). A node with another kind's change in flight is not started on: one change at a time. One
:func:`advance` call makes at most one step and never raises.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from recommender.controller.changeset import ObjectRef
from recommender.controller.kube import Conflict, Kube, KubeFailure, TooManyRequests
from recommender.controller.patch import esc
from recommender.controller.records import annotation_ops, emit_event


@dataclass(frozen=True)
class NodeChangeSettings:
    drain_timeout_s: float = 1800.0
    config_timeout_s: float = 1800.0
    # a reverted change is not started again on that node for this long (by default: not in the same window),
    # so a drain that a PodDisruptionBudget never allows does not cordon the node again every cycle
    retry_after_revert_s: float = 86_400.0


@dataclass(frozen=True)
class Check:
    """Whether the node took the change: ``success``, ``failed`` or ``waiting``; ``waiting`` says for what
    (the configuring message), ``late`` what the deadline ends (the revert reason), ``failed`` why it failed."""

    status: str
    waiting: str = ""
    late: str = ""
    failed: str = ""


Verify = Callable[[Mapping[str, Any], Mapping[str, Any]], Check]  # (node, state) → check


@dataclass(frozen=True)
class NodeChangeKind:
    """What differs between node changes: the label set, the annotation that holds the state, the check that
    the node took it, the words in messages and Events."""

    what: str  # "MIG config": messages say "<what> a → b"
    change: str  # "MIG change": "<change> to X reverted"
    label: str  # the node label that selects the config
    annotation: str  # the state annotation
    event: str  # Event reasons: Rightsizer<event>Cordoned / Applied / Reverted
    verify: Verify
    waiting_for: str  # "the MIG manager": after the label is set
    stale_labels: tuple[str, ...] = ()  # removed with the label set: a stale result must not count
    others: tuple[str, ...] = ()  # other kinds' state annotations: none may be in flight when this one starts


@dataclass(frozen=True)
class NodeOutcome:
    node: str
    phase: str  # idle, waiting-window, backoff, busy, draining, configuring, done, reverted, failed, conflict
    message: str


Prepare = Callable[[], str | None]  # before the label is set: a reason to keep waiting, or None


def _ts(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def gpu_pods_on(pods: Sequence[Mapping[str, Any]], node: str) -> list[Mapping[str, Any]]:
    """Pods a change evicts: on this node, running or pending, requesting an NVIDIA resource, not a
    DaemonSet's (those are the GPU Operator's own and are paused by the MIG manager)."""
    out = []
    for p in pods:
        spec, meta = p.get("spec") or {}, p.get("metadata") or {}
        if spec.get("nodeName") != node or (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        if any(o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or []):
            continue
        limits = [k for c in spec.get("containers") or [] for k in ((c.get("resources") or {}).get("limits") or {})]
        if any(k.startswith("nvidia.com/") for k in limits):
            out.append(p)
    return out


def in_flight(node: Mapping[str, Any], annotation: str) -> bool:
    """A change of this kind started and not reverted (a reverted one's backoff is no change in flight)."""
    text = ((node.get("metadata") or {}).get("annotations") or {}).get(annotation)
    if text is None:
        return False
    state, problem = read_state(text)
    return problem is not None or state.get("phase") != "reverted"


def advance(kind: NodeChangeKind, kube: Kube, node_name: str, target: str | None, now: datetime, window_open: bool,
            settings: NodeChangeSettings, prepare: Prepare | None = None,
            extra: Mapping[str, Any] | None = None) -> NodeOutcome:
    """One step towards ``target`` (None: only finish or revert a change in flight); ``extra`` goes into the
    state a new change starts with (what ``kind.verify`` checks). Never raises."""
    try:
        node = kube.get("Node", None, node_name)
        meta = node.get("metadata") or {}
        text = (meta.get("annotations") or {}).get(kind.annotation)
        m = _Machine(kind, kube, node, now, settings)
        if text is None:
            return m.start(target, window_open, extra or {})
        state, problem = read_state(text)
        if problem is not None:
            return m.revert(state, f"the {kind.annotation} state {problem}")
        if state["phase"] == "reverted":
            return m.after_revert(state, target, window_open, extra or {})
        if state["phase"] == "draining":
            return m.drain(state, prepare)
        return m.wait(state)
    except Conflict as exc:
        return NodeOutcome(node_name, "conflict", f"node changed while we worked on it; retried next cycle ({exc})")
    except KubeFailure as exc:
        return NodeOutcome(node_name, "failed", str(exc))
    except Exception as exc:  # a bug must not stop the loop from reaching the other nodes' deadlines
        return NodeOutcome(node_name, "failed", f"unexpected {type(exc).__name__}: {exc}")


def read_state(text: Any) -> tuple[dict[str, Any], str | None]:
    """The state annotation as a dict and None, or what could be read of it and why it is not whole."""
    try:
        state = json.loads(str(text))
    except ValueError:
        return {}, "is not JSON"
    if not isinstance(state, dict):
        return {}, "is not a JSON object"
    if state.get("phase") not in ("draining", "configuring", "reverted"):
        return state, f"has no known phase ({state.get('phase')!r})"
    when = "retry_after" if state["phase"] == "reverted" else "deadline"
    needs = (("target", str), (when, str)) if when == "retry_after" else \
        (("target", str), (when, str), ("was_unschedulable", bool))
    for key, kind in needs:
        if not isinstance(state.get(key), kind):
            return state, f"has no valid {key}"
    if when == "deadline" and ("previous" not in state or not isinstance(state["previous"], str | None)):
        return state, "has no valid previous"
    try:
        _when(state[when])
    except ValueError:
        return state, f"has a {when} that is not a time ({state[when]!r})"
    return state, None


class _Machine:
    """The steps, for one node as read at the start of this call."""

    def __init__(self, kind: NodeChangeKind, kube: Kube, node: dict[str, Any], now: datetime,
                 settings: NodeChangeSettings) -> None:
        self.kind, self.kube, self.node, self.now, self.settings = kind, kube, node, now, settings
        self.name = node["metadata"]["name"]
        self.labels = node["metadata"].get("labels") or {}
        self.ref = ObjectRef("Node", "", self.name)

    def after_revert(self, state: dict[str, Any], target: str | None, window_open: bool,
                     extra: Mapping[str, Any]) -> NodeOutcome:
        """A change reverted here is not started again before its ``retry_after``; another target may start."""
        until = _when(state["retry_after"])
        if target == state["target"] and self.now < until:
            return NodeOutcome(self.name, "backoff", f"{self.kind.what} {target} was reverted here "
                               f"({state.get('why', 'no reason')}); not tried again before {state['retry_after']}")
        if self.now >= until and (target is None or target == state["target"]):  # the backoff is over: forget it
            self.kube.patch("Node", None, self.name, [*self._guard(), self._drop_state()])
        return self.start(target, window_open, extra)

    def start(self, target: str | None, window_open: bool, extra: Mapping[str, Any]) -> NodeOutcome:
        current = self.labels.get(self.kind.label)
        if target is None or current == target:
            return NodeOutcome(self.name, "idle", "nothing to change")
        if not window_open:
            return NodeOutcome(self.name, "waiting-window", f"{self.kind.what} {current} → {target} waits for a "
                               "maintenance window")
        busy = [a for a in self.kind.others if in_flight(self.node, a)]
        if busy:
            return NodeOutcome(self.name, "busy", f"{self.kind.what} {current} → {target} waits: another change "
                               f"is in flight on this node ({', '.join(busy)})")
        was = bool((self.node.get("spec") or {}).get("unschedulable"))
        state = {**extra, "phase": "draining", "target": target, "previous": current, "was_unschedulable": was,
                 "started": _ts(self.now),
                 "deadline": _ts(self.now + timedelta(seconds=self.settings.drain_timeout_s))}
        ops = [*self._guard(), *self._set_annotation(state),
               {"op": "add", "path": "/spec/unschedulable", "value": True}]
        self.kube.patch("Node", None, self.name, ops)
        emit_event(self.kube, self.ref, f"Rightsizer{self.kind.event}Cordoned",
                   f"cordoned for {self.kind.what} {current} → {target}", self.now, api_version="v1")
        return NodeOutcome(self.name, "draining", f"cordoned; draining for {self.kind.what} {target}")

    def drain(self, state: dict[str, Any], prepare: Prepare | None) -> NodeOutcome:
        if self.now >= _when(state["deadline"]):
            return self.revert(state, "drain did not finish before its deadline")
        pods = gpu_pods_on(self.kube.list("Pod"), self.name)
        blocked = []
        for p in pods:
            m = p["metadata"]
            try:
                self.kube.evict(m["namespace"], m["name"])
            except TooManyRequests:
                blocked.append(f"{m['namespace']}/{m['name']}")
        if pods:
            why = f"; a PodDisruptionBudget holds {', '.join(blocked)}" if blocked else ""
            return NodeOutcome(self.name, "draining", f"evicting {len(pods)} GPU pod(s){why}")
        wait = prepare() if prepare is not None else None
        if wait is not None:
            return NodeOutcome(self.name, "draining", f"drained; {wait}")
        new = {**state, "phase": "configuring",
               "deadline": _ts(self.now + timedelta(seconds=self.settings.config_timeout_s))}
        ops = [*self._guard(), *self._set_annotation(new), *self._set_label(state["target"])]
        ops += [{"op": "remove", "path": f"/metadata/labels/{esc(k)}"} for k in self.kind.stale_labels
                if k in self.labels]
        self.kube.patch("Node", None, self.name, ops)
        return NodeOutcome(self.name, "configuring", f"drained; {self.kind.label}={state['target']} set, waiting "
                           f"for {self.kind.waiting_for}")

    def wait(self, state: dict[str, Any]) -> NodeOutcome:
        check = self.kind.verify(self.node, state)
        if check.status == "success":
            ops = [*self._guard(), *self._uncordon(state), self._drop_state()]
            self.kube.patch("Node", None, self.name, ops)
            emit_event(self.kube, self.ref, f"Rightsizer{self.kind.event}Applied",
                       f"{self.kind.what} {state['target']} applied; node uncordoned", self.now, api_version="v1")
            return NodeOutcome(self.name, "done", f"{self.kind.what} {state['target']} applied; uncordoned")
        if check.status == "failed":
            return self.revert(state, check.failed)
        if self.now >= _when(state["deadline"]):
            return self.revert(state, check.late)
        return NodeOutcome(self.name, "configuring", f"waiting for {check.waiting}")

    def revert(self, state: dict[str, Any], why: str) -> NodeOutcome:
        """Previous label back, node as schedulable as before, and the state annotation left as ``reverted``
        with its ``retry_after`` (gone where the target is unknown): one patch. From a partial state:
        uncordoned unless it says the node was cordoned before, the label restored only where the state names
        the previous one (a string, or null for none, beside a known phase)."""
        label = self.kind.label
        after = {"phase": "reverted", "target": state.get("target"), "why": why[:200],
                 "retry_after": _ts(self.now + timedelta(seconds=self.settings.retry_after_revert_s))}
        ops = [*self._guard(), *self._uncordon(state),
               *(self._set_annotation(after) if isinstance(state.get("target"), str) else [self._drop_state()])]
        previous = state.get("previous")
        known = isinstance(previous, str) or (previous is None and "previous" in state and "phase" in state)
        if known and self.labels.get(label) != previous:
            ops += (self._set_label(previous) if isinstance(previous, str)
                    else [{"op": "remove", "path": f"/metadata/labels/{esc(label)}"}])
        self.kube.patch("Node", None, self.name, ops)
        target = state.get("target") if isinstance(state.get("target"), str) else "an unknown config"
        emit_event(self.kube, self.ref, f"Rightsizer{self.kind.event}Reverted",
                   f"{self.kind.change} to {target} reverted: {why}", self.now, warning=True, api_version="v1")
        return NodeOutcome(self.name, "reverted", f"reverted to {previous if known else self.labels.get(label)}: "
                           f"{why}")

    def _guard(self) -> list[dict[str, Any]]:
        meta = self.node["metadata"]
        ops = [{"op": "test", "path": "/metadata/labels", "value": meta.get("labels") or {}}]
        if meta.get("resourceVersion"):
            ops.insert(0, {"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]})
        return ops

    def _drop_state(self) -> dict[str, Any]:
        return {"op": "remove", "path": f"/metadata/annotations/{esc(self.kind.annotation)}"}

    @staticmethod
    def _uncordon(state: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"op": "add", "path": "/spec/unschedulable", "value": state.get("was_unschedulable") is True}]

    def _set_annotation(self, state: dict[str, Any]) -> list[dict[str, Any]]:
        return annotation_ops(self.node, {self.kind.annotation: json.dumps(state, sort_keys=True)})

    def _set_label(self, value: str) -> list[dict[str, Any]]:
        if self.node["metadata"].get("labels") is None:
            return [{"op": "add", "path": "/metadata/labels", "value": {self.kind.label: value}}]
        return [{"op": "add", "path": f"/metadata/labels/{esc(self.kind.label)}", "value": value}]


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
