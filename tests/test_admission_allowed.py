"""The shipped admission policy allows every edit the controller's own code makes: the edits come from
``plan_changes`` / ``inverse`` / the actuator / the MIG state machine run on realistic objects, not from a
hand-written list, so the policy and the code cannot drift apart unnoticed.

Each write is checked as the API server would (``tests.vap``): ``oldObject`` the object before, ``object``
after the patch plus the server's own metadata changes, the controller's ServiceAccount as the user.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import timedelta
from typing import Any

import jsonpatch
import pytest
import yaml

from recommender.controller import records as rec
from recommender.controller.changes import ObjectRef, desired_from, inverse, plan_changes, to_patch
from recommender.controller.kube import KINDS, Kube
from recommender.controller.loop import Controller
from recommender.controller.mig import MigSettings, advance
from recommender.core import plan as m
from recommender.core.annotations import MIG_CONFIG_LABEL as MIG_CONFIG
from recommender.core.annotations import MIG_CONFIG_STATE_LABEL as MIG_STATE
from recommender.core.inventory import Sharing
from recommender.mechanisms.hami import HamiShare
from recommender.mechanisms.kai import KaiShare
from recommender.mechanisms.mps import MpsShare
from tests import planfixture as pf
from tests import vap
from tests.controllerfixture import NAME, NS, auto_spec, deployment, plan, policy, recommendation, snapshot
from tests.controllerfixture import with_allocation as alloc
from tests.kubefixture import container, gpu_node, manifest, pod_from, template
from tests.kubewrite import WriteCluster
from tests.test_controller_keda import report_triggers, scaled_object, with_queue_trigger
from tests.test_deploy import DEPLOY, _render

NOW = pf.END
UNSHARED = {"nvidia.com/gpu.sharing-strategy": "none"}
MPS_ENV = [{"name": "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "value": "40"}, {"name": "HF_HOME", "value": "/cache"},
           {"name": "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "value": "0=30000M"},
           {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}]


def realistic(obj: dict[str, Any], kind: str = "Deployment") -> dict[str, Any]:
    """``obj`` with what a real workload carries and the policy must keep: volumes, mounts, a sidecar, an
    init container, security contexts, tolerations, a service account, server-set metadata."""
    obj = copy.deepcopy(obj)
    obj["kind"] = kind
    obj["metadata"] |= {"generation": 7, "resourceVersion": "4242", "creationTimestamp": "2026-01-01T00:00:00Z"}
    obj["metadata"].setdefault("annotations", {})["deployment.kubernetes.io/revision"] = "3"
    pod = obj["spec"]["template"]["spec"]
    pod |= {"serviceAccountName": "llm", "volumes": [{"name": "cache", "emptyDir": {}}],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "securityContext": {"runAsNonRoot": True}, "initContainers": [{"name": "fetch", "image": "busybox"}]}
    pod["containers"][0] |= {"volumeMounts": [{"name": "cache", "mountPath": "/cache"}],
                             "securityContext": {"allowPrivilegeEscalation": False}}
    pod["containers"].append({"name": "proxy", "image": "envoyproxy/envoy:v1.31",
                              "resources": {"limits": {"cpu": "1", "memory": "256Mi"}}})
    if kind == "StatefulSet":
        obj["spec"] |= {"serviceName": NAME, "volumeClaimTemplates": []}
    return obj


def workloads() -> dict[str, dict[str, Any]]:
    """Objects that exercise every branch of ``plan_changes``: vLLM flags bare, ``=`` or absent, no args at
    all, MIG/whole/HAMi/KAI resources, MPS env (literal and valueFrom), node selectors, pod annotations."""
    out = {"bare flags": realistic(deployment(limits={"nvidia.com/gpu": "1", "cpu": "8"})),
           "= flags": realistic(deployment(args=["--model", "m", "--gpu-memory-utilization=.9", "--max-num-seqs=64"])),
           "no flags": realistic(deployment(args=["--model", "m"])),
           "mig slice": realistic(deployment(limits={"nvidia.com/mig-3g.40gb": "1"})),
           "hami": realistic(deployment(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"})),
           "statefulset": realistic(deployment(), "StatefulSet")}
    no_args = realistic(deployment())
    del no_args["spec"]["template"]["spec"]["containers"][0]["args"]
    mps = realistic(deployment())
    mps["spec"]["template"]["spec"]["containers"][0]["env"] = copy.deepcopy(MPS_ENV)
    mps_selected = copy.deepcopy(mps)
    mps_selected["spec"]["template"]["spec"]["nodeSelector"] = {"pool": "a", "nvidia.com/gpu.sharing-strategy": "mps"}
    kai = realistic(deployment(limits={"cpu": "4"}, pod_annotations={"gpu-fraction": "0.5", "team": "search"}))
    kai_bare = realistic(deployment(limits={"cpu": "4"}))
    del kai_bare["spec"]["template"]["spec"]["containers"][0]["resources"]
    return out | {"no args": no_args, "mps env": mps, "mps env, selector": mps_selected, "kai share": kai,
                  "kai, no resources": kai_bare}


def desires() -> dict[str, Any]:
    """What the real ``desired_from`` makes of each kind of recommendation."""
    base = recommendation()  # MIG 3g.40gb, vLLM gpu-memory-utilization 0.82, 4 replicas

    def held(r: m.Recommendation, sharing: Sharing) -> m.Recommendation:
        return replace(r, workload=replace(r.workload, allocation=replace(r.workload.allocation, sharing=sharing)))

    whole = alloc(base, sharing=Sharing.EXCLUSIVE, share=None, gpus=1)
    vllm = replace(base.recommended.vllm, max_num_seqs=48) if base.recommended and base.recommended.vllm else None
    return {
        "replicas, vllm, mig": desired_from(alloc(base, vllm=vllm), ["replicas", "vllm", "mig"]),
        "mps": desired_from(alloc(base, sharing=Sharing.MPS, share=MpsShare(35.0, 20480.0)), ["mps"]),
        "hami": desired_from(alloc(base, sharing=Sharing.HAMI, share=HamiShare(20480.0, 30.0)), ["hami"]),
        "kai": desired_from(alloc(base, sharing=Sharing.KAI, share=KaiShare(0.25)), ["kai"]),
        "whole off mig": desired_from(held(whole, Sharing.MIG), ["exclusive"]),
        "whole off mps": desired_from(held(whole, Sharing.MPS), ["exclusive"], exclusive_nodes=UNSHARED),
        "whole off hami": desired_from(held(whole, Sharing.HAMI), ["exclusive"]),
        "whole off kai": desired_from(held(whole, Sharing.KAI), ["exclusive"]),
    }


def _patched(obj: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    return vap.served(obj, jsonpatch.apply_patch(copy.deepcopy(obj), ops))


OWN = {rec.LAST_CHANGE: '{"workload": "x"}', rec.RECOMMENDATION: "{}"}


def _record_ops(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The annotations the actuator writes beside a change (its record, the recommendation), as it adds them.
    The record's signature is written by the real actuator in the end-to-end tests below."""
    if (obj.get("metadata") or {}).get("annotations") is None:
        return [{"op": "add", "path": "/metadata/annotations", "value": dict(OWN)}]
    return [{"op": "add", "path": "/metadata/annotations/" + k.replace("~", "~0").replace("/", "~1"), "value": v}
            for k, v in OWN.items()]


def test_every_planned_change_and_its_inverse_is_allowed() -> None:
    checked: dict[str, int] = {}
    for want, desired in desires().items():
        for have, obj in workloads().items():
            cs = plan_changes(obj, desired)
            if cs.empty:
                continue
            after = _patched(obj, to_patch(cs, "4242", _record_ops(obj)))
            verdict = vap.update(obj["kind"], obj, after)
            assert verdict.matched == ["gpu-rightsizer-workloads"] and verdict.allowed, (want, have, verdict)
            back = _patched(after, to_patch(inverse(cs), None, _record_ops(after)))
            assert vap.update(obj["kind"], after, back).allowed, (want, have, "rollback")
            checked[want] = checked.get(want, 0) + 1
    assert checked.keys() == desires().keys(), f"a recommendation changed nothing anywhere: {checked}"
    assert sum(checked.values()) >= 30


class Recording(Kube):
    """The controller's client that keeps, for every write, what admission sees: (operation, kind, old, new)."""

    def __init__(self, cluster: WriteCluster) -> None:
        super().__init__(cluster.api_client(), 5.0)
        self.cluster = cluster
        self.writes: list[tuple[str, str, dict[str, Any] | None, dict[str, Any]]] = []

    def create(self, kind: str, namespace: str | None, body: dict[str, Any]) -> dict[str, Any]:
        out = super().create(kind, namespace, body)
        self.writes.append(("CREATE", kind, None, out or body))
        return out

    def patch(self, kind: str, namespace: str | None, name: str, body: Any, *, subresource: str = "",
              merge: bool = False) -> dict[str, Any]:
        old = self.cluster.obj(kind, namespace, name) if not subresource else None
        out = super().patch(kind, namespace, name, body, subresource=subresource, merge=merge)
        if old is not None:
            self.writes.append(("UPDATE", kind, old, vap.served(old, self.cluster.obj(kind, namespace, name))))
        return out


def _assert_allowed(kube: Recording, patched: set[str]) -> None:
    """Every write of a kind a policy covers was matched and allowed; ``patched`` kinds were among them.
    (Events and the Lease need no field policy: see UNLIMITED below.)"""
    assert patched <= {k for op, k, _, _ in kube.writes if op == "UPDATE"}, kube.writes
    for op, kind, old, new in kube.writes:
        if kind in vap.RESOURCES:
            verdict = vap.write(op, kind, old, new)
            assert verdict.matched and verdict.allowed, (op, kind, verdict)


def _controller(kube: Kube, rec_: m.Recommendation | None = None) -> Controller:
    recs = () if rec_ is None else (rec_,)
    return Controller(kube, lambda now, _: (plan(*recs, now=now), snapshot(now, .3, .3)), clock=lambda: NOW)


def test_the_controllers_own_writes_and_rollback_are_allowed() -> None:
    spec = auto_spec(allowedMechanisms=["replicas", "vllm", "mig"])
    obj = realistic(deployment(limits={"nvidia.com/gpu": "1"}))
    with WriteCluster([obj, policy("auto", spec)]) as cluster:
        kube = Recording(cluster)
        ctl = _controller(kube)
        report = ctl.reconcile()
        assert [o.status for o in report.outcomes] == ["applied"], report
        assert ctl.actuator.rollback(ObjectRef("Deployment", NS, NAME), NOW, "test").status == "rolled-back"
        assert len([w for w in kube.writes if w[1] == "Deployment"]) >= 3  # change, recommendation, rollback
        _assert_allowed(kube, {"Deployment"})


def test_keda_bounds_and_thresholds_and_their_rollback_are_allowed() -> None:
    so = scaled_object(triggers=report_triggers("5", "10"))
    with WriteCluster([deployment(), so, policy("auto", auto_spec())], crds=["ScaledObject"]) as cluster:
        kube = Recording(cluster)
        ctl = _controller(kube, with_queue_trigger())
        report = ctl.reconcile()
        assert [o.status for o in report.outcomes] == ["applied"], report
        assert ctl.actuator.rollback(ObjectRef("Deployment", NS, NAME), NOW, "test").status == "rolled-back"
        _assert_allowed(kube, {"Deployment", "ScaledObject"})


def test_hpa_bounds_and_their_rollback_are_allowed() -> None:
    if "HorizontalPodAutoscaler" not in KINDS:
        pytest.skip("the controller's client does not write HPAs on this branch (i37-autoscalers adds it)")
    spec = {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": NAME}, "minReplicas": 1,
            "maxReplicas": 10, "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                "type": "Utilization", "averageUtilization": 80}}}]}
    hpa = manifest("HorizontalPodAutoscaler", NS, f"{NAME}-hpa", spec)
    with WriteCluster([deployment(), hpa, policy("auto", auto_spec())]) as cluster:
        kube = Recording(cluster)
        ctl = _controller(kube)
        assert [o.status for o in ctl.reconcile().outcomes] == ["applied"]
        assert ctl.actuator.rollback(ObjectRef("Deployment", NS, NAME), NOW, "test").status == "rolled-back"
        _assert_allowed(kube, {"Deployment", "HorizontalPodAutoscaler"})


@pytest.mark.parametrize(("outcome", "labels"), [
    ("success", {MIG_CONFIG: "all-disabled", MIG_STATE: "success"}),
    ("failed", {MIG_CONFIG: "all-disabled"}),
    ("failed", {}),  # no label before: the revert removes it
])
def test_every_step_of_a_mig_change_is_allowed(outcome: str, labels: dict[str, str]) -> None:
    node = gpu_node("gpu-a", "NVIDIA-A100-SXM4-80GB", 81920, labels=labels)
    node["spec"] = {"podCIDR": "10.0.1.0/24", "taints": [{"key": "gpu", "effect": "NoSchedule"}]}
    pod = pod_from(None, NS, "llama-0", template({"app": "x"}, container("vllm", "vllm", {"nvidia.com/gpu": "1"})),
                   "gpu-a")
    parted = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"config.yaml": "version: v1\n", "other": "kept"},
              "metadata": {"name": "gpu-rightsizer-mig-parted-config", "namespace": "gpu-operator"}}
    settings = MigSettings(configmap=("gpu-operator", "gpu-rightsizer-mig-parted-config"))
    layouts = {"version": "v1", "mig-configs": {"custom-a": [{"devices": "all", "mig-enabled": True}]}}
    with WriteCluster([node, pod, parted]) as cluster:
        kube = Recording(cluster)
        phases = [advance(kube, "gpu-a", "custom-a", NOW + timedelta(minutes=i), True, settings, layouts).phase
                  for i in range(3)]
        assert phases == ["draining", "draining", "configuring"]
        cluster.edit("Node", None, "gpu-a", {"metadata": {"labels": {MIG_STATE: outcome}}})  # the MIG manager
        assert advance(kube, "gpu-a", None, NOW + timedelta(minutes=4), False, settings).phase in ("done", "reverted")
        _assert_allowed(kube, {"Node", "ConfigMap"})
        assert len([w for w in kube.writes if w[1] == "Node"]) == 3  # cordon, label, uncordon or revert


# Kinds the controller's client knows that need no field policy, and why (RBAC already narrows them).
UNLIMITED = {"Pod": "read, and create on pods/eviction only", "Event": "create only",
             "Lease": "its own, by name", "PodDisruptionBudget": "read only",
             "GPURightsizingPolicy": "patch on the status subresource only"}


def test_every_kind_the_controller_can_write_is_covered_by_a_policy() -> None:
    """A kind added to the controller's client (an HPA, a Secret...) must be limited here, or say why not."""
    covered = {(g, res) for p in vap.shipped() for r in p.rules for g in r["apiGroups"] for res in r["resources"]}
    for kind, k in KINDS.items():
        assert (k.group, k.plural) in covered or kind in UNLIMITED, f"{kind}: no admission policy limits it"
    assert not {(KINDS[k].group, KINDS[k].plural) for k in UNLIMITED if k in KINDS} & covered


def test_kustomize_renders_the_policies_exactly_as_written() -> None:
    """kubectl kustomize (v2.0.3 and v5 alike) must not reflow an expression: the tests run the rendered ones."""
    source = list(yaml.safe_load_all((DEPLOY / "overlays" / "auto" / "admission-policy.yaml").read_text()))
    rendered = [d for d in _render("auto") if d["kind"].startswith("ValidatingAdmissionPolicy")]
    assert sorted(rendered, key=str) == sorted(source, key=str)
    assert {p.name for p in vap.shipped()} == {d["metadata"]["name"] for d in source
                                                if d["kind"] == "ValidatingAdmissionPolicy"}


def test_a_dra_claim_switch_its_new_template_and_its_rollback_are_allowed() -> None:
    """Auto on a DRA Deployment: the template it creates (ours, owned) and the resourceClaims reference it
    switches, then the rollback that switches it back."""
    from tests.test_controller_dra import KINDS as DRA_KINDS
    from tests.test_controller_dra import NAME as DRA_NAME
    from tests.test_controller_dra import dra_rec, objects

    with WriteCluster(objects(), crds=DRA_KINDS) as cluster:
        kube = Recording(cluster)
        rec_ = dra_rec()
        ctl = Controller(kube, lambda now, _: (plan(rec_, now=now), snapshot(now, .3, .3)), clock=lambda: NOW)
        assert [o.status for o in ctl.reconcile().outcomes] == ["applied"]
        assert ctl.actuator.rollback(ObjectRef("Deployment", NS, DRA_NAME), NOW, "test").status == "rolled-back"
        assert [k for op, k, _, _ in kube.writes if op == "CREATE" and k.startswith("Resource")] == [
            "ResourceClaimTemplate"]
        _assert_allowed(kube, {"Deployment"})
