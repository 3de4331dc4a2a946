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


def sized_node(name: str = "n1", gpus: int = 8, cpu: str = "16", memory: str = "128Gi", pods: str = "110",
               **extra: str) -> dict[str, Any]:
    n = node(name, gpus)
    n["status"]["allocatable"] = {"nvidia.com/gpu": str(gpus), "cpu": cpu, "memory": memory, "pods": pods, **extra}
    return n


def requesting(node_name: str, requests: dict[str, str], name: str = "x", **spec: Any) -> dict[str, Any]:
    t = template({"app": "x"}, {"name": "c", "image": "x", "resources": {"requests": requests}}, **spec)
    return pod_from(None, "other", f"{name}-{node_name}", t, node_name)


def vllm(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    res = {"limits": {"nvidia.com/gpu.shared": "1", **(limits or {})}, "requests": dict(requests or {})}
    return template({"app": "chat"}, {"name": "vllm", "image": "vllm", "resources": res}, **spec)


@pytest.mark.parametrize(("tmpl_", "pods", "extra", "why"), [
    (vllm({"cpu": "8", "memory": "64Gi"}), [requesting("n1", {"cpu": "8", "memory": "32Gi"})], {}, None),
    (vllm({"cpu": "8"}), [requesting("n1", {"cpu": "8500m"})], {}, "n1: cpu: 7.5 free of 16, the pod requests 8"),
    (vllm({"memory": "64Gi"}), [requesting("n1", {"memory": "100Gi"})], {},
     "memory: 28Gi free of 128Gi, the pod requests 64Gi"),
    (vllm(limits={"cpu": "12"}), [requesting("n1", {"cpu": "8"})], {}, "cpu: 8 free of 16"),  # request = limit
    (vllm({"rdma/hca": "1"}), [], {}, "rdma/hca: 0 free of 0"),  # an extended resource the node lacks
    (vllm({"rdma/hca": "1"}), [], {"rdma/hca": "1"}, None),
    (vllm({"rdma/hca": "1"}), [requesting("n1", {"rdma/hca": "1"})], {"rdma/hca": "1"}, "rdma/hca: 0 free of 1"),
    (vllm(), [requesting("n1", {}, name=f"p{i}") for i in range(3)], {"pods": "3"}, "pods: 0 free of 3"),
    # an init container counts at its own size, not added to the containers'; a sidecar (restartPolicy Always) adds
    (vllm({"cpu": "4"}, initContainers=[{"name": "fetch", "resources": {"requests": {"cpu": "10"}}}]),
     [requesting("n1", {"cpu": "6"})], {}, None),
    (vllm({"cpu": "4"}, initContainers=[{"name": "proxy", "restartPolicy": "Always",
                                         "resources": {"requests": {"cpu": "8"}}}]),
     [requesting("n1", {"cpu": "6"})], {}, "cpu: 10 free of 16, the pod requests 12"),
    (vllm({"cpu": "4"}, overhead={"cpu": "250m"}), [requesting("n1", {"cpu": "11800m"})], {}, "the pod requests 4.25"),
    (vllm({"cpu": "4"}), [{**requesting("n1", {"cpu": "16"}), "status": {"phase": "Failed"}}], {}, None),
])
def test_a_move_needs_room_for_the_pods_other_requests(tmpl_: dict[str, Any], pods: list[dict[str, Any]],
                                                      extra: dict[str, str], why: str | None) -> None:
    node_ = sized_node(**extra)
    got = unplaceable(tmpl_, UNSHARED, 1, [node_], pods)
    assert (got is None) if why is None else (got is not None and why in got), got


def test_the_shared_gpu_the_move_gives_up_is_not_asked_of_the_new_node() -> None:
    """The template still holds nvidia.com/gpu.shared: the move renames it, so only ``gpus`` whole GPUs count."""
    assert unplaceable(vllm(limits={"nvidia.com/gpu.shared": "4"}), UNSHARED, 1, [sized_node(gpus=1)], []) is None


def test_a_quantity_that_does_not_parse_is_one_line() -> None:
    got = unplaceable(vllm({"cpu": "lots"}), UNSHARED, 1, [sized_node()], [])
    assert got is not None and "does not parse" in got and "\n" not in got
    broken = sized_node(cpu="many")
    got = unplaceable(vllm({"cpu": "1"}), UNSHARED, 1, [broken], [])
    assert got is not None and "n1: allocatable does not parse" in got
