"""Whether one more pod of a template fits some node: the scheduler's filters the actuator asks about before it
moves a workload to other nodes (whole GPUs off MPS or time-slicing)."""

from __future__ import annotations

from typing import Any

import pytest

from recommender.controller.placement import unplaceable
from tests.kubefixture import gpu_node, pod_from, template

UNSHARED = {"nvidia.com/gpu.sharing-strategy": "none"}


def node(name: str = "n1", gpus: int = 8, unschedulable: bool = False, taints: list[dict[str, str]] | None = None,
         **labels: str) -> dict[str, Any]:
    n = gpu_node(name, "NVIDIA-H100-80GB-HBM3", 81559, count=gpus, labels={**UNSHARED, **labels})
    n["status"]["allocatable"] = {"nvidia.com/gpu": str(gpus)}
    n["spec"] = {"unschedulable": unschedulable, "taints": taints or []}
    return n


def tmpl(**spec: Any) -> dict[str, Any]:
    return template({"app": "chat"}, {"name": "vllm", "image": "vllm"}, **spec)


def holding(node_name: str, gpus: int, phase: str = "Running") -> dict[str, Any]:
    t = template({"app": "x"}, {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}})
    p = pod_from(None, "other", f"x-{node_name}-{gpus}-{phase}", t, node_name)
    p["status"]["phase"] = phase
    return p


GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@pytest.mark.parametrize(("template_spec", "nodes", "pods", "why"), [
    ({}, [node()], [], None),
    ({}, [node(**{"nvidia.com/gpu.sharing-strategy": "mps"})], [], "no node is labelled"),
    ({"nodeSelector": {"pool": "b"}}, [node(pool="a")], [],
     "no node is labelled nvidia.com/gpu.sharing-strategy=none,pool=b"),
    ({}, [node(unschedulable=True)], [], "n1: cordoned"),
    ({}, [node(taints=[GPU_TAINT])], [], "taint nvidia.com/gpu=present:NoSchedule not tolerated"),
    ({"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
     [node(taints=[GPU_TAINT])], [], None),
    ({"tolerations": [{"operator": "Exists"}]}, [node(taints=[GPU_TAINT])], [], None),
    ({"tolerations": [{"key": "nvidia.com/gpu", "value": "absent"}]}, [node(taints=[GPU_TAINT])], [], "not tolerated"),
    ({}, [node(taints=[{**GPU_TAINT, "effect": "PreferNoSchedule"}])], [], None),
    ({}, [node(gpus=8)], [holding("n1", 7)], None),
    ({}, [node(gpus=8)], [holding("n1", 7), holding("n1", 1, "Pending")], "n1: 0 of 8 nvidia.com/gpu free"),
    ({}, [node(gpus=8)], [holding("n1", 8, "Succeeded")], None),  # a finished pod holds nothing
    ({}, [node("n1"), node("n2")], [holding("n1", 8)], None),  # the second node has room
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]}}}},
     [node(zone="a")], [], "required node affinity excludes it"),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}},
     [node(zone="a")], [], None),  # terms are ORed
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["4"]},
                              {"key": "spot", "operator": "DoesNotExist"}]}]}}}},
     [node(gpus=8)], [], None),
])
def test_a_move_waits_for_a_node_that_could_take_a_pod(template_spec: dict[str, Any], nodes: list[dict[str, Any]],
                                                      pods: list[dict[str, Any]], why: str | None) -> None:
    got = unplaceable(tmpl(**template_spec), UNSHARED, 1, nodes, pods)
    assert (got is None) if why is None else (got is not None and why in got), got


def test_a_pod_of_several_gpus_needs_them_free_on_one_node() -> None:
    nodes = [node("n1"), node("n2")]
    pods = [holding("n1", 5), holding("n2", 6)]
    assert unplaceable(tmpl(), UNSHARED, 3, nodes, pods) is None
    why = unplaceable(tmpl(), UNSHARED, 4, nodes, pods)
    assert why is not None and "n1: 3 of 8" in why and "n2: 2 of 8" in why
