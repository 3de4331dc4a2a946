"""Node MIG reconfiguration as a resumable state machine, its state kept on the node itself.

MIG changes evict every GPU pod on the node, so they are maintenance: only inside a window, node
cordoned, GPU pods evicted through the Eviction API (the server enforces PodDisruptionBudgets: 429
means wait), then the ``nvidia.com/mig.config`` label set for the GPU Operator's MIG manager and
``nvidia.com/mig.config.state`` awaited (``success`` → uncordon; ``failed`` or the deadline → revert the
label and uncordon). The phase and its deadline live in the node annotation ``rightsizer.io/mig-change``,
written in the same patch as each step, so a restarted controller resumes where it was, and a deadline
guarantees no node stays cordoned forever: the loop advances changes in flight every cycle, planned or not,
and a state that cannot be read whole (not JSON, a field missing or mistyped) is reverted at once as far
as it can be (uncordoned, the previous label back where it is named). One :func:`advance` call makes at
most one step and never raises.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import yaml

from recommender.controller.changeset import ObjectRef
from recommender.controller.kube import Conflict, Kube, KubeFailure, TooManyRequests
from recommender.controller.patch import esc
from recommender.controller.records import annotation_ops, emit_event
from recommender.core.annotations import MIG_CONFIG_LABEL as MIG_CONFIG
from recommender.core.annotations import MIG_CONFIG_STATE_LABEL as MIG_STATE
from recommender.core.annotations import STATE_ANNOTATION


@dataclass(frozen=True)
class MigSettings:
    drain_timeout_s: float = 1800.0
    config_timeout_s: float = 1800.0
    configmap: tuple[str, str] | None = None  # (namespace, name) of the mig-parted config, key config.yaml
    # a reverted change is not started again on that node for this long (by default: not in the same window),
    # so a drain that a PodDisruptionBudget never allows does not cordon the node again every cycle
    retry_after_revert_s: float = 86_400.0


@dataclass(frozen=True)
class MigOutcome:
    node: str
    phase: str  # idle, waiting-window, backoff, draining, configuring, done, reverted, failed
    message: str


def _ts(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def gpu_pods_on(pods: Sequence[Mapping[str, Any]], node: str) -> list[Mapping[str, Any]]:
    """Pods a MIG change evicts: on this node, running or pending, requesting an NVIDIA resource, not a
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


def advance(kube: Kube, node_name: str, target: str | None, now: datetime, window_open: bool,
            settings: MigSettings = MigSettings(), mig_parted: Mapping[str, Any] | None = None) -> MigOutcome:
    """One step towards ``target`` (None: only finish or revert a change in flight). Never raises."""
    try:
        node = kube.get("Node", None, node_name)
        meta = node.get("metadata") or {}
        text = (meta.get("annotations") or {}).get(STATE_ANNOTATION)
        if text is None:
            return _start(kube, node, target, now, window_open, settings)
        state, problem = read_state(text)
        if problem is not None:
            return _revert(kube, node, state, now, f"the {STATE_ANNOTATION} state {problem}", settings)
        if state["phase"] == "reverted":
            return _after_revert(kube, node, state, target, now, window_open, settings)
        if state["phase"] == "draining":
            return _drain(kube, node, state, now, settings, mig_parted)
        return _await(kube, node, state, now, settings)
    except Conflict as exc:
        return MigOutcome(node_name, "conflict", f"node changed while we worked on it; retried next cycle ({exc})")
    except KubeFailure as exc:
        return MigOutcome(node_name, "failed", str(exc))
    except Exception as exc:  # a bug must not stop the loop from reaching the other nodes' deadlines
        return MigOutcome(node_name, "failed", f"unexpected {type(exc).__name__}: {exc}")


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


def _after_revert(kube: Kube, node: dict[str, Any], state: dict[str, Any], target: str | None, now: datetime,
                  window_open: bool, settings: MigSettings) -> MigOutcome:
    """A change reverted here is not started again before its ``retry_after``; another target may start."""
    name, until = node["metadata"]["name"], _when(state["retry_after"])
    if target == state["target"] and now < until:
        return MigOutcome(name, "backoff", f"MIG config {target} was reverted here ({state.get('why', 'no reason')}); "
                          f"not tried again before {state['retry_after']}")
    if now >= until and (target is None or target == state["target"]):  # the backoff is over: forget it
        kube.patch("Node", None, name, [*_guard(node), _drop_state()])
    return _start(kube, node, target, now, window_open, settings)


def _start(kube: Kube, node: dict[str, Any], target: str | None, now: datetime, window_open: bool,
           settings: MigSettings) -> MigOutcome:
    name, labels = node["metadata"]["name"], node["metadata"].get("labels") or {}
    if target is None or labels.get(MIG_CONFIG) == target:
        return MigOutcome(name, "idle", "nothing to change")
    if not window_open:
        return MigOutcome(name, "waiting-window", f"MIG config {labels.get(MIG_CONFIG)} → {target} waits for a "
                          "maintenance window")
    was = bool((node.get("spec") or {}).get("unschedulable"))
    state = {"phase": "draining", "target": target, "previous": labels.get(MIG_CONFIG), "was_unschedulable": was,
             "started": _ts(now), "deadline": _ts(now + timedelta(seconds=settings.drain_timeout_s))}
    ops = [*_guard(node), *_set_annotation(node, state), {"op": "add", "path": "/spec/unschedulable", "value": True}]
    kube.patch("Node", None, name, ops)
    emit_event(kube, ObjectRef("Node", "", name), "RightsizerMigCordoned",
               f"cordoned for MIG config {labels.get(MIG_CONFIG)} → {target}", now, api_version="v1")
    return MigOutcome(name, "draining", f"cordoned; draining for MIG config {target}")


def _drain(kube: Kube, node: dict[str, Any], state: dict[str, Any], now: datetime, settings: MigSettings,
           mig_parted: Mapping[str, Any] | None) -> MigOutcome:
    name = node["metadata"]["name"]
    if now >= _when(state["deadline"]):
        return _revert(kube, node, state, now, "drain did not finish before its deadline", settings)
    pods = gpu_pods_on(kube.list("Pod"), name)
    blocked = []
    for p in pods:
        m = p["metadata"]
        try:
            kube.evict(m["namespace"], m["name"])
        except TooManyRequests:
            blocked.append(f"{m['namespace']}/{m['name']}")
    if pods:
        why = f"; a PodDisruptionBudget holds {', '.join(blocked)}" if blocked else ""
        return MigOutcome(name, "draining", f"evicting {len(pods)} GPU pod(s){why}")
    if settings.configmap is not None and mig_parted is None:  # no plan this cycle: its layout is unknown
        return MigOutcome(name, "draining", "drained; waiting for a plan that carries the MIG layout")
    if mig_parted is not None and settings.configmap is not None:
        _merge_config(kube, settings.configmap, mig_parted)
    new = {**state, "phase": "configuring", "deadline": _ts(now + timedelta(seconds=settings.config_timeout_s))}
    labels = node["metadata"].get("labels") or {}
    ops = [*_guard(node), *_set_annotation(node, new), *_set_label(node, MIG_CONFIG, state["target"])]
    if MIG_STATE in labels:  # a stale "success" must not count for this change
        ops.append({"op": "remove", "path": f"/metadata/labels/{esc(MIG_STATE)}"})
    kube.patch("Node", None, name, ops)
    return MigOutcome(name, "configuring", f"drained; {MIG_CONFIG}={state['target']} set, waiting for the MIG manager")


def _await(kube: Kube, node: dict[str, Any], state: dict[str, Any], now: datetime,
           settings: MigSettings) -> MigOutcome:
    name = node["metadata"]["name"]
    result = (node["metadata"].get("labels") or {}).get(MIG_STATE)
    if result == "success":
        ops = [*_guard(node), *_uncordon(state), _drop_state()]
        kube.patch("Node", None, name, ops)
        emit_event(kube, ObjectRef("Node", "", name), "RightsizerMigApplied",
                   f"MIG config {state['target']} applied; node uncordoned", now, api_version="v1")
        return MigOutcome(name, "done", f"MIG config {state['target']} applied; uncordoned")
    if result == "failed":
        return _revert(kube, node, state, now, "the MIG manager reported failed", settings)
    if now >= _when(state["deadline"]):
        return _revert(kube, node, state, now, f"{MIG_STATE} not success before the deadline (now {result})",
                       settings)
    return MigOutcome(name, "configuring", f"waiting for {MIG_STATE}=success (now {result or 'unset'})")


def _revert(kube: Kube, node: dict[str, Any], state: dict[str, Any], now: datetime, why: str,
            settings: MigSettings) -> MigOutcome:
    """Previous label back, node as schedulable as before, and the state annotation left as ``reverted`` with
    its ``retry_after`` (gone where the target is unknown): one patch. From a partial state: uncordoned
    unless it says the node was cordoned before, the label restored only where the state names the previous
    one (a string, or null for none, beside a known phase)."""
    name = node["metadata"]["name"]
    labels = node["metadata"].get("labels") or {}
    after = {"phase": "reverted", "target": state.get("target"), "why": why[:200],
             "retry_after": _ts(now + timedelta(seconds=settings.retry_after_revert_s))}
    ops = [*_guard(node), *_uncordon(state),
           *(_set_annotation(node, after) if isinstance(state.get("target"), str) else [_drop_state()])]
    previous = state.get("previous")
    known = isinstance(previous, str) or (previous is None and "previous" in state and "phase" in state)
    if known and labels.get(MIG_CONFIG) != previous:
        ops += (_set_label(node, MIG_CONFIG, previous) if isinstance(previous, str)
                else [{"op": "remove", "path": f"/metadata/labels/{esc(MIG_CONFIG)}"}])
    kube.patch("Node", None, name, ops)
    target = state.get("target") if isinstance(state.get("target"), str) else "an unknown config"
    emit_event(kube, ObjectRef("Node", "", name), "RightsizerMigReverted",
               f"MIG change to {target} reverted: {why}", now, warning=True, api_version="v1")
    return MigOutcome(name, "reverted", f"reverted to {previous if known else labels.get(MIG_CONFIG)}: {why}")


def _guard(node: dict[str, Any]) -> list[dict[str, Any]]:
    meta = node["metadata"]
    ops = [{"op": "test", "path": "/metadata/labels", "value": meta.get("labels") or {}}]
    if meta.get("resourceVersion"):
        ops.insert(0, {"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]})
    return ops


def _drop_state() -> dict[str, Any]:
    return {"op": "remove", "path": f"/metadata/annotations/{esc(STATE_ANNOTATION)}"}


def _uncordon(state: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"op": "add", "path": "/spec/unschedulable", "value": state.get("was_unschedulable") is True}]


def _set_annotation(node: dict[str, Any], state: dict[str, Any]) -> list[dict[str, Any]]:
    return annotation_ops(node, {STATE_ANNOTATION: json.dumps(state, sort_keys=True)})


def _set_label(node: dict[str, Any], key: str, value: str) -> list[dict[str, Any]]:
    if node["metadata"].get("labels") is None:
        return [{"op": "add", "path": "/metadata/labels", "value": {key: value}}]
    return [{"op": "add", "path": f"/metadata/labels/{esc(key)}", "value": value}]


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _merge_config(kube: Kube, where: tuple[str, str], doc: Mapping[str, Any]) -> None:
    """Add our named configs to the mig-parted ConfigMap (``config.yaml``), keeping every other config."""
    ns, name = where
    cm = kube.get("ConfigMap", ns, name)
    current = yaml.safe_load((cm.get("data") or {}).get("config.yaml") or "") or {"version": "v1"}
    merged = {**current, "version": "v1",
              "mig-configs": {**(current.get("mig-configs") or {}), **(doc.get("mig-configs") or {})}}
    kube.patch("ConfigMap", ns, name, {"data": {"config.yaml": yaml.safe_dump(merged, sort_keys=True)}}, merge=True)
