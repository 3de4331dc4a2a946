"""Where a KEDA ScaledObject owns a workload's replicas, Auto changes its minReplicaCount/maxReplicaCount
(guarded) and never the Deployment's ``spec.replicas``, which KEDA's HPA would fight."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import jsonpatch
import pytest
from click.testing import CliRunner

from policies.autoscalerobjects import autoscaler_objects
from recommender.cli.main import main
from recommender.controller.changes import apply_local, inverse, scaledobject_changes
from recommender.controller.kube import Kube
from recommender.controller.loop import Controller
from recommender.core.annotations import LAST_CHANGE
from recommender.core.plan import ScalingPlan
from recommender.outputs import jsondoc
from tests import planfixture as pf
from tests.controllerfixture import KEY, NAME, NS, auto_spec, deployment, plan, policy, recommendation, snapshot
from tests.kubewrite import WriteCluster

NOW = pf.END


def scaling(plan: ScalingPlan, namespace: str, name: str) -> dict[str, Any] | None:
    """The JSON report's ``scaling`` of ``plan`` for one workload, with the objects the pipeline would make."""
    return jsondoc.scaling(plan, autoscaler_objects(plan, namespace, name))


def scaled_object(name: str = NAME, kind: str | None = None, lo: int | None = 1, hi: int = 10,
                  triggers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    target: dict[str, Any] = {"name": name} | ({"kind": kind} if kind else {})
    spec: dict[str, Any] = {"scaleTargetRef": target, "maxReplicaCount": hi,
                            "triggers": triggers or [{"type": "external", "metadata": {"scalerAddress": "x:9090"}}]}
    if lo is not None:
        spec["minReplicaCount"] = lo
    return {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
            "metadata": {"name": f"{name}-so", "namespace": NS}, "spec": spec}


def run(cluster: WriteCluster, kube: Kube | None = None) -> Any:
    return Controller(kube or cluster.kube(), lambda now, _: (plan(now=now), snapshot(now, .3, .3)),
                      clock=lambda: NOW).reconcile()


def test_keda_owned_replicas_change_the_scaledobject_and_rollback_restores_it() -> None:
    # recommendation(): scaling min 1, max 6, recommended 4
    with WriteCluster([deployment(), scaled_object(), policy("auto", auto_spec())], crds=["ScaledObject"]) as cluster:
        report = run(cluster)
        assert [o.status for o in report.outcomes] == ["applied"], report
        assert "keda maxReplicaCount: 10 → 6" in report.outcomes[0].message
        so = cluster.obj("ScaledObject", NS, f"{NAME}-so")["spec"]
        assert (so["minReplicaCount"], so["maxReplicaCount"]) == (1, 6)
        obj = cluster.obj("Deployment", NS, NAME)
        assert obj["spec"]["replicas"] == 2  # KEDA's, untouched
        record = json.loads(obj["metadata"]["annotations"][LAST_CHANGE])
        assert [s["kind"] for s in record["sets"]] == ["ScaledObject", "Deployment"]

        out = CliRunner().invoke(main, ["rollback", KEY, "--server", cluster.url])
        assert out.exit_code == 0, out.output
        assert cluster.obj("ScaledObject", NS, f"{NAME}-so")["spec"] == scaled_object()["spec"]
        assert cluster.obj("Deployment", NS, NAME)["spec"] == deployment()["spec"]


def test_an_absent_min_replica_count_is_added_and_removed_again() -> None:
    with WriteCluster([deployment(), scaled_object(lo=None), policy("auto", auto_spec())],
                      crds=["ScaledObject"]) as cluster:
        assert [o.status for o in run(cluster).outcomes] == ["applied"]
        assert cluster.obj("ScaledObject", NS, f"{NAME}-so")["spec"]["minReplicaCount"] == 1
        assert CliRunner().invoke(main, ["rollback", KEY, "--server", cluster.url]).exit_code == 0
        assert "minReplicaCount" not in cluster.obj("ScaledObject", NS, f"{NAME}-so")["spec"]


def test_a_scaledobject_for_another_kind_or_name_does_not_own_the_replicas() -> None:
    objs = [deployment(), scaled_object(kind="StatefulSet"), scaled_object("other"), policy("auto", auto_spec())]
    with WriteCluster(objs, crds=["ScaledObject"]) as cluster:
        assert [o.status for o in run(cluster).outcomes] == ["applied"]
        assert cluster.obj("Deployment", NS, NAME)["spec"]["replicas"] == 3
        assert cluster.obj("ScaledObject", NS, f"{NAME}-so")["spec"]["maxReplicaCount"] == 10


@pytest.mark.parametrize(("replicas", "rec_min", "rec_max", "expect"), [
    (2, 5, 8, (3, 8)),  # min 5 would force 2 → 5 at once: at most one step, 3
    (8, 1, 4, (1, 7)),  # max 4 would force 8 → 4 at once: at most one step, 7
    (4, 1, 6, (1, 6)),  # 4 is inside 1..6: nothing forced, min/max as recommended
])
def test_keda_min_max_force_at_most_one_step_of_replicas(replicas: int, rec_min: int, rec_max: int,
                                                         expect: tuple[int, int]) -> None:
    r = recommendation()
    assert r.scaling is not None
    r = replace(r, scaling=replace(r.scaling, min_replicas=rec_min, max_replicas=rec_max))
    with WriteCluster([deployment(replicas=replicas), scaled_object(), policy("auto", auto_spec())],
                      crds=["ScaledObject"]) as cluster:
        report = Controller(cluster.kube(), lambda now, _: (plan(r, now=now), snapshot(now, .3, .3)),
                            clock=lambda: NOW).reconcile()
        assert [o.status for o in report.outcomes] == ["applied"], report
        so = cluster.obj("ScaledObject", NS, f"{NAME}-so")["spec"]
        assert (so["minReplicaCount"], so["maxReplicaCount"]) == expect


def test_without_keda_installed_the_deployment_replicas_change() -> None:
    with WriteCluster([deployment(), policy("auto", auto_spec())]) as cluster:
        assert [o.status for o in run(cluster).outcomes] == ["applied"]
        assert cluster.obj("Deployment", NS, NAME)["spec"]["replicas"] == 3


class FailsDeploymentPatch(Kube):
    """The ScaledObject patch goes through, the workload's then fails (e.g. RBAC, a concurrent edit)."""

    def __init__(self, cluster: WriteCluster) -> None:
        super().__init__(cluster.api_client(), 5.0)
        self.cluster = cluster

    def patch(self, kind: str, namespace: str | None, name: str, body: Any, **kw: Any) -> dict[str, Any]:
        if kind == "Deployment" and isinstance(body, list):  # theirs: the vLLM flag our test op guards moves
            c = {**deployment()["spec"]["template"]["spec"]["containers"][0], "args": ["--gpu-memory-utilization=0.7"]}
            self.cluster.edit("Deployment", NS, NAME, {"spec": {"template": {"spec": {"containers": [c]}}}})
        return super().patch(kind, namespace, name, body, **kw)


def test_a_failed_workload_patch_undoes_the_scaledobject_change() -> None:
    with WriteCluster([deployment(), scaled_object(), policy("auto", auto_spec())], crds=["ScaledObject"]) as cluster:
        report = run(cluster, FailsDeploymentPatch(cluster))
        assert [o.status for o in report.outcomes] == ["conflict"], report
        assert cluster.obj("ScaledObject", NS, f"{NAME}-so")["spec"] == scaled_object()["spec"]  # undone
        assert LAST_CHANGE not in (cluster.obj("Deployment", NS, NAME)["metadata"].get("annotations") or {})


def with_queue_trigger() -> Any:
    """recommendation() with the second trigger: 7 req/s and 14 requests waiting per replica."""
    r = recommendation()
    assert r.scaling is not None
    return replace(r, scaling=replace(r.scaling, waiting_per_replica=14.0))


def report_triggers(rate: str, waiting: str) -> list[dict[str, Any]]:
    """The external trigger, the report's own two Prometheus triggers (thresholds set by hand to ``rate`` and
    ``waiting``) and a trigger on a query of the user's own, in that order."""
    doc = scaling(with_queue_trigger().scaling, NS, NAME)
    assert doc is not None
    ours = [{**t, "metadata": {**t["metadata"], "threshold": v}}
            for t, v in zip(doc["keda"]["triggers"], (rate, waiting), strict=True)]
    theirs = {"type": "prometheus", "metadata": {"serverAddress": "http://p:9090", "query": "sum(my_queue)",
                                                 "threshold": "3"}}
    return [{"type": "external", "metadata": {"scalerAddress": "x:9090"}}, *ours, theirs]


def test_the_report_triggers_thresholds_follow_the_plan_and_roll_back() -> None:
    so = scaled_object(triggers=report_triggers("5", "10"))
    with WriteCluster([deployment(), so, policy("auto", auto_spec())], crds=["ScaledObject"]) as cluster:
        report = Controller(cluster.kube(), lambda now, _: (plan(with_queue_trigger(), now=now), snapshot(now, .3, .3)),
                            clock=lambda: NOW).reconcile()
        assert [o.status for o in report.outcomes] == ["applied"], report
        assert "keda threshold (vllm:request_success_total): 5 → 7" in report.outcomes[0].message
        assert "keda threshold (vllm:num_requests_waiting): 10 → 14" in report.outcomes[0].message
        live = cluster.obj("ScaledObject", NS, f"{NAME}-so")["spec"]["triggers"]
        assert [t["metadata"]["threshold"] for t in live[1:]] == ["7", "14", "3"]  # the user's own stays
        assert live[0] == so["spec"]["triggers"][0]
        assert CliRunner().invoke(main, ["rollback", KEY, "--server", cluster.url]).exit_code == 0
        assert cluster.obj("ScaledObject", NS, f"{NAME}-so")["spec"] == so["spec"]


def test_a_threshold_equal_in_value_is_not_rewritten_and_a_query_reading_both_or_a_value_target_is_left_alone(
        ) -> None:
    triggers = report_triggers("7.0", "10")
    both = {"type": "prometheus", "metadata": {"query": "sum(vllm:num_requests_waiting) + "
                                                        "sum(rate(vllm:request_success_total[1m]))", "threshold": "9"}}
    whole = {**triggers[2], "metricType": "Value"}  # the query's value itself, not per replica
    so = scaled_object(triggers=[*triggers, both, whole])
    cs = scaledobject_changes(so, 1, 10, (("vllm:request_success_total", "7"), ("vllm:num_requests_waiting", "14")))
    assert [c.path for c in cs.changes] == ["/spec/triggers/2/metadata/threshold"]
    assert len(cs.skipped) == 2 and "trigger 4" in cs.skipped[0] and "trigger 5: metricType Value" in cs.skipped[1]
    assert apply_local(apply_local(so, cs), inverse(cs)) == so


def test_a_reordered_trigger_list_fails_the_threshold_patch_instead_of_hitting_another_trigger() -> None:
    so = scaled_object(triggers=report_triggers("5", "10"))
    cs = scaledobject_changes(so, 1, 10, (("vllm:request_success_total", "7"),))
    moved = scaled_object(triggers=[so["spec"]["triggers"][i] for i in (0, 3, 2, 1)])  # index 1: the user's own
    moved["spec"]["triggers"][1]["metadata"]["threshold"] = "5"
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        apply_local(moved, cs)


@pytest.mark.parametrize(("rate", "waiting", "expect"), [
    ("1", "10", ["2", "14"]),  # 2 replicas carry 2 req/s: one replica fewer is a threshold of 2, no higher yet
    ("50", "100", ["33.3333", "66.6667"]),  # 7 and 14 would ask 15 replicas from 2: at most 3, so 2/3 of the old
])
def test_a_threshold_moves_the_hpa_by_at_most_one_step_of_replicas_at_todays_load(
        rate: str, waiting: str, expect: list[str]) -> None:
    so = scaled_object(triggers=report_triggers(rate, waiting))
    with WriteCluster([deployment(), so, policy("auto", auto_spec())], crds=["ScaledObject"]) as cluster:
        report = Controller(cluster.kube(), lambda now, _: (plan(with_queue_trigger(), now=now), snapshot(now, .3, .3)),
                            clock=lambda: NOW).reconcile()
        assert [o.status for o in report.outcomes] == ["applied"], report
        live = cluster.obj("ScaledObject", NS, f"{NAME}-so")["spec"]["triggers"]
        assert [t["metadata"]["threshold"] for t in live[1:3]] == expect
