"""The NVIDIA device plugin's ConfigMap of named configs (reference.md §3), read for each node's current sharing.

Each key is a config name whose value is the plugin's YAML; a node's ``nvidia.com/device-plugin.config`` label picks
one (unset: the default config). A key that does not parse gives one reason and leaves the nodes that select it
unknown; the report writes nothing for them it cannot justify. Listing is the only I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from kubernetes import client

from collectors.kubernetes.client import list_objects
from recommender.core.annotations import DEVICE_PLUGIN_CONFIG_LABEL
from recommender.core.devplugin import ConfigError, DevicePluginConfig, parse_config
from recommender.core.errors import KubernetesError
from recommender.core.inventory import GpuNode
from recommender.core.resources import RESOURCES
from recommender.core.settings_sources import KubernetesSettings

Configs = Mapping[str, DevicePluginConfig | str]  # config name → what it shares, or why it does not parse


def read_configs(api: client.ApiClient, k: KubernetesSettings) -> Configs | str:
    """The named configs of ``k.device_plugin_configmap``; a string says why none could be read."""
    where = f"{k.device_plugin_namespace}/{k.device_plugin_configmap}"
    if not k.device_plugin_configmap:
        return "kubernetes.device_plugin_configmap not set: the device plugin's ConfigMap is not read"
    try:
        found = [c for c in list_objects(api, RESOURCES["ConfigMap"], k.device_plugin_namespace, k.timeout_s)
                 if (c.get("metadata") or {}).get("name") == k.device_plugin_configmap]
    except KubernetesError as exc:
        return f"device plugin ConfigMap {where} not read: {exc}"
    if not found:
        return f"device plugin ConfigMap {where} not found"
    return parse_configs(found[0].get("data") or {}, where)


def parse_configs(data: Mapping[str, object], where: str) -> dict[str, DevicePluginConfig | str]:
    """Each key's config, or the one reason it does not parse."""
    out: dict[str, DevicePluginConfig | str] = {}
    for name, text in sorted(data.items()):
        try:
            out[name] = parse_config(text if isinstance(text, str) else "")
        except ConfigError as exc:
            out[name] = f"device plugin ConfigMap {where} key {name} does not parse: {exc}"
    return out


def with_configs(node: GpuNode, labels: Mapping[str, str], configs: Configs | str, default: str | None) -> GpuNode:
    """The node with its current config label and what that config shares (or why that is unknown)."""
    label = labels.get(DEVICE_PLUGIN_CONFIG_LABEL)
    name = label or default
    if isinstance(configs, str):
        found: DevicePluginConfig | str = configs
    elif name is None:
        found = "no nvidia.com/device-plugin.config label and no default config set " \
                "(kubernetes.device_plugin_default_config)"
    else:
        found = configs.get(name, f"config {name} is not a key of the device plugin's ConfigMap")
    if isinstance(found, str):
        return replace(node, device_plugin_config=label, device_plugin_unknown=found)
    return replace(node, device_plugin_config=label, device_plugin=found)
