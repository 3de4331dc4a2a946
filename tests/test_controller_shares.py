"""HAMi limits, KAI's gpu-fraction annotation and whole GPUs in place of a slice, a share, MPS or time-slicing
(on unshared nodes, once one could take a pod), carried out like every other mechanism: guarded JSON patch on
the pod template, previous values recorded, ``rightsizer rollback`` restores them."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import jsonpatch
import pytest
from click.testing import CliRunner

from recommender.cli.main import main
from recommender.controller.changes import Desired, apply_local, desired_from, inverse, plan_changes, to_patch
from recommender.controller.loop import Controller
from recommender.core.annotations import LAST_CHANGE
from recommender.core.inventory import Sharing
from recommender.mechanisms.base import PodEdits
from recommender.mechanisms.hami import HamiShare
from recommender.mechanisms.kai import KaiShare
from recommender.mechanisms.mig import MigShare
from tests import planfixture as pf
from tests.controllerfixture import (
    KEY,
    NAME,
    NS,
    deployment,
    plan,
    pods_of,
    policy,
    recommendation,
    snapshot,
    with_allocation,
)
from tests.kubefixture import gpu_node
from tests.kubewrite import EditedMidway, WriteCluster

NOW = pf.END
HAMI_NOW = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "40960", "nvidia.com/gpucores": "60"}
HAMI_NEW = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20480", "nvidia.com/gpucores": "30"}  # hami_rec()


def hami_rec() -> Any:
    return with_allocation(recommendation(), sharing=Sharing.HAMI, share=HamiShare(20480.0, 30.0))


def kai_rec() -> Any:
    return with_allocation(recommendation(), sharing=Sharing.KAI, share=KaiShare(0.5))


def spec_for(*mechanisms: str) -> dict[str, Any]:
    return {"target": {"workloadRef": {"kind": "Deployment", "name": NAME}}, "mode": "Auto",
            "allowedMechanisms": list(mechanisms)}


def container_of(obj: dict[str, Any]) -> dict[str, Any]:
    return dict(obj["spec"]["template"]["spec"]["containers"][0])


def reconcile_applied(cluster: WriteCluster, rec: Any) -> Any:
    """One Auto cycle planning ``rec`` against the cluster, which must apply it; its report."""
    report = Controller(cluster.kube(), lambda now, _: (plan(rec, now=now), snapshot(now, .3, .3)),
                        clock=lambda: NOW).reconcile()
    assert [o.status for o in report.outcomes] == ["applied"], report
    return report


def test_desired_carries_policies_shares_rendering_only_when_allowed() -> None:
    hami = desired_from(hami_rec(), ["hami"])
    assert dict(hami.edits.resources) == {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20480",
                                          "nvidia.com/gpucores": "30"}
    assert desired_from(hami_rec(), ["replicas"]).edits == PodEdits()
    assert dict(desired_from(kai_rec(), ["kai"]).edits.annotations) == {"gpu-fraction": "0.5"}
    assert desired_from(kai_rec(), ["hami"]).edits == PodEdits()
    unsized = desired_from(with_allocation(hami_rec(), share=HamiShare(None, None)), ["hami"])
    assert unsized.edits == PodEdits() and "neither gpumem nor gpucores" in unsized.reasons[0]


@pytest.mark.parametrize("limits", [
    HAMI_NOW,
    # gpumem-percentage cannot be combined with gpumem, and a MIG slice is not a vGPU: both go
    {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"},
    {"nvidia.com/mig-3g.40gb": "1"},
])
def test_hami_limits_and_requests_change_and_invert_exactly(limits: dict[str, str]) -> None:
    obj = deployment(limits=limits)
    cs = plan_changes(obj, desired_from(hami_rec(), ["hami"]))
    changed = container_of(apply_local(obj, cs))
    assert changed["resources"]["limits"] == HAMI_NEW
    assert changed["resources"]["requests"] == HAMI_NEW  # requests holding GPU resources mirror the limits
    assert apply_local(apply_local(obj, cs), inverse(cs)) == obj
    assert plan_changes(apply_local(obj, cs), desired_from(hami_rec(), ["hami"])).empty  # idempotent


def test_hami_leaves_requests_without_gpu_resources_to_default_to_the_limits() -> None:
    obj = deployment(limits=HAMI_NOW)
    obj["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "2"}
    changed = container_of(apply_local(obj, plan_changes(obj, desired_from(hami_rec(), ["hami"]))))
    assert changed["resources"] == {"limits": HAMI_NEW, "requests": {"cpu": "2"}}


def test_hami_patch_is_guarded_by_the_limits_it_read() -> None:
    obj = deployment(limits=HAMI_NOW)
    cs = plan_changes(obj, desired_from(hami_rec(), ["hami"]))
    theirs = PodEdits(resources=(("nvidia.com/gpumem", "30000"),), drop_resources=("nvidia.com/gpumem-percentage",))
    moved = apply_local(obj, plan_changes(obj, Desired(edits=theirs)))
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(moved, to_patch(cs))


@pytest.mark.parametrize(("annotations", "expect"), [
    (None, {"gpu-fraction": "0.5"}),  # no annotations map yet: added whole, removed whole on rollback
    ({"gpu-fraction": "0.75", "team": "a"}, {"gpu-fraction": "0.5", "team": "a"}),
    ({"gpu-memory": "20000"}, {"gpu-fraction": "0.5"}),  # gpu-memory and gpu-fraction are alternatives
])
def test_kai_annotation_changes_and_inverts_exactly(annotations: dict[str, str] | None,
                                                    expect: dict[str, str]) -> None:
    obj = deployment(pod_annotations=annotations)
    cs = plan_changes(obj, desired_from(kai_rec(), ["kai"]))
    assert apply_local(obj, cs)["spec"]["template"]["metadata"]["annotations"] == expect
    assert apply_local(apply_local(obj, cs), inverse(cs)) == obj


def test_hami_auto_patches_the_container_limits_and_rollback_restores_them() -> None:
    with WriteCluster([deployment(limits=HAMI_NOW), policy("hami", spec_for("hami"))]) as cluster:
        reconcile_applied(cluster, hami_rec())
        c = container_of(cluster.obj("Deployment", NS, NAME))
        assert c["resources"]["limits"] == HAMI_NEW == c["resources"]["requests"]
        record = json.loads(cluster.obj("Deployment", NS, NAME)["metadata"]["annotations"][LAST_CHANGE])
        olds = {what: old for _, what, old, _new in record["sets"][0]["changes"]}
        assert olds["limits nvidia.com/gpumem"] == "40960" and olds["limits nvidia.com/gpucores"] == "60"

        out = CliRunner().invoke(main, ["rollback", KEY, "--server", cluster.url])
        assert out.exit_code == 0, out.output
        assert cluster.obj("Deployment", NS, NAME)["spec"] == deployment(limits=HAMI_NOW)["spec"]


def test_kai_auto_sets_the_pod_template_annotation_and_rollback_removes_it() -> None:
    with WriteCluster([deployment(), policy("kai", spec_for("kai"))]) as cluster:
        report = reconcile_applied(cluster, kai_rec())
        assert "pod annotations: (none) → {'gpu-fraction': '0.5'}" in report.outcomes[0].message
        tmpl = cluster.obj("Deployment", NS, NAME)["spec"]["template"]
        assert tmpl["metadata"]["annotations"] == {"gpu-fraction": "0.5"}

        out = CliRunner().invoke(main, ["rollback", KEY, "--server", cluster.url])
        assert out.exit_code == 0, out.output
        assert cluster.obj("Deployment", NS, NAME)["spec"] == deployment()["spec"]


def _their_limits() -> dict[str, Any]:
    """Someone sets gpumem to 30000 between our read and our patch."""
    limits = {**HAMI_NOW, "nvidia.com/gpumem": "30000"}
    c = {**container_of(deployment(limits=HAMI_NOW)), "resources": {"limits": limits}}
    return {"spec": {"template": {"spec": {"containers": [c]}}}}


def test_a_concurrent_edit_of_the_hami_limits_fails_the_patch_and_keeps_theirs() -> None:
    with WriteCluster([deployment(limits=HAMI_NOW), policy("hami", spec_for("hami", "replicas"))]) as cluster:
        kube = EditedMidway(cluster, "Deployment", NS, NAME, _their_limits())
        report = Controller(kube, lambda now, _: (plan(hami_rec(), now=now), snapshot(now, .3, .3)),
                            clock=lambda: NOW).reconcile()
        assert [o.status for o in report.outcomes] == ["conflict"]
        obj = cluster.obj("Deployment", NS, NAME)
        assert container_of(obj)["resources"]["limits"]["nvidia.com/gpumem"] == "30000"
        assert obj["spec"]["replicas"] == 2 and LAST_CHANGE not in (obj["metadata"].get("annotations") or {})


MIG_NOW = {"nvidia.com/mig-3g.40gb": "1"}


def whole_rec(held: Sharing = Sharing.MIG) -> Any:
    """Whole GPUs recommended for a service that runs on a 3g.40gb slice (or ``held``) and missed its objective."""
    r = with_allocation(recommendation(), sharing=Sharing.EXCLUSIVE, share=None, gpus=1)
    held_alloc = replace(r.workload.allocation, sharing=held,
                         share=MigShare("3g.40gb") if held is Sharing.MIG else None)
    return replace(r, workload=replace(r.workload, allocation=held_alloc))


def test_whole_gpus_replace_a_slice_only_where_exclusive_is_allowed() -> None:
    assert dict(desired_from(whole_rec(), ["exclusive"]).edits.resources) == {"nvidia.com/gpu": "1"}
    assert desired_from(whole_rec(), ["mig", "replicas"]).edits == PodEdits()
    mps = desired_from(whole_rec(Sharing.MPS), ["exclusive"])
    assert mps.edits == PodEdits() and "whole GPUs in place of mps are not applied" in mps.reasons[0]
    obj = deployment(limits=MIG_NOW)
    cs = plan_changes(obj, desired_from(whole_rec(), ["exclusive"]))
    changed = container_of(apply_local(obj, cs))
    assert changed["resources"] == {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}}
    assert apply_local(apply_local(obj, cs), inverse(cs)) == obj
    assert plan_changes(apply_local(obj, cs), desired_from(whole_rec(), ["exclusive"])).empty  # idempotent


def test_auto_moves_a_slice_to_a_whole_gpu_and_rollback_restores_the_slice() -> None:
    with WriteCluster([deployment(limits=MIG_NOW), policy("whole", spec_for("exclusive"))]) as cluster:
        reconcile_applied(cluster, whole_rec())
        c = container_of(cluster.obj("Deployment", NS, NAME))
        assert c["resources"]["limits"] == {"nvidia.com/gpu": "1"} == c["resources"]["requests"]
        record = json.loads(cluster.obj("Deployment", NS, NAME)["metadata"]["annotations"][LAST_CHANGE])
        assert {(what, old, new) for _, what, old, new in record["sets"][0]["changes"]} >= {
            ("limits nvidia.com/mig-3g.40gb", "1", None), ("limits nvidia.com/gpu", None, "1")}
        out = CliRunner().invoke(main, ["rollback", KEY, "--server", cluster.url])
        assert out.exit_code == 0, out.output
        assert cluster.obj("Deployment", NS, NAME)["spec"] == deployment(limits=MIG_NOW)["spec"]


HAMI_WHOLE = {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "100", "nvidia.com/gpumem-percentage": "100"}
KAI_SHARE = {"gpu-fraction": "0.5", "gpu-fraction-num-devices": "1", "team": "search"}


def test_whole_gpus_replace_a_hami_share_with_hamis_own_exclusive_limits() -> None:
    hami = desired_from(whole_rec(Sharing.HAMI), ["exclusive"])
    assert dict(hami.edits.resources) == HAMI_WHOLE and not hami.edits.drop_annotations and hami.moves_to is None
    obj = deployment(limits=HAMI_NOW)
    cs = plan_changes(obj, hami)
    changed = container_of(apply_local(obj, cs))["resources"]
    assert changed["limits"] == HAMI_WHOLE == changed["requests"]  # gpumem gone: exclusive with the percentage
    assert apply_local(apply_local(obj, cs), inverse(cs)) == obj
    assert plan_changes(apply_local(obj, cs), hami).empty


def _kai_deployment(resources: dict[str, Any] | None, **annotations: str) -> dict[str, Any]:
    obj = deployment(limits={"cpu": "4"}, pod_annotations={**KAI_SHARE, **annotations})
    c = obj["spec"]["template"]["spec"]["containers"][0]
    if resources is None:
        del c["resources"]
    else:
        c["resources"] = resources
    return obj


@pytest.mark.parametrize(("resources", "expect"), [
    ({"limits": {"cpu": "4"}, "requests": {"cpu": "4"}}, {"limits": {"cpu": "4", "nvidia.com/gpu": "1"},
                                                          "requests": {"cpu": "4"}}),
    ({"requests": {"cpu": "4"}}, {"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "4"}}),
    (None, {"limits": {"nvidia.com/gpu": "1"}}),
])
def test_whole_gpus_replace_a_kai_share_its_annotations_go_and_a_gpu_limit_comes(
        resources: dict[str, Any] | None, expect: dict[str, Any]) -> None:
    kai = desired_from(whole_rec(Sharing.KAI), ["exclusive"])
    assert dict(kai.edits.resources) == {"nvidia.com/gpu": "1"} and "gpu-fraction" in kai.edits.drop_annotations
    obj = _kai_deployment(resources)
    cs = plan_changes(obj, kai)
    after = apply_local(obj, cs)
    assert after["spec"]["template"]["metadata"]["annotations"] == {"team": "search"}
    assert container_of(after)["resources"] == expect  # GPU requests default to the limits
    assert apply_local(after, inverse(cs)) == obj
    assert plan_changes(after, kai).empty


def test_a_kai_share_names_its_container_and_one_not_found_changes_nothing() -> None:
    kai = desired_from(whole_rec(Sharing.KAI), ["exclusive"])
    obj = _kai_deployment(None, **{"gpu-fraction-container-name": "vllm"})
    sidecar = {"name": "proxy", "image": "envoy", "resources": {"limits": {"cpu": "1"}}}
    obj["spec"]["template"]["spec"]["containers"].insert(0, sidecar)
    after = apply_local(obj, plan_changes(obj, kai))
    assert [c.get("resources", {}).get("limits") for c in after["spec"]["template"]["spec"]["containers"]] == [
        {"cpu": "1"}, {"nvidia.com/gpu": "1"}]
    missing = _kai_deployment(None, **{"gpu-fraction-container-name": "gone"})
    cs = plan_changes(missing, kai)
    assert cs.empty and any("no container requests a GPU" in r for r in cs.skipped)


def test_auto_moves_a_kai_share_to_a_whole_gpu_and_rollback_restores_the_share() -> None:
    before = _kai_deployment({"limits": {"cpu": "4"}})
    with WriteCluster([before, policy("whole", spec_for("exclusive"))]) as cluster:
        reconcile_applied(cluster, whole_rec(Sharing.KAI))
        obj = cluster.obj("Deployment", NS, NAME)
        assert obj["spec"]["template"]["metadata"]["annotations"] == {"team": "search"}
        assert container_of(obj)["resources"] == {"limits": {"cpu": "4", "nvidia.com/gpu": "1"}}
        out = CliRunner().invoke(main, ["rollback", KEY, "--server", cluster.url])
        assert out.exit_code == 0, out.output
        assert cluster.obj("Deployment", NS, NAME)["spec"] == before["spec"]


UNSHARED = {"nvidia.com/gpu.sharing-strategy": "none"}
MPS_ENV = {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "40", "HF_HOME": "/cache",
           "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=30000M"}


def _shared_deployment(limits: dict[str, str], env: dict[str, str] | None = None,
                       node_selector: dict[str, str] | None = None) -> dict[str, Any]:
    obj = deployment(limits=limits)
    spec = obj["spec"]["template"]["spec"]
    if env:
        spec["containers"][0]["env"] = [{"name": k, "value": v} for k, v in env.items()]
    if node_selector is not None:
        spec["nodeSelector"] = dict(node_selector)
    return obj


def test_whole_gpus_off_mps_need_a_node_selector_of_unshared_nodes() -> None:
    unset = desired_from(whole_rec(Sharing.MPS), ["exclusive"])
    assert unset.edits == PodEdits() and "mechanisms.exclusive_node_selector" in unset.reasons[0]
    mps = desired_from(whole_rec(Sharing.MPS), ["exclusive"], exclusive_nodes=UNSHARED)
    assert dict(mps.edits.resources) == {"nvidia.com/gpu": "1"} and dict(mps.edits.node_selector) == UNSHARED
    assert mps.moves_to == (UNSHARED, 1)
    obj = _shared_deployment({"nvidia.com/gpu": "1"}, MPS_ENV)
    cs = plan_changes(obj, mps)
    after = apply_local(obj, cs)
    spec = after["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == UNSHARED
    assert spec["containers"][0]["env"] == [{"name": "HF_HOME", "value": "/cache"}]  # MPS's limits go, the rest stays
    assert spec["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert apply_local(after, inverse(cs)) == obj  # both env entries back where they were
    assert plan_changes(after, mps).empty


@pytest.mark.parametrize(("limits", "selector"), [
    ({"nvidia.com/gpu.shared": "1"}, None),  # renameByDefault: the shared resource gives way to nvidia.com/gpu
    ({"nvidia.com/gpu": "1"}, {"nvidia.com/gpu.sharing-strategy": "time-slicing", "pool": "a"}),
])
def test_whole_gpus_off_time_slicing_take_the_gpu_resource_and_the_unshared_nodes(
        limits: dict[str, str], selector: dict[str, str] | None) -> None:
    ts = desired_from(whole_rec(Sharing.TIME_SLICING), ["exclusive"], exclusive_nodes=UNSHARED)
    assert ts.edits.drop_env == ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")
    obj = _shared_deployment(limits, node_selector=selector)
    cs = plan_changes(obj, ts)
    after = apply_local(obj, cs)
    spec = after["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {**(selector or {}), **UNSHARED}
    whole = {"nvidia.com/gpu": "1"}
    assert spec["containers"][0]["resources"] == {"limits": whole, "requests": whole}
    assert apply_local(after, inverse(cs)) == obj
    assert plan_changes(after, ts).empty


def _cluster_objects(unshared_free: int | None, before: dict[str, Any]) -> list[dict[str, Any]]:
    """The MPS node the pods run on, and an unshared node with ``unshared_free`` of its 8 GPUs free (None: no
    unshared node); the rest of it held by another team's pods."""
    objs = [before, policy("whole", spec_for("exclusive")),
            gpu_node("mps-a", "NVIDIA-H100-80GB-HBM3", 81559, labels={"nvidia.com/gpu.sharing-strategy": "mps"})]
    objs += pods_of(before)
    if unshared_free is not None:
        objs.append(gpu_node("whole-a", "NVIDIA-H100-80GB-HBM3", 81559, labels=UNSHARED))
        other = deployment(name="other", limits={"nvidia.com/gpu": str(8 - unshared_free)})
        objs += [{**p, "spec": {**p["spec"], "nodeName": "whole-a"}} for p in pods_of(other, 1)]
    return objs


def _mps_cycle(cluster: WriteCluster) -> Any:
    return Controller(cluster.kube(), lambda now, _: (plan(whole_rec(Sharing.MPS), now=now), snapshot(now, .3, .3)),
                      clock=lambda: NOW, exclusive_nodes=UNSHARED).reconcile()


def test_auto_moves_an_mps_client_to_a_whole_gpu_on_an_unshared_node_and_rollback_brings_it_back() -> None:
    before = _shared_deployment({"nvidia.com/gpu": "1"}, MPS_ENV)
    with WriteCluster(_cluster_objects(2, before)) as cluster:
        report = _mps_cycle(cluster)
        assert [o.status for o in report.outcomes] == ["applied"], report
        spec = cluster.obj("Deployment", NS, NAME)["spec"]["template"]["spec"]
        assert spec["nodeSelector"] == UNSHARED and spec["containers"][0]["env"] == [{"name": "HF_HOME",
                                                                                      "value": "/cache"}]
        out = CliRunner().invoke(main, ["rollback", KEY, "--server", cluster.url])
        assert out.exit_code == 0, out.output
        assert cluster.obj("Deployment", NS, NAME)["spec"] == before["spec"]


@pytest.mark.parametrize(("free", "why"), [
    (None, "no node is labelled nvidia.com/gpu.sharing-strategy=none"),
    (0, "whole-a: 0 of 8 nvidia.com/gpu free"),
])
def test_no_unshared_node_to_take_the_pods_blocks_the_move_and_writes_nothing(free: int | None, why: str) -> None:
    before = _shared_deployment({"nvidia.com/gpu": "1"}, MPS_ENV)
    with WriteCluster(_cluster_objects(free, before)) as cluster:
        report = _mps_cycle(cluster)
        assert [o.status for o in report.outcomes] == ["blocked"] and why in report.outcomes[0].message, report
        obj = cluster.obj("Deployment", NS, NAME)
        assert obj["spec"] == before["spec"] and LAST_CHANGE not in (obj["metadata"].get("annotations") or {})


def test_a_mechanism_the_controller_cannot_apply_says_so_in_the_outcome() -> None:
    """``allowedMechanisms: [time-slicing]`` is accepted, but time-slicing is node-wide device-plugin config: the
    outcome says it was recommended only, instead of the field silently doing nothing."""
    ts = with_allocation(recommendation(), sharing=Sharing.TIME_SLICING, share=None)
    with WriteCluster([deployment(), policy("ts", spec_for("time-slicing"))]) as cluster:
        report = Controller(cluster.kube(), lambda now, _: (plan(ts, now=now), snapshot(now, .3, .3)),
                            clock=lambda: NOW).reconcile()
        (out,) = report.outcomes
        assert out.status == "no-change" and "time-slicing: set in the node's device-plugin config" in out.message
        assert cluster.obj("Deployment", NS, NAME)["spec"] == deployment()["spec"]
