"""Device-plugin sharing configs applied per node: the node-change state machine
(:mod:`recommender.controller.nodechange`) with the ``nvidia.com/device-plugin.config`` label, checked by the
capacity the node then advertises (reference.md §3: replicas multiply capacity, ``renameByDefault`` advertises
``nvidia.com/gpu.shared``), the state in the node annotation ``rightsizer.io/device-plugin-change``.

A config change restarts the plugin and can rename the resource pods hold, so it is maintenance like MIG: only
Auto policies that allow ``device-plugin-node``, with maintenance windows, and inside one; one node at a time
in the cluster, never beside a MIG change on the same node.

The ConfigMap of named configs: the controller writes its keys only when the ConfigMap is ours (labelled
``app.kubernetes.io/managed-by: gpu-rightsizer``, which whoever creates it sets: RBAC gives no ``create``);
otherwise (the GPU Operator's own) it only selects configs that already exist in it, and says
``not applied: config X missing from ConfigMap Y`` for the others, writing nothing. A key of ours that another
node selects is never changed under it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import yaml

from recommender.controller.kube import Kube, NotFound
from recommender.controller.nodechange import (
    Check,
    NodeChangeKind,
    NodeChangeSettings,
    NodeOutcome,
    advance,
    in_flight,
    read_state,
)
from recommender.controller.policy import Policy
from recommender.core.annotations import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    DEVICE_PLUGIN_STATE_ANNOTATION,
    GPU_COUNT_LABEL,
    GPU_REPLICAS_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    STATE_ANNOTATION,
)
from recommender.core.devplugin import GPU_RESOURCE, ConfigError, parse_config
from recommender.core.plan import DevicePluginPlan, NodeDevicePluginPlan

ACTION = "device-plugin-node"  # the allowedMechanisms entry that lets Auto relabel nodes for it


def _int(value: Any) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def _verify(node: Mapping[str, Any], state: Mapping[str, Any]) -> Check:
    """The plugin took the config when the node advertises GPUs × replicas of its resource (capacity and, where
    reported, allocatable). Only where the node reports no such capacity, GPU feature discovery's
    ``nvidia.com/gpu.replicas`` label counts: read per GPU (collectors/kubernetes/parse.py) or as GPUs × replicas
    (reference.md §3), both agree with the plan."""
    resource, expect, replicas = state.get("resource"), state.get("expect"), state.get("replicas")
    if not isinstance(resource, str) or not isinstance(expect, int) or not isinstance(replicas, int):
        return Check("failed", failed="the state names no resource and capacity to check")
    status = node.get("status") or {}
    capacity = (status.get("capacity") or {}).get(resource)
    allocatable = (status.get("allocatable") or {}).get(resource, capacity)
    want = f"{resource}={expect} (GPUs × {replicas} replicas)"
    if capacity is not None:
        now = f"now {capacity}" + (f", allocatable {allocatable}" if allocatable != capacity else "")
        if _int(capacity) == expect and _int(allocatable) == expect:
            return Check("success")
        return Check("waiting", waiting=f"the node to advertise {want} ({now})",
                     late=f"the node did not advertise {want} before the deadline ({now})")
    label = _int(((node.get("metadata") or {}).get("labels") or {}).get(GPU_REPLICAS_LABEL))
    if label is not None and label in (replicas, expect):
        return Check("success")
    return Check("waiting", waiting=f"the node to advertise {want} (not reported)",
                 late=f"the node did not advertise {want} before the deadline (not reported)")


DEVICE_PLUGIN = NodeChangeKind(what="device-plugin config", change="device-plugin config change",
                               label=DEVICE_PLUGIN_CONFIG_LABEL, annotation=DEVICE_PLUGIN_STATE_ANNOTATION,
                               event="DevicePlugin", verify=_verify, waiting_for="the device plugin",
                               others=(STATE_ANNOTATION,))


@dataclass(frozen=True)
class Wanted:
    node: NodeDevicePluginPlan
    window_open: bool


def wanted(plan: DevicePluginPlan | None, policies: Iterable[Policy], auto: Callable[[Policy], bool],
           now: datetime) -> dict[str, Wanted]:
    """Node → its planned change, where an Auto policy that allows ``device-plugin-node`` and has maintenance
    windows owns one of the workloads sharing that node."""
    out: dict[str, Wanted] = {}
    for n in plan.nodes if plan is not None else ():
        if not n.changed:
            continue
        owners = [p for p in policies if p.spec is not None and auto(p) and ACTION in p.spec.allowed_mechanisms
                  and p.spec.maintenance_windows and any(w.split("/")[0] == p.namespace for w in n.workloads)]
        if owners and owners[0].spec is not None:
            out[n.node] = Wanted(n, owners[0].spec.in_window(now))
    return out


def expectation(n: NodeDevicePluginPlan, doc: Mapping[str, Any] | None, node: Mapping[str, Any]
                ) -> dict[str, Any] | str:
    """What the node advertises once it took the config: resource, GPUs × replicas; or why that is unknown."""
    if doc is None:
        return f"config {n.config_name} is not known"
    try:
        cfg = parse_config(yaml.safe_dump(dict(doc)))
    except ConfigError as exc:
        return f"config {n.config_name} does not parse: {exc}"
    gpus = n.gpus_total or _int(((node.get("metadata") or {}).get("labels") or {}).get(GPU_COUNT_LABEL)) or 0
    if gpus <= 0:
        return f"the node's GPU count is unknown ({GPU_COUNT_LABEL}): the change could not be verified"
    resource = f"{GPU_RESOURCE}.shared" if cfg.rename_by_default else GPU_RESOURCE
    return {"resource": resource, "replicas": cfg.replicas, "expect": gpus * cfg.replicas}


class ConfigMapView:
    """The plugin's ConfigMap as read this cycle: whether it is ours, its keys, which nodes select which."""

    def __init__(self, kube: Kube, plan: DevicePluginPlan | None, where: tuple[str, str],
                 nodes: Mapping[str, Mapping[str, Any]]) -> None:
        self.kube, self.plan, self.where = kube, plan, where
        self.where_text = f"{where[0]}/{where[1]}"
        self.selected = {name: ((o.get("metadata") or {}).get("labels") or {}).get(DEVICE_PLUGIN_CONFIG_LABEL)
                         for name, o in nodes.items()}
        self.problem: str | None = None
        self.ours, self.data = False, {}
        try:
            cm = kube.get("ConfigMap", *where)
        except NotFound:
            self.problem = f"ConfigMap {self.where_text} not found (create it labelled {MANAGED_BY_LABEL}=" \
                           f"{MANAGED_BY} to let the controller write its configs; deploy/README.md)"
            return
        self.ours = ((cm.get("metadata") or {}).get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGED_BY
        self.data = dict(cm.get("data") or {})

    def doc(self, config: str) -> Mapping[str, Any] | None:
        """The config's document: the plan's, else what the ConfigMap holds."""
        if self.plan is not None and config in self.plan.configs:
            return self.plan.configs[config]
        try:
            found = yaml.safe_load(str(self.data.get(config, "")))
        except yaml.YAMLError:
            return None
        return found if isinstance(found, dict) else None

    def refusal(self, config: str, node: str) -> str | None:
        """Why the label cannot select ``config`` (nothing is written then), or None."""
        if self.problem is not None:
            return f"not applied: {self.problem}"
        if not self.ours:
            if config not in self.data:
                return f"not applied: config {config} missing from ConfigMap {self.where_text} (not " \
                       f"{MANAGED_BY_LABEL}={MANAGED_BY}: only its existing configs are selected)"
            return None
        if config not in self.data:
            return None if self.plan is not None and config in self.plan.configs else \
                f"not applied: config {config} is in neither the plan nor ConfigMap {self.where_text}"
        if self.plan is not None and config in self.plan.configs and not self._same(config):
            users = sorted(n for n, c in self.selected.items() if c == config and n != node)
            if users:
                return f"not applied: config {config} in ConfigMap {self.where_text} differs from the plan and " \
                       f"{', '.join(users)} select it"
        return None

    def _same(self, config: str) -> bool:
        try:
            return bool(yaml.safe_load(str(self.data[config])) == dict(self.plan.configs[config]))  # type: ignore
        except yaml.YAMLError:
            return False

    def prepare(self, config: str, node: str) -> str | None:
        """Before the label: the config in the ConfigMap (written where it is ours), or why to wait."""
        refusal = self.refusal(config, node)
        if refusal is not None:
            return f"waiting: {refusal}"
        if config in self.data and (not self.ours or self.plan is None or config not in self.plan.configs
                                    or self._same(config)):
            return None
        if self.plan is None:
            return f"waiting for a plan that carries config {config}"
        text = yaml.safe_dump(dict(self.plan.configs[config]), sort_keys=False)
        self.kube.patch("ConfigMap", *self.where, {"data": {config: text}}, merge=True)
        self.data[config] = text
        return None


def step(kube: Kube, plan: DevicePluginPlan | None, where: tuple[str, str], nodes: Mapping[str, Mapping[str, Any]],
         want: Mapping[str, Wanted], now: datetime, settings: NodeChangeSettings) -> list[NodeOutcome]:
    """Advance the device-plugin changes in flight, and start a planned one where none is: one node at a time."""
    flying = sorted(n for n, o in nodes.items() if DEVICE_PLUGIN_STATE_ANNOTATION in
                    ((o.get("metadata") or {}).get("annotations") or {}))
    busy = [n for n in flying if in_flight(nodes[n], DEVICE_PLUGIN_STATE_ANNOTATION)]
    if not flying and not want:
        return []
    view = ConfigMapView(kube, plan, where, nodes)
    out: list[NodeOutcome] = []
    for name in sorted(set(flying) | {n for n in want if n in nodes}):
        w = want.get(name)
        target, extra, open_ = None, None, False
        if w is not None:
            refusal = view.refusal(w.node.config_name, name)
            expect = expectation(w.node, view.doc(w.node.config_name), nodes[name])
            label = ((nodes[name].get("metadata") or {}).get("labels") or {}).get(DEVICE_PLUGIN_CONFIG_LABEL)
            if name not in busy and label != w.node.config_name and (refusal is not None or isinstance(expect, str)):
                out.append(NodeOutcome(name, "not-applied", refusal or f"not applied: {expect}"))
                if name not in flying:
                    continue
            elif busy and name not in busy and label != w.node.config_name:
                out.append(NodeOutcome(name, "waiting-turn", f"device-plugin config {w.node.config_name} waits: "
                                       f"one node at a time ({', '.join(busy)} in flight)"))
                continue
            else:
                target, open_ = w.node.config_name, w.window_open
                extra = expect if isinstance(expect, dict) else None
        config = target or _target_of(nodes[name])

        def prepare(c: str | None = config, n: str = name) -> str | None:
            return view.prepare(c, n) if c else "the state names no config"

        outcome = advance(DEVICE_PLUGIN, kube, name, target, now, open_, settings, prepare, extra)
        out.append(outcome)
        if outcome.phase == "draining" and name not in busy:
            busy.append(name)
    return out


def _target_of(node: Mapping[str, Any]) -> str | None:
    text = ((node.get("metadata") or {}).get("annotations") or {}).get(DEVICE_PLUGIN_STATE_ANNOTATION)
    state, _ = read_state(text)
    target = state.get("target")
    return target if isinstance(target, str) else None
