"""The NVIDIA device plugin's sharing config (reference.md §3): what one named config shares, read from the text
a ConfigMap key holds. The GPU Operator reads a ConfigMap of named configs and each node's
``nvidia.com/device-plugin.config`` label picks one. Pure: parsing only.

Read only as far as the report needs: the sharing strategy, replicas of ``nvidia.com/gpu``, the two flags and
``flags.migStrategy``. The full documented shape is ``recommender/data/device-plugin-config.schema.yaml``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

GPU_RESOURCE = "nvidia.com/gpu"
NO_SHARING = "none"
TIME_SLICING = "time-slicing"
MPS = "mps"
MIG_STRATEGIES = ("none", "single", "mixed")
_KEYS = {"timeSlicing": TIME_SLICING, "mps": MPS}


@dataclass(frozen=True)
class DevicePluginConfig:
    """One named config: how it shares each GPU (``none``, ``time-slicing`` or ``mps``; the same on every GPU of the
    node), ``replicas`` of ``nvidia.com/gpu`` per GPU (1: not shared), the two flags, and the MIG strategy."""

    strategy: str = NO_SHARING
    replicas: int = 1
    rename_by_default: bool = False
    fail_requests_greater_than_one: bool = False
    mig_strategy: str = "none"

    def describe(self) -> str:
        """``time-slicing ×4 (renamed nvidia.com/gpu.shared)`` / ``no sharing``, for reasons and reports."""
        if self.strategy == NO_SHARING:
            return "no sharing"
        renamed = f" (renamed {GPU_RESOURCE}.shared)" if self.rename_by_default else ""
        return f"{self.strategy} ×{self.replicas}{renamed}"


class ConfigError(ValueError):
    """A config the device plugin would reject, or one this tool cannot read: the message says which part."""


def parse_config(text: str) -> DevicePluginConfig:
    """What a ConfigMap key's YAML text shares; :class:`ConfigError` with one reason when it does not parse."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"not YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(doc, Mapping):
        raise ConfigError("not a mapping")
    if doc.get("version", "v1") != "v1":
        raise ConfigError(f"version {doc.get('version')!r} is not v1")
    mig = _mapping(doc, "flags").get("migStrategy", "none")
    if mig not in MIG_STRATEGIES:
        raise ConfigError(f"flags.migStrategy {mig!r} is not one of {', '.join(MIG_STRATEGIES)}")
    sharing = _mapping(doc, "sharing")
    found = [(key, _mapping(sharing, key)) for key in _KEYS if sharing.get(key) is not None]
    if len(found) > 1:
        raise ConfigError("sharing.timeSlicing and sharing.mps are both set: they are mutually exclusive")
    if not found:
        return DevicePluginConfig(mig_strategy=mig)
    key, body = found[0]
    replicas = _gpu_replicas(body, key)
    strategy = _KEYS[key] if replicas > 1 else NO_SHARING  # the plugin shares only what has replicas > 1
    return DevicePluginConfig(strategy, replicas, _flag(body, key, "renameByDefault"),
                              _flag(body, key, "failRequestsGreaterThanOne"), mig)


def _mapping(doc: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = doc.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key} is not a mapping")
    return value


def _flag(body: Mapping[str, Any], where: str, key: str) -> bool:
    value = body.get(key, False)
    if not isinstance(value, bool):
        raise ConfigError(f"sharing.{where}.{key} is not true or false")
    return value


def _gpu_replicas(body: Mapping[str, Any], where: str) -> int:
    """Replicas of ``nvidia.com/gpu``; every entry checked as the plugin checks it (a name, replicas > 0)."""
    resources = body.get("resources")
    if not isinstance(resources, list) or not resources:
        raise ConfigError(f"sharing.{where}.resources: no resources specified")
    replicas = 1
    for i, r in enumerate(resources):
        n = r.get("replicas") if isinstance(r, Mapping) else None
        if not isinstance(r, Mapping) or not isinstance(r.get("name"), str):
            raise ConfigError(f"sharing.{where}.resources[{i}]: no resource name")
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise ConfigError(f"sharing.{where}.resources[{i}].replicas {n!r} is not a positive integer")
        if r["name"] == GPU_RESOURCE:
            replicas = n
    return replicas
