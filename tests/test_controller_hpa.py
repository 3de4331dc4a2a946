"""Where a plain HorizontalPodAutoscaler (autoscaling/v2) owns a workload's replicas, Auto never writes its
``spec.replicas``: it moves the HPA's minReplicas/maxReplicas (guarded, one step at a time, undone on rollback)
where the policy allows replicas, leaves it alone where not, blocks where two autoscalers own one workload, and
writes no replicas at all when the autoscalers cannot be read."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import jsonpatch
import pytest
from click.testing import CliRunner

from recommender.cli.main import main
from recommender.controller.changes import apply_local, hpa_changes, inverse
from recommender.controller.kube import Kube
from recommender.controller.loop import Controller, Report
from recommender.core.annotations import LAST_CHANGE
from recommender.core.autoscalers import HPA, owners
from tests import planfixture as pf
from tests.controllerfixture import KEY, NAME, NS, auto_spec, deployment, plan, policy, recommendation, snapshot
from tests.kubefixture import manifest
from tests.kubewrite import WriteCluster

NOW = pf.END
HPA_NAME = f"{NAME}-hpa"
HPA_LIST = r"/horizontalpodautoscalers$"


def hpa(name: str = HPA_NAME, target: str = NAME, lo: int | None = 1, hi: int = 10, kind: str = "Deployment",
        api_version: str = "apps/v1", owner: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"scaleTargetRef": {"apiVersion": api_version, "kind": kind, "name": target},
                            "maxReplicas": hi,
                            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                                "type": "Utilization", "averageUtilization": 80}}}]}
    if lo is not None:
        spec["minReplicas"] = lo
    return manifest(HPA, NS, name, spec, owner=owner)


def scaled_object(name: str = f"{NAME}-so") -> dict[str, Any]:
    return {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-so-{name}"},
            "spec": {"scaleTargetRef": {"name": NAME}, "minReplicaCount": 1, "maxReplicaCount": 10,
                     "triggers": [{"type": "external", "metadata": {"scalerAddress": "x:9090"}}]}}


def run(cluster: WriteCluster, r: Any = None, kube: Kube | None = None) -> Report:
    return Controller(kube or cluster.kube(), lambda now, _: (plan(r or recommendation(), now=now),
                                                           snapshot(now, .3, .3)), clock=lambda: NOW).reconcile()


def with_bounds(lo: int, hi: int) -> Any:
    r = recommendation()
    assert r.scaling is not None
    return replace(r, scaling=replace(r.scaling, min_replicas=lo, max_replicas=hi))


def args_of(obj: dict[str, Any]) -> list[str]:
    return list(obj["spec"]["template"]["spec"]["containers"][0]["args"])


def test_under_an_hpa_auto_moves_its_bounds_not_the_replicas_and_rollback_restores_them() -> None:
    # recommendation(): scaling min 1, max 6, recommended 4; the Deployment at 2 replicas, the HPA 1..10
    with WriteCluster([deployment(), hpa(), policy("auto", auto_spec())]) as cluster:
        report = run(cluster)
        assert [o.status for o in report.outcomes] == ["applied"], report
        assert "hpa maxReplicas: 10 → 6" in report.outcomes[0].message
        live = cluster.obj(HPA, NS, HPA_NAME)["spec"]
        assert (live["minReplicas"], live["maxReplicas"]) == (1, 6)
        obj = cluster.obj("Deployment", NS, NAME)
        assert obj["spec"]["replicas"] == 2  # the HPA's, untouched
        assert args_of(obj)[3] == "0.82"  # the rest of the change goes on
        record = json.loads(obj["metadata"]["annotations"][LAST_CHANGE])
        assert [s["kind"] for s in record["sets"]] == [HPA, "Deployment"]
        assert all(c[0] != "/spec/replicas" for s in record["sets"] for c in s["changes"])

        out = CliRunner().invoke(main, ["rollback", KEY, "--server", cluster.url])
        assert out.exit_code == 0, out.output
        assert cluster.obj(HPA, NS, HPA_NAME)["spec"] == hpa()["spec"]
        assert cluster.obj("Deployment", NS, NAME)["spec"] == deployment()["spec"]


@pytest.mark.parametrize(("replicas", "rec_min", "rec_max", "expect"), [
    (2, 5, 8, (3, 8)),  # min 5 would force 2 → 5 at once: at most one step, 3
    (8, 1, 4, (1, 7)),  # max 4 would force 8 → 4 at once: at most one step, 7
    (4, 0, 6, (1, 6)),  # 0 is no HPA minimum without HPAScaleToZero: 1, and the reason says so
])
def test_hpa_bounds_force_at_most_one_step_and_keep_a_minimum_of_one(replicas: int, rec_min: int, rec_max: int,
                                                                      expect: tuple[int, int]) -> None:
    with WriteCluster([deployment(replicas=replicas), hpa(lo=3), policy("auto", auto_spec())]) as cluster:
        report = run(cluster, with_bounds(rec_min, rec_max))
        assert [o.status for o in report.outcomes] == ["applied"], report
        live = cluster.obj(HPA, NS, HPA_NAME)["spec"]
        assert (live["minReplicas"], live["maxReplicas"]) == expect
        assert cluster.obj("Deployment", NS, NAME)["spec"]["replicas"] == replicas
        assert ("HPAScaleToZero" in report.outcomes[0].message) == (rec_min == 0)


def test_without_replicas_allowed_the_hpa_is_not_touched_either() -> None:
    spec = auto_spec(allowedMechanisms=["vllm"])
    with WriteCluster([deployment(), hpa(), policy("auto", spec)]) as cluster:
        cluster.fail("GET", HPA_LIST, 403)  # not even read: a failure here would block nothing
        report = run(cluster)
        assert [o.status for o in report.outcomes] == ["applied"], report
        assert cluster.obj(HPA, NS, HPA_NAME) == hpa()
        obj = cluster.obj("Deployment", NS, NAME)
        assert obj["spec"]["replicas"] == 2 and args_of(obj)[3] == "0.82"


@pytest.mark.parametrize("second", [
    hpa("another"),
    scaled_object(),  # a ScaledObject that does not own the HPA is a second autoscaler
])
def test_two_autoscalers_on_one_workload_block_and_nothing_is_written(second: dict[str, Any]) -> None:
    objs = [deployment(), hpa(), second, policy("auto", auto_spec())]
    with WriteCluster(objs, crds=["ScaledObject"]) as cluster:
        report = run(cluster)
        assert [o.status for o in report.outcomes] == ["blocked"], report
        assert "2 autoscalers" in report.outcomes[0].message and f"{HPA}/{HPA_NAME}" in report.outcomes[0].message
        obj = cluster.obj("Deployment", NS, NAME)
        assert obj["spec"] == deployment()["spec"] and LAST_CHANGE not in obj["metadata"]["annotations"]
        assert cluster.obj(HPA, NS, HPA_NAME) == hpa()
        kind = second["kind"]
        assert cluster.obj(kind, NS, second["metadata"]["name"])["spec"] == second["spec"]


def test_kedas_own_hpa_is_the_scaledobjects_not_a_second_autoscaler() -> None:
    so = scaled_object()
    keda_hpa = hpa(f"keda-hpa-{so['metadata']['name']}", owner=so)
    with WriteCluster([deployment(), so, keda_hpa, policy("auto", auto_spec())], crds=["ScaledObject"]) as cluster:
        report = run(cluster)
        assert [o.status for o in report.outcomes] == ["applied"], report
        assert cluster.obj("ScaledObject", NS, so["metadata"]["name"])["spec"]["maxReplicaCount"] == 6
        assert cluster.obj(HPA, NS, keda_hpa["metadata"]["name"]) == keda_hpa  # KEDA's to set, not ours
        assert cluster.obj("Deployment", NS, NAME)["spec"]["replicas"] == 2


@pytest.mark.parametrize(("path", "status"), [(HPA_LIST, 403), (HPA_LIST, 500), (r"/scaledobjects$", 500)])
def test_when_the_autoscalers_cannot_be_read_no_replicas_are_written(path: str, status: int) -> None:
    with WriteCluster([deployment(), policy("auto", auto_spec())], crds=["ScaledObject"]) as cluster:
        cluster.fail("GET", path, status)
        report = run(cluster)
        assert [o.status for o in report.outcomes] == ["applied"], report
        assert "replicas left alone: cannot tell which autoscaler owns them" in report.outcomes[0].message
        obj = cluster.obj("Deployment", NS, NAME)
        assert obj["spec"]["replicas"] == 2 and args_of(obj)[3] == "0.82"
    only = auto_spec(allowedMechanisms=["replicas"])
    with WriteCluster([deployment(), policy("auto", only)], crds=["ScaledObject"]) as cluster:
        cluster.fail("GET", path, status)
        report = run(cluster)
        assert [o.status for o in report.outcomes] == ["blocked"], report
        assert f"HTTP {status}" in report.outcomes[0].message or "403 Forbidden" in report.outcomes[0].message
        assert cluster.obj("Deployment", NS, NAME)["spec"] == deployment()["spec"]


def test_an_hpa_of_a_missing_workload_or_another_kind_is_harmless() -> None:
    others = [hpa("ghost", target="gone"), hpa("sts", kind="StatefulSet"), hpa("crd", api_version="example.com/v1")]
    with WriteCluster([deployment(), *others, policy("auto", auto_spec())]) as cluster:
        report = run(cluster)
        assert [o.status for o in report.outcomes] == ["applied"] and report.errors == [], report
        assert cluster.obj("Deployment", NS, NAME)["spec"]["replicas"] == 3  # no autoscaler owns it: 2 → 3
        assert all(cluster.obj(HPA, NS, o["metadata"]["name"]) == o for o in others)


def test_a_failed_workload_patch_undoes_the_hpa_change() -> None:
    with WriteCluster([deployment(), hpa(), policy("auto", auto_spec())]) as cluster:
        cluster.fail("PATCH", f"/deployments/{NAME}$", 403)
        report = run(cluster)
        assert [o.status for o in report.outcomes] == ["failed"], report
        assert cluster.obj(HPA, NS, HPA_NAME)["spec"] == hpa()["spec"]  # undone
        assert LAST_CHANGE not in (cluster.obj("Deployment", NS, NAME)["metadata"].get("annotations") or {})


def test_a_rollback_leaves_the_replicas_to_an_hpa_that_appeared_since_and_undoes_the_rest() -> None:
    with WriteCluster([deployment(), policy("auto", auto_spec())]) as cluster:
        assert [o.status for o in run(cluster).outcomes] == ["applied"]
        assert cluster.obj("Deployment", NS, NAME)["spec"]["replicas"] == 3
        cluster.add(hpa())
        cluster.edit("Deployment", NS, NAME, {"spec": {"replicas": 5}})  # the HPA's doing
        out = CliRunner().invoke(main, ["rollback", KEY, "--server", cluster.url])
        assert out.exit_code == 0, out.output
        obj = cluster.obj("Deployment", NS, NAME)
        assert obj["spec"]["replicas"] == 5 and args_of(obj) == args_of(deployment())
        record = json.loads(obj["metadata"]["annotations"][LAST_CHANGE])
        assert record["status"] == "rolled-back" and f"replicas left to {HPA}/{HPA_NAME}" in record["reason"]


def test_a_rollback_that_cannot_tell_who_owns_the_replicas_is_refused_whole() -> None:
    with WriteCluster([deployment(), policy("auto", auto_spec())]) as cluster:
        assert [o.status for o in run(cluster).outcomes] == ["applied"]
        before = cluster.obj("Deployment", NS, NAME)
        cluster.fail("GET", HPA_LIST, 403)
        out = CliRunner().invoke(main, ["rollback", KEY, "--server", cluster.url])
        assert out.exit_code != 0 and "cannot tell which autoscaler" in out.output, out.output
        assert cluster.obj("Deployment", NS, NAME) == before  # nothing undone by half, the record still applied
        cluster.heal()
        assert CliRunner().invoke(main, ["rollback", KEY, "--server", cluster.url]).exit_code == 0
        assert cluster.obj("Deployment", NS, NAME)["spec"] == deployment()["spec"]


def test_hpa_changes_invert_exactly_and_fail_on_a_retargeted_hpa() -> None:
    for obj in (hpa(), hpa(lo=None), hpa(lo=0)):
        cs = hpa_changes(obj, 2, 4)
        assert [c.path for c in cs.changes] == ["/spec/minReplicas", "/spec/maxReplicas"]
        assert apply_local(apply_local(obj, cs), inverse(cs)) == obj
    assert hpa_changes(hpa(lo=None), 1, 10).empty  # an absent minReplicas is 1 already
    assert hpa_changes(hpa(lo=0), 0, 10).empty  # a cluster whose HPA sits at 0 allows it
    moved = hpa(target="other")
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        apply_local(moved, hpa_changes(hpa(), 2, 4))


def test_owners_fold_kedas_hpa_into_its_scaledobject_and_keep_an_orphaned_one() -> None:
    so = scaled_object()
    keda_hpa = hpa("keda-hpa-x", owner=so)
    assert [a.label for a in owners(NS, "Deployment", NAME, [keda_hpa], [so])] == [f"ScaledObject/{NAME}-so"]
    assert [a.kind for a in owners(NS, "Deployment", NAME, [keda_hpa], [])] == [HPA]  # its ScaledObject is gone
    assert owners("elsewhere", "Deployment", NAME, [hpa()], []) == ()
    assert owners(NS, "Deployment", NAME, [{"metadata": {"name": "x"}, "spec": "junk"}], []) == ()


@pytest.mark.parametrize(("overlay", "patches"), [
    ("recommend", False), ("auto", False), ("auto+opt-in", True), ("auto-cluster-wide", True),
    ("external-metrics", False)])
def test_every_overlay_reads_the_autoscalers_and_auto_patches_only_their_bounds(overlay: str, patches: bool) -> None:
    from tests.test_deploy import DEPLOY, _grants, _load, _render

    docs = _render(overlay.removesuffix("+opt-in"))
    if overlay.endswith("+opt-in"):  # Auto patches only in the namespaces opted in with this RoleBinding
        docs = (*docs, _load(DEPLOY / "overlays" / "auto" / "opt-in" / "namespace-rolebinding.yaml"))
    verbs: dict[tuple[str, str], set[str]] = {}
    for _, rule in _grants(docs):
        for group in rule["apiGroups"]:
            for res in rule["resources"]:
                verbs.setdefault((group, res), set()).update(rule["verbs"])
    for key in (("autoscaling", "horizontalpodautoscalers"), ("keda.sh", "scaledobjects")):
        assert {"list", "watch"} <= verbs.get(key, set()), key
        assert ("patch" in verbs[key]) is patches, key
