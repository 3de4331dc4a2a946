"""Auto on a DRA workload: a claim template of ours (labelled, owned by the workload) and the pod template's
``resourceClaims`` reference switched to it with a ``test`` op on the old name; rollback restores the old name; a
template the workload does not own, or one edited between plan and apply, writes nothing."""

from __future__ import annotations

import copy
import json
from typing import Any

import kubernetes_validate
from click.testing import CliRunner

from recommender.cli.main import main
from recommender.controller.changes import ObjectRef
from recommender.controller.changeset import Change
from recommender.controller.loop import Controller
from recommender.controller.managed import unmanaged
from recommender.core.annotations import LAST_CHANGE, MANAGED_BY, MANAGED_BY_LABEL
from recommender.core.inventory import Sharing
from recommender.mechanisms.dra import MIG_CLASS, DraShare
from tests import planfixture as pf
from tests.controllerfixture import plan, policy, recommendation, snapshot, with_allocation
from tests.kubewrite import EditedMidway, WriteCluster
from tests.test_kubernetes_dra import K8S_DRA, NS, claim_template, dra_deployment

NOW = pf.END
NAME = "chat"
KEY = f"{NS}/Deployment/{NAME}"
OURS = "chat-gpu-1g-10gb"
REF = "/spec/template/spec/resourceClaims/0/resourceClaimTemplateName"
KINDS = ("ResourceClaim", "ResourceClaimTemplate")


def dra_rec() -> Any:
    """``chat`` recommended a 1g.10gb MIG device through a claim template."""
    return with_allocation(recommendation(NAME), sharing=Sharing.DRA, share=DraShare(MIG_CLASS, 1, "1g.10gb"),
                           gpus=0)


def objects(owned: bool = True) -> list[dict[str, Any]]:
    """The DRA Deployment of test_kubernetes_dra with its pod's claim, the template ``chat-mig`` owned by the
    Deployment (``owned``) or standing alone, and an Auto policy that allows DRA."""
    deploy, rs, pod, claim = dra_deployment()
    tmpl = claim_template()
    if owned:
        tmpl["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "Deployment", "name": NAME,
                                                "uid": deploy["metadata"]["uid"]}]
    spec = {"target": {"workloadRef": {"kind": "Deployment", "name": NAME}}, "mode": "Auto",
            "allowedMechanisms": ["dra"]}
    return [deploy, rs, pod, claim, tmpl, policy("dra", spec)]


def cycle(cluster: WriteCluster, kube: Any = None) -> Any:
    rec = dra_rec()
    return Controller(kube or cluster.kube(), lambda now, _: (plan(rec, now=now), snapshot(now, .3, .3)),
                      clock=lambda: NOW).reconcile()


def ref_of(cluster: WriteCluster) -> str:
    return str(cluster.obj("Deployment", NS, NAME)["spec"]["template"]["spec"]["resourceClaims"][0]
               ["resourceClaimTemplateName"])


def test_auto_creates_our_template_switches_the_reference_and_rollback_restores_it() -> None:
    before = objects()[0]
    with WriteCluster(objects(), crds=KINDS) as cluster:
        report = cycle(cluster)
        (out,) = report.outcomes
        assert out.status == "applied", report
        assert f"create ResourceClaimTemplate {OURS}" in out.message and "chat-mig → chat-gpu-1g-10gb" in out.message
        made = cluster.obj("ResourceClaimTemplate", NS, OURS)
        assert made["metadata"]["labels"] == {MANAGED_BY_LABEL: MANAGED_BY}
        (owner,) = made["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("Deployment", NAME, before["metadata"]["uid"])
        request = made["spec"]["spec"]["devices"]["requests"][0]
        assert request["exactly"]["deviceClassName"] == MIG_CLASS and "1g.10gb" in json.dumps(request)
        kubernetes_validate.validate(made, K8S_DRA, strict=True)
        assert ref_of(cluster) == OURS
        dep = cluster.obj("Deployment", NS, NAME)
        record = json.loads(dep["metadata"]["annotations"][LAST_CHANGE])
        assert record["sets"][0]["changes"] == [[REF, "resourceClaims gpu template", "chat-mig", OURS]]
        assert cluster.exists("ResourceClaimTemplate", NS, "chat-mig")  # theirs: never deleted

        again = cycle(cluster).outcomes[0]  # applied already: nothing more, the template reused
        assert again.status in ("no-change", "blocked") and ref_of(cluster) == OURS, again

        out = CliRunner().invoke(main, ["rollback", KEY, "--server", cluster.url])
        assert out.exit_code == 0, out.output
        assert cluster.obj("Deployment", NS, NAME)["spec"] == before["spec"]
        # ours stays: owned by the workload (collected with it), reused if the change comes back
        assert cluster.exists("ResourceClaimTemplate", NS, OURS)


def test_a_template_the_workload_does_not_own_is_not_switched_and_nothing_is_written() -> None:
    with WriteCluster(objects(owned=False), crds=KINDS) as cluster:
        (out,) = cycle(cluster).outcomes
        assert out.status == "no-change" and "dra: ResourceClaimTemplate llm/chat-mig is not owned by" in out.message
        assert not cluster.exists("ResourceClaimTemplate", NS, OURS)
        dep = cluster.obj("Deployment", NS, NAME)
        assert dep["spec"] == objects()[0]["spec"] and LAST_CHANGE not in (dep["metadata"].get("annotations") or {})


def test_an_object_of_our_name_that_is_not_ours_is_never_overwritten() -> None:
    squatter = claim_template()
    squatter["metadata"] = {"name": OURS, "namespace": NS, "uid": "uid-x"}
    with WriteCluster([*objects(), squatter], crds=KINDS) as cluster:
        (out,) = cycle(cluster).outcomes
        assert "exists and is not ours (not overwritten)" in out.message and ref_of(cluster) == "chat-mig", out
        assert cluster.obj("ResourceClaimTemplate", NS, OURS)["metadata"] == squatter["metadata"]


def test_a_reference_changed_between_plan_and_apply_fails_the_test_op_and_leaves_nothing() -> None:
    theirs = copy.deepcopy(objects()[0]["spec"]["template"])
    theirs["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = "chat-mig-v2"
    with WriteCluster(objects(), crds=KINDS) as cluster:
        kube = EditedMidway(cluster, "Deployment", NS, NAME, {"spec": {"template": theirs}})
        (out,) = cycle(cluster, kube).outcomes
        assert out.status == "conflict", out
        assert ref_of(cluster) == "chat-mig-v2"  # theirs kept
        assert not cluster.exists("ResourceClaimTemplate", NS, OURS)  # our template deleted again
        assert LAST_CHANGE not in (cluster.obj("Deployment", NS, NAME)["metadata"].get("annotations") or {})


def test_the_allow_list_takes_exactly_a_switch_to_a_claim_of_ours() -> None:
    obj = objects()[0]
    assert unmanaged("Deployment", [Change(REF, "t", "chat-mig", OURS)], obj) is None
    assert unmanaged("Deployment", [Change(REF.replace("Template", ""), "t", "shared", "chat-gpu-mps-25")], obj) is None
    for bad in (Change(REF, "t", "chat-mig", "someone-elses"), Change(REF, "t", None, OURS),
                Change(REF, "t", "chat-mig", None),
                Change("/spec/template/spec/resourceClaims/0/name", "t", "gpu", "x"),
                Change("/spec/template/spec/resourceClaims", "t", None, [{"name": "gpu"}]),
                Change(REF, "t", "chat-mig", "chat-gpu-Bad_Name")):
        assert unmanaged("Deployment", [bad], obj) is not None, bad
    assert ObjectRef("Deployment", NS, NAME).key == KEY
