"""The device plugin's ConfigMap and node labels on the Kubernetes API emulator: each node's current config read
(a key that does not parse: one reason, the node unknown), then the report's current and recommended configs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from collectors.kubernetes import discover_cluster
from policies.devplugin import plan_device_plugin
from recommender.core.catalogue import load_catalogue
from recommender.core.inventory import Allocation, GpuNode, Sharing, Workload
from recommender.core.plan import Recommendation
from recommender.core.progress import NullProgress
from recommender.core.settings import Settings
from recommender.outputs.jsondoc import render_json
from recommender.outputs.markdown import render_markdown
from tests import planfixture
from tests.kubefixture import KubeEmulator, container, gpu_node, manifest, pod_from, template

A100 = "NVIDIA-A100-SXM4-80GB"
SLICED_4 = ("version: v1\nflags:\n  migStrategy: none\nsharing:\n  timeSlicing:\n    renameByDefault: true\n"
            "    failRequestsGreaterThanOne: true\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n")
CONFIGMAP = {**manifest("ConfigMap", "gpu-operator", "device-plugin-config"),
             "data": {"sliced-4": SLICED_4, "broken": "sharing: {timeSlicing: {resources: []}}\n",
                      "plain": "version: v1\n"}}
CONFIGMAP.pop("spec")


def _objects() -> list[dict[str, Any]]:
    label = "nvidia.com/device-plugin.config"
    nodes = [gpu_node("gpu-a", A100, 81920, count=2, labels={label: "sliced-4"}),
             gpu_node("gpu-b", A100, 81920, count=2, labels={label: "broken"}),
             gpu_node("gpu-c", A100, 81920, count=2)]  # no label: the default config ("plain")
    tmpl = template({"app": "embed"}, container("embed", "embed:1", {"nvidia.com/gpu.shared": "1"}))
    deploy = manifest("Deployment", "ml", "embed", {"replicas": 3, "template": tmpl})
    pods = [pod_from(deploy, "ml", f"embed-{n}", tmpl, n) for n in ("gpu-a", "gpu-b", "gpu-c")]
    return [*nodes, CONFIGMAP, deploy, *pods]


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[tuple[Workload, ...], dict[str, GpuNode], Settings]]:
    with KubeEmulator(_objects()) as kube:
        base = kube.settings()
        settings = base.model_copy(update={"kubernetes": base.kubernetes.model_copy(update={
            "device_plugin_configmap": "device-plugin-config", "device_plugin_default_config": "plain"})})
        workloads, nodes = discover_cluster(settings, NullProgress(), load_catalogue(), kube.api_client())
        yield workloads, {n.name: n for n in nodes}, settings


def test_nodes_carry_their_current_config(cluster: Any) -> None:
    _, nodes, _ = cluster
    a, b, c = nodes["gpu-a"], nodes["gpu-b"], nodes["gpu-c"]
    assert (a.device_plugin_config, a.device_plugin.describe()) == ("sliced-4", "time-slicing ×4 (renamed "
                                                                    "nvidia.com/gpu.shared)")
    assert b.device_plugin is None and b.device_plugin_unknown == (
        "device plugin ConfigMap gpu-operator/device-plugin-config key broken does not parse: "
        "sharing.timeSlicing.resources: no resources specified")
    assert (c.device_plugin_config, c.device_plugin.strategy) == (None, "none")  # unset label: the default


def test_report_shows_current_and_recommended_configs(cluster: Any) -> None:
    workloads, nodes, settings = cluster
    embed = next(w for w in workloads if w.ref.name == "embed")
    assert embed.allocation.sharing is Sharing.TIME_SLICING and embed.nodes == ("gpu-a", "gpu-b", "gpu-c")
    after = Allocation(Sharing.TIME_SLICING, gpus=1, gpu_equivalents=0.25, gpu_model="A100-80GB")
    dp = plan_device_plugin([Recommendation(embed, after, (), 1.0)], list(nodes.values()), (), settings)
    assert dp is not None
    by = {n.node: n for n in dp.nodes}
    assert (by["gpu-a"].changed, by["gpu-a"].config_name) == (False, "sliced-4")  # already time-slicing ×4
    assert (by["gpu-b"].current, by["gpu-b"].changed, by["gpu-b"].config_name) == (
        "unknown", True, "a100-80gb-ts-4")
    assert (by["gpu-c"].current, by["gpu-c"].config_name) == ("no sharing", "a100-80gb-ts-4")
    assert list(dp.configs) == ["a100-80gb-ts-4"]  # nothing written for what already exists
    plan = replace(planfixture.plan(), device_plugin=dp)
    doc = json.loads(render_json(plan))["device_plugin"]
    assert doc["configmap"] == {"namespace": "gpu-operator", "name": "device-plugin-config"}
    assert {n["node"]: (n["current_config"], n["label"]) for n in doc["nodes"]} == {
        "gpu-a": ("sliced-4", {"nvidia.com/device-plugin.config": "sliced-4"}),
        "gpu-b": ("broken", {"nvidia.com/device-plugin.config": "a100-80gb-ts-4"}),
        "gpu-c": (None, {"nvidia.com/device-plugin.config": "a100-80gb-ts-4"})}
    md = render_markdown(plan)
    assert "## Device-plugin sharing per node" in md and "a100-80gb-ts-4: |" in md
    assert "unknown → time-slicing ×4" in md
