"""The device-plugin sharing plan as text every format shares: the node label, the node's change in words and the
ConfigMap of named configs as YAML (reference.md §3). Renders :class:`recommender.core.plan.DevicePluginPlan`;
computes nothing."""

from __future__ import annotations

import json
from typing import Any

from recommender.core.annotations import DEVICE_PLUGIN_CONFIG_LABEL
from recommender.core.plan import DevicePluginPlan, NodeDevicePluginPlan, Plan


def label(node: NodeDevicePluginPlan) -> str:
    """``nvidia.com/device-plugin.config=<name>``: the label that selects the node's config."""
    return f"{DEVICE_PLUGIN_CONFIG_LABEL}={node.config_name}"


def sharing_text(strategy: str, replicas: int) -> str:
    return "no sharing" if strategy == "none" else f"{strategy} ×{replicas}"


def change_text(node: NodeDevicePluginPlan) -> str:
    """``time-slicing ×2 → time-slicing ×4`` or ``keeps time-slicing ×4``."""
    after = sharing_text(node.strategy, node.replicas)
    return f"{node.current} → {after}" if node.changed else f"keeps {after}"


def configmap(dp: DevicePluginPlan) -> dict[str, Any]:
    """The ConfigMap manifest: one key per config name, each holding that config's YAML."""
    import yaml  # only the formats that show the config pay for it

    data = {name: yaml.safe_dump(json.loads(json.dumps(doc)), sort_keys=False, default_flow_style=False)
            for name, doc in dp.configs.items()}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": dp.configmap, "namespace": dp.namespace},
            "data": data}


def configmap_yaml(plan: Plan) -> str:
    """The plan's device-plugin ConfigMap as YAML (:func:`configmap_text`); '' without a plan."""
    return configmap_text(plan.device_plugin) if plan.device_plugin is not None else ""


def configmap_text(dp: DevicePluginPlan) -> str:
    """The ConfigMap as YAML after comments naming the label each node takes; '' when no config is new."""
    if not dp.configs:
        return ""
    import yaml

    class _Literal(yaml.SafeDumper):
        pass

    _Literal.add_representer(str, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", s,
                                                                  style="|" if "\n" in s else None))
    labels = [f"#   {' '.join(n.node.split())}: {label(n)}{'' if n.changed else ' (kept)'}" for n in dp.nodes]
    head = [f"# NVIDIA device plugin configs (version v1), one per node pool: the GPU Operator's devicePlugin.config."
            f"name={dp.configmap}", "# (add these keys to that ConfigMap where it exists), then label each node with "
            "the config it takes:", *labels]
    body = yaml.dump(configmap(dp), Dumper=_Literal, sort_keys=False, default_flow_style=False, allow_unicode=True)
    return "\n".join(head) + "\n" + body
