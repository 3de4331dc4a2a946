"""Node MIG reconfiguration: the node-change state machine (:mod:`recommender.controller.nodechange`) with
the ``nvidia.com/mig.config`` label for the GPU Operator's MIG manager, checked by its
``nvidia.com/mig.config.state`` (``success`` → uncordon; ``failed`` or the deadline → revert), the state in the
node annotation ``rightsizer.io/mig-change``.

MIG changes evict every GPU pod on the node, so they are maintenance: only inside a window, node cordoned,
GPU pods evicted through the Eviction API, then the label set. Before the label, the plan's layouts are added
to the mig-parted ConfigMap when one is configured. One :func:`advance` call makes at most one step and never
raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import yaml

from recommender.controller.kube import Kube
from recommender.controller.nodechange import Check, NodeChangeKind, NodeChangeSettings, NodeOutcome, read_state
from recommender.controller.nodechange import advance as advance_node
from recommender.controller.nodechange import gpu_pods_on as gpu_pods_on
from recommender.core.annotations import DEVICE_PLUGIN_STATE_ANNOTATION, STATE_ANNOTATION
from recommender.core.annotations import MIG_CONFIG_LABEL as MIG_CONFIG
from recommender.core.annotations import MIG_CONFIG_STATE_LABEL as MIG_STATE

__all__ = ["MigOutcome", "MigSettings", "advance", "gpu_pods_on", "read_state"]

MigOutcome = NodeOutcome


@dataclass(frozen=True)
class MigSettings(NodeChangeSettings):
    configmap: tuple[str, str] | None = None  # (namespace, name) of the mig-parted config, key config.yaml


def _verify(node: Mapping[str, Any], state: Mapping[str, Any]) -> Check:
    result = ((node.get("metadata") or {}).get("labels") or {}).get(MIG_STATE)
    if result == "success":
        return Check("success")
    if result == "failed":
        return Check("failed", failed="the MIG manager reported failed")
    return Check("waiting", waiting=f"{MIG_STATE}=success (now {result or 'unset'})",
                 late=f"{MIG_STATE} not success before the deadline (now {result})")


MIG = NodeChangeKind(what="MIG config", change="MIG change", label=MIG_CONFIG, annotation=STATE_ANNOTATION,
                     event="Mig", verify=_verify, waiting_for="the MIG manager", stale_labels=(MIG_STATE,),
                     others=(DEVICE_PLUGIN_STATE_ANNOTATION,))


def advance(kube: Kube, node_name: str, target: str | None, now: datetime, window_open: bool,
            settings: MigSettings = MigSettings(), mig_parted: Mapping[str, Any] | None = None) -> MigOutcome:
    """One step towards ``target`` (None: only finish or revert a change in flight). Never raises."""

    def prepare() -> str | None:
        if settings.configmap is None:
            return None
        if mig_parted is None:  # no plan this cycle: its layout is unknown
            return "waiting for a plan that carries the MIG layout"
        _merge_config(kube, settings.configmap, mig_parted)
        return None

    return advance_node(MIG, kube, node_name, target, now, window_open, settings, prepare)


def _merge_config(kube: Kube, where: tuple[str, str], doc: Mapping[str, Any]) -> None:
    """Add our named configs to the mig-parted ConfigMap (``config.yaml``), keeping every other config."""
    ns, name = where
    cm = kube.get("ConfigMap", ns, name)
    current = yaml.safe_load((cm.get("data") or {}).get("config.yaml") or "") or {"version": "v1"}
    merged = {**current, "version": "v1",
              "mig-configs": {**(current.get("mig-configs") or {}), **(doc.get("mig-configs") or {})}}
    kube.patch("ConfigMap", ns, name, {"data": {"config.yaml": yaml.safe_dump(merged, sort_keys=True)}}, merge=True)
