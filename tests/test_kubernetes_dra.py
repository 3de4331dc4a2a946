"""DRA workloads on the Kubernetes API emulator: pods that get GPUs through ResourceClaims are inventoried (claim,
DeviceClass, allocated device from the ResourceSlice), sized like any other workload, and their recommendation
is a ResourceClaimTemplate that validates against Kubernetes' resource.k8s.io/v1 schema."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import kubernetes_validate
import pytest

from collectors.kubernetes import discover_workloads
from collectors.kubernetes.claims import DraObjects, resolve
from collectors.snapshot import normalize
from recommender.core import usage as m
from recommender.core.annotations import CLASS_ANNOTATION
from recommender.core.catalogue import load_catalogue
from recommender.core.inventory import Sharing, Workload
from recommender.core.progress import NullProgress
from recommender.core.settings import Settings
from recommender.mechanisms.dra import DraShare, claim_object
from recommender.outputs.text import alloc_text
from recommender.pipeline.run import run_once
from tests.builders import END, snapshot
from tests.kubefixture import KubeEmulator, container, gpu_node, manifest, pod_from, template

NS = "llm"
NODE = "gpu-a100-1"
PRODUCT = "NVIDIA A100-SXM4-80GB"
K8S_DRA = "1.34.0"  # resource.k8s.io/v1 is GA from 1.34
MIG_CEL = 'device.attributes["gpu.nvidia.com"].profile == "3g.40gb"'


def _attr(**values: Any) -> dict[str, Any]:
    return {k: ({"int": v} if isinstance(v, int) else {"string": v}) for k, v in values.items()}


def device_classes() -> list[dict[str, Any]]:
    """The NVIDIA DRA driver's classes (reference.md §5)."""
    def cls(name: str, kind: str) -> dict[str, Any]:
        expr = f'device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type == "{kind}"'
        return manifest("DeviceClass", None, name, {"selectors": [{"cel": {"expression": expr}}]})
    return [cls("gpu.nvidia.com", "gpu"), cls("mig.nvidia.com", "mig")]


def resource_slice() -> dict[str, Any]:
    """What the driver publishes for an A100-80GB in MIG mode: two MIG devices and, on GPU 1, the whole GPU."""
    def mig(name: str, profile: str, memory: str, sms: int) -> dict[str, Any]:
        return {"name": name, "attributes": _attr(type="mig", profile=profile, productName=PRODUCT,
                                                  architecture="Ampere", uuid=f"MIG-{name}"),
                "capacity": {"memory": {"value": memory}, "multiprocessors": {"value": str(sms)}}}
    whole = {"name": "gpu-1", "attributes": _attr(type="gpu", productName=PRODUCT, uuid="GPU-1"),
             "capacity": {"memory": {"value": "80Gi"}}}
    return manifest("ResourceSlice", None, f"{NODE}-gpu.nvidia.com-x7k2", {
        "driver": "gpu.nvidia.com", "nodeName": NODE,
        "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
        "devices": [mig("gpu-0-mig-3g40gb-0", "3g.40gb", "40192Mi", 42),
                    mig("gpu-0-mig-1g10gb-4", "1g.10gb", "9728Mi", 14), whole]})


def claim_template() -> dict[str, Any]:
    return manifest("ResourceClaimTemplate", NS, "chat-mig", {"spec": {"devices": {"requests": [
        {"name": "mig", "exactly": {"deviceClassName": "mig.nvidia.com",
                                    "selectors": [{"cel": {"expression": MIG_CEL}}]}}]}}})


def dra_deployment(device: str = "gpu-0-mig-3g40gb-0", template_name: str = "chat-mig") -> list[dict[str, Any]]:
    """A vLLM Deployment whose pod gets a MIG device through a claim made from ``template_name``, with its
    ReplicaSet, pod and the claim the API made for the pod (allocated ``device``)."""
    main = container("vllm", "vllm/vllm-openai:v0.6.3", args=["--model", "Qwen/Qwen2.5-7B-Instruct",
                                                              "--gpu-memory-utilization", "0.9"])
    main["resources"] = {"claims": [{"name": "gpu"}]}
    tmpl = template({"app": "chat"}, main, resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": template_name}])
    deploy = manifest("Deployment", NS, "chat", {"replicas": 1, "template": tmpl, "selector": {}})
    rs = manifest("ReplicaSet", NS, "chat-6b7c9d", {"replicas": 1, "template": tmpl}, owner=deploy)
    pod = pod_from(rs, NS, "chat-6b7c9d-q8x2z", tmpl, NODE, {"pod-template-hash": "6b7c9d"})
    pod["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": "chat-6b7c9d-q8x2z-gpu-t4kz8"}]
    claim = manifest("ResourceClaim", NS, "chat-6b7c9d-q8x2z-gpu-t4kz8",
                     copy.deepcopy(claim_template()["spec"]["spec"]), owner=pod)
    claim["status"] = {"allocation": {"devices": {"results": [
        {"request": "mig", "driver": "gpu.nvidia.com", "pool": NODE, "device": device}]}},
        "reservedFor": [{"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}]}
    return [deploy, rs, pod, claim]


def cluster(**kw: Any) -> list[dict[str, Any]]:
    return [*device_classes(), resource_slice(), claim_template(), *dra_deployment(**kw),
            gpu_node(NODE, "NVIDIA-A100-SXM4-80GB", 81920, count=2)]


DRA_KINDS = ("ResourceClaim", "ResourceClaimTemplate", "DeviceClass", "ResourceSlice")


def discover(objects: list[dict[str, Any]]) -> dict[str, Workload]:
    """Discovered on a cluster that serves resource.k8s.io/v1 (a kind with no objects lists as empty)."""
    with KubeEmulator(objects, crds=DRA_KINDS) as kube:
        found = discover_workloads(kube.settings([NS]), NullProgress())
    return {w.ref.key: w for w in found}


@pytest.fixture(scope="module")
def chat() -> Iterator[Workload]:
    yield discover(cluster())[f"{NS}/Deployment/chat"]


def test_a_dra_pod_is_its_deployments_mig_device(chat: Workload) -> None:
    a = chat.allocation
    assert (a.sharing, a.dra_device_class, a.mig_profile, a.gpus) == (Sharing.DRA, "mig.nvidia.com", "3g.40gb", 0)
    assert a.gpu_product == PRODUCT and a.device_memory_mib == 40192  # the slice's device, not the node's GPU
    assert chat.pods == ("chat-6b7c9d-q8x2z",) and chat.nodes == (NODE,)
    assert a.vllm is not None and a.vllm.gpu_memory_utilization == 0.9
    assert not [n for n in chat.notes if "DRA" in n or "claim" in n.lower()], chat.notes
    held = normalize(chat, load_catalogue()).allocation
    assert held.gpu_model == "A100-80GB" and held.gpu_equivalents == pytest.approx(4 / 8)  # 3g.40gb: 4 of 8 memory


def test_the_allocated_device_wins_over_the_selector() -> None:
    """The claim got a 1g.10gb device (the template was edited since): the pod holds what was allocated."""
    w = discover(cluster(device="gpu-0-mig-1g10gb-4"))[f"{NS}/Deployment/chat"]
    assert (w.allocation.mig_profile, w.allocation.device_memory_mib) == ("1g.10gb", 9728)


def _recommend(w: Workload, cls: str | None = None) -> Any:
    w = normalize(w, load_catalogue())
    if cls:
        w = replace(w, annotations={**w.annotations, CLASS_ANNOTATION: cls})
    snap = snapshot([w], {m.FB_USED_MIB: {"chat": 7_000.0}, m.GR_ENGINE_ACTIVE_FRAC: {"chat": 0.05},
                          m.REQUEST_RATE: {"chat": 1.0}}, days=7)
    return next(r for r in run_once(snap, Settings(), END).recommendations if r.ref.name == "chat")


def test_a_dra_workload_is_sized_and_gets_a_claim_template(chat: Workload) -> None:
    rec = _recommend(chat, "real-time")  # isolation first: a MIG device
    after = rec.recommended
    assert after is not None and after.sharing is Sharing.DRA, rec.reasons
    assert after.dra_device_class == "mig.nvidia.com" and after.mig_profile in ("1g.10gb", "1g.20gb", "2g.20gb")
    assert any(r.startswith("DRA: asked through a mig.nvidia.com ResourceClaimTemplate") for r in rec.reasons)
    how = rec.advice.apply
    claim = how["claim"]
    assert (claim["kind"], claim["metadata"]) == ("ResourceClaimTemplate",
                                                  {"name": f"chat-gpu-{after.mig_profile.replace('.', '-')}",
                                                   "namespace": NS})
    request = claim["spec"]["spec"]["devices"]["requests"][0]
    assert request["exactly"]["deviceClassName"] == "mig.nvidia.com"
    assert request["exactly"]["selectors"] == [
        {"cel": {"expression": f'device.attributes["gpu.nvidia.com"].profile == "{after.mig_profile}"'}}]
    assert how["pod_resource_claims"] == [{"name": "gpu", "resourceClaimTemplateName": claim["metadata"]["name"]}]
    kubernetes_validate.validate(claim, K8S_DRA, strict=True)
    assert alloc_text(after).startswith(f"dra mig.nvidia.com: mig {after.mig_profile}")


def test_a_batch_dra_workload_gets_an_mps_share_through_one_shared_claim(chat: Workload) -> None:
    rec = _recommend(chat, "batch")
    after = rec.recommended
    assert after is not None
    assert (after.sharing, after.dra_sharing, after.dra_shared_claim) == (Sharing.DRA, "MPS", True)
    claim = rec.advice.apply["claim"]
    assert claim["kind"] == "ResourceClaim" and rec.advice.apply["pod_resource_claims"] == [
        {"name": "gpu", "resourceClaimName": claim["metadata"]["name"]}]
    config = claim["spec"]["devices"]["config"][0]["opaque"]
    assert config["parameters"]["kind"] == "GpuConfig" and config["parameters"]["sharing"] == {
        "strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": int(after.mps_active_thread_pct),
                                         "defaultPinnedDeviceMemoryLimit": f"{after.mps_pinned_mem_mib:.0f}Mi"}}
    assert 0 < after.gpu_equivalents < 0.5 and "share that claim's GPU" in rec.advice.apply["note"]
    kubernetes_validate.validate(claim, K8S_DRA, strict=True)


@pytest.mark.parametrize("share", [
    DraShare("mig.nvidia.com", 1, "1g.10gb"),
    DraShare("gpu.nvidia.com", 2),
    DraShare("gpu.nvidia.com", 1, None, "MPS", 25, 20480, shared=True),
    DraShare("gpu.nvidia.com", 1, None, "TimeSlicing", shared=True),
    DraShare("mig.nvidia.com", 1, "3g.40gb", "MPS", 50, None),
])
def test_every_claim_we_write_is_valid_kubernetes_and_reads_back_as_written(share: DraShare) -> None:
    obj = claim_object(share, "chat-gpu", NS)
    kubernetes_validate.validate(obj, K8S_DRA, strict=True)
    spec = obj["spec"] if share.shared else obj["spec"]["spec"]
    dra = DraObjects()
    dra.add("DeviceClass", device_classes())
    key = "resourceClaimName" if share.shared else "resourceClaimTemplateName"
    dra.add(obj["kind"], [obj])
    claims, notes = resolve(NS, {"spec": {"resourceClaims": [{"name": "gpu", key: "chat-gpu"}]}}, [], dra)
    unallocated = "ResourceClaim chat-gpu: not allocated yet; devices read from its request only"
    assert notes == ([unallocated] if share.shared else []) and len(claims) == 1
    c = claims[0]
    assert (c.device_class, c.count, c.profile, c.strategy, c.thread_pct, c.pinned_mem_mib, c.shared) == (
        share.device_class, share.count, share.profile, share.strategy, share.thread_pct, share.pinned_mem_mib,
        share.shared), spec


def test_a_broken_claim_still_shows_the_workload_with_one_reason() -> None:
    """The allocated device is in no ResourceSlice: the class and profile are still read, memory from the catalogue."""
    w = discover(cluster(device="gpu-9-mig-gone"))[f"{NS}/Deployment/chat"]
    assert (w.allocation.sharing, w.allocation.mig_profile) == (Sharing.DRA, "3g.40gb")  # from the selector
    assert w.allocation.device_memory_mib is None and w.allocation.gpu_product == "NVIDIA-A100-SXM4-80GB"
    assert [n for n in w.notes if "ResourceSlice" in n] == [
        "claim gpu (ResourceClaimTemplate chat-mig): device gpu-9-mig-gone of pool gpu-a100-1 (gpu.nvidia.com) is "
        "in no ResourceSlice: GPU model and memory unknown"]
    assert normalize(w, load_catalogue()).allocation.device_memory_mib == 40_192  # the profile's, from the catalogue


def test_an_unknown_device_class_and_a_missing_template_are_reasons_not_errors() -> None:
    objects = [o for o in cluster() if o["kind"] != "DeviceClass"]
    w = discover(objects)[f"{NS}/Deployment/chat"]
    assert "claim gpu (ResourceClaimTemplate chat-mig): DeviceClass mig.nvidia.com not found" in w.notes
    assert w.allocation.mig_profile == "3g.40gb"
    gone = [o for o in cluster() if o["kind"] not in ("ResourceClaimTemplate", "ResourceClaim")]
    w = discover(gone)[f"{NS}/Deployment/chat"]
    assert w.allocation.sharing is Sharing.DRA and w.allocation.dra_device_class is None
    assert [n for n in w.notes if "not found" in n] == [
        "ResourceClaimTemplate chat-mig not found and no claim made from it: its devices are unknown"]
    rec = _recommend(w)  # the node's labels still say which GPU: sized, with the reason carried along
    assert w.notes[-1] in rec.reasons


def test_a_cluster_without_dra_asks_every_version_once_and_finds_nothing() -> None:
    with KubeEmulator([gpu_node(NODE, "NVIDIA-A100-SXM4-80GB", 81920)]) as kube:
        assert discover_workloads(kube.settings([NS]), NullProgress()) == ()
        asked = [r for r in kube.requests() if "resource.k8s.io" in r]
    assert asked == [f"GET /apis/resource.k8s.io/{v}/deviceclasses" for v in ("v1", "v1beta2", "v1beta1")]


def test_denied_claims_are_said_once_and_write_nothing() -> None:
    with KubeEmulator(cluster()) as kube:
        kube.refuse("ResourceClaim")
        found = discover_workloads(kube.settings([NS]), NullProgress())
        assert all(r.startswith("GET ") for r in kube.requests())
    assert found == ()  # claims unreadable: whether its claims hold a GPU is unknown


def test_a_dra_share_read_from_the_flat_fields_a_snapshot_file_keeps_is_usable() -> None:
    """snapshot.json keeps mig_profile and mps_* only: the profile survives, count 1, class unknown."""
    back = DraShare.from_flat({"mig_profile": "1g.10gb", "mps_active_thread_pct": None})
    assert back == DraShare(None, 1, "1g.10gb")
    assert DraShare.from_flat({}) is None


@pytest.mark.parametrize("pct", ["nan", "inf", 250, -5, "1e300"])
def test_an_mps_thread_percentage_no_driver_takes_is_a_note_not_a_share(pct: Any) -> None:
    """The tenant writes its claim's opaque config: a percentage outside 0-100 (or not finite) is no cap."""
    obj = claim_object(DraShare("gpu.nvidia.com", 1, None, "MPS", 25, 20480, shared=True), "chat-gpu", NS)
    obj["spec"]["devices"]["config"][0]["opaque"]["parameters"]["sharing"]["mpsConfig"][
        "defaultActiveThreadPercentage"] = pct
    dra = DraObjects()
    dra.add("DeviceClass", device_classes())
    dra.add(obj["kind"], [obj])
    (claim,), notes = resolve(NS, {"spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "chat-gpu"}]}},
                              [], dra)
    assert claim.strategy == "MPS" and claim.thread_pct is None and claim.pinned_mem_mib == 20480
    assert f"ResourceClaim chat-gpu: defaultActiveThreadPercentage={str(pct)[:40]} is not a percentage from 0 to " \
           "100: ignored" in notes, notes
