"""The controller loop against kmock over real HTTP: Recommend, Auto, conflicts, rollback, failures."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from click.testing import CliRunner

from policies.replicas import Carried, recorded_capacity
from recommender.cli.main import main
from recommender.controller.kube import Kube
from recommender.controller.loop import Controller
from recommender.core.annotations import LAST_CHANGE
from recommender.core.annotations import RECOMMENDATION_ANNOTATION as RECOMMENDATION
from tests import planfixture as pf
from tests.controllerfixture import KEY, NAME, NS, auto_spec, deployment, plan, policy, recommendation, snapshot
from tests.kubewrite import EditedMidway, WriteCluster

NOW = pf.END


def controller(kube: Kube, at: list[datetime], p: Any = None, snap: Any = None, **kw: Any) -> Controller:
    return Controller(kube, lambda now, _: (p or plan(now=now), snap or snapshot(now, 0.3, 0.3)),
                      clock=lambda: at[0], **kw)


def args_of(obj: dict[str, Any]) -> list[str]:
    return list(obj["spec"]["template"]["spec"]["containers"][0]["args"])


def test_the_recorded_capacity_holds_only_for_the_shape_it_was_measured_on() -> None:
    """Read back after a restart, the capacity stands while the replicas keep the shape it was measured on."""
    since = NOW - timedelta(days=1)
    r = recommendation()
    r = replace(r, workload=replace(r.workload, shape_since=since))
    spec = {"target": {"selector": {"matchLabels": {"app": NAME}}}, "mode": "Recommend"}
    with WriteCluster([deployment(), policy("watch", spec)]) as cluster:
        assert controller(cluster.kube(), [NOW], plan(r)).reconcile().errors == []
        annotations = cluster.obj("Deployment", NS, NAME)["metadata"]["annotations"]
        assert json.loads(annotations[RECOMMENDATION])["shapeSince"] == since.isoformat()
        same = replace(r.workload, annotations=annotations)
        assert recorded_capacity(same) == Carried(10.0, f"recorded on the workload ({RECOMMENDATION}: measured)")
        assert recorded_capacity(replace(same, shape_since=NOW)) is None  # the replicas changed shape since


def test_recommend_writes_status_annotation_event_and_leaves_the_deployment_alone() -> None:
    spec = {"target": {"selector": {"matchLabels": {"app": NAME}}}, "mode": "Recommend"}
    with WriteCluster([deployment(), policy("watch", spec)]) as cluster:
        before = cluster.obj("Deployment", NS, NAME)
        report = controller(cluster.kube(), [NOW]).reconcile()
        after = cluster.obj("Deployment", NS, NAME)
        assert report.errors == [] and after["spec"] == before["spec"]
        shown = json.loads(after["metadata"]["annotations"][RECOMMENDATION])
        assert shown["workload"] == KEY and shown["migProfile"] == "3g.40gb" and shown["replicas"] == 4
        # the capacity, as the next plan reads it back from the workload after a controller restart
        read_back = replace(recommendation().workload, annotations=after["metadata"]["annotations"])
        assert recorded_capacity(read_back) == Carried(10.0, f"recorded on the workload ({RECOMMENDATION}: measured)")
        status = cluster.obj("GPURightsizingPolicy", NS, "watch")["status"]
        assert status["conditions"][0]["status"] == "True"
        assert [r["workload"] for r in status["recommendations"]] == [KEY]
        assert [e["reason"] for e in cluster.events(NS)] == ["RightsizerRecommendation"]
        controller(cluster.kube(), [NOW + timedelta(minutes=5)]).reconcile()
        assert len(cluster.events(NS)) == 1  # unchanged recommendation: no new Event


def test_malformed_policies_get_a_condition_that_says_why() -> None:
    ref = {"workloadRef": {"kind": "Deployment", "name": NAME}}
    bad: dict[str, tuple[dict[str, Any], str]] = {
        "both": ({"target": {**ref, "selector": {"matchLabels": {"a": "b"}}}}, "exactly one of workloadRef"),
        "bounds": ({"target": ref, "bounds": {"minReplicas": 5, "maxReplicas": 2}}, "minReplicas 5 > maxReplicas 2"),
        "cron": ({"target": ref, "maintenanceWindows": [{"schedule": "every night", "durationMinutes": 60}]},
                 "not a 5-field cron"),
        "mode": ({"target": ref, "mode": "Sometimes"}, "spec.mode"),
        "mech": ({"target": ref, "allowedMechanisms": ["teleport"]}, "unknown mechanism teleport"),
    }
    with WriteCluster([deployment(), *(policy(n, s) for n, (s, _) in bad.items())]) as cluster:
        report = controller(cluster.kube(), [NOW]).reconcile()
        for name, (_, why) in bad.items():
            cond = cluster.obj("GPURightsizingPolicy", NS, name)["status"]["conditions"][0]
            assert (cond["type"], cond["status"], cond["reason"]) == ("Valid", "False", "InvalidSpec")
            assert why in cond["message"], (name, cond["message"])
        assert len(report.errors) == len(bad)
        assert "annotations" not in cluster.obj("Deployment", NS, NAME)["metadata"]


def test_auto_patches_replicas_and_vllm_args_records_them_and_rollback_restores() -> None:
    with WriteCluster([deployment(), policy("auto", auto_spec())]) as cluster:
        report = controller(cluster.kube(), [NOW]).reconcile()
        assert [o.status for o in report.outcomes] == ["applied"], report
        obj = cluster.obj("Deployment", NS, NAME)
        assert obj["spec"]["replicas"] == 3  # 2 → 4 recommended, at most 1 per step
        assert args_of(obj)[3] == "0.82" and args_of(obj)[5] == "256"
        record = json.loads(obj["metadata"]["annotations"][LAST_CHANGE])
        olds = {c[1]: c[2] for c in record["sets"][0]["changes"]}
        assert olds == {"replicas": 2, "vllm --gpu-memory-utilization": "0.9"}
        shown = json.loads(obj["metadata"]["annotations"][RECOMMENDATION])  # Auto records it too, for restarts
        assert (shown["replicas"], shown["replicaCapacity"]) == (4, 10.0)
        assert "RightsizerApplied" in [e["reason"] for e in cluster.events(NS)]
        status = cluster.obj("GPURightsizingPolicy", NS, "auto")["status"]
        assert status["lastActions"][-1]["result"] == "applied"

        out = CliRunner().invoke(main, ["rollback", KEY, "--server", cluster.url])
        assert out.exit_code == 0, out.output
        obj = cluster.obj("Deployment", NS, NAME)
        assert obj["spec"]["replicas"] == 2 and args_of(obj) == args_of(deployment())
        assert json.loads(obj["metadata"]["annotations"][LAST_CHANGE])["status"] == "rolled-back"
        again = CliRunner().invoke(main, ["rollback", KEY, "--server", cluster.url])
        assert again.exit_code == 2 and "already rolled-back" in again.output


def test_dry_run_changes_nothing_and_cooldown_blocks_a_second_step() -> None:
    with WriteCluster([deployment(), policy("auto", auto_spec())]) as cluster:
        dry = controller(cluster.kube(), [NOW], dry_run=True).reconcile()
        assert [o.status for o in dry.outcomes] == ["dry-run"] and "replicas: 2 → 3" in dry.outcomes[0].message
        assert cluster.obj("Deployment", NS, NAME)["spec"]["replicas"] == 2
        assert RECOMMENDATION not in (cluster.obj("Deployment", NS, NAME)["metadata"].get("annotations") or {})
        at = [NOW]
        ctl = controller(cluster.kube(), at)
        assert [o.status for o in ctl.reconcile().outcomes] == ["applied"]
        at[0] = NOW + timedelta(seconds=300)  # cooldown is 600 s
        blocked = ctl.reconcile().outcomes
        assert [o.status for o in blocked] == ["blocked"] and "cooldown" in blocked[0].message
        at[0] = NOW + timedelta(seconds=700)
        assert [o.status for o in ctl.reconcile().outcomes] == ["applied"]
        assert cluster.obj("Deployment", NS, NAME)["spec"]["replicas"] == 4


def test_a_concurrent_edit_fails_the_patch_cleanly_and_the_next_cycle_retries() -> None:
    with WriteCluster([deployment(), policy("auto", auto_spec())]) as cluster:
        at = [NOW]
        ctl = controller(EditedMidway(cluster, "Deployment", NS, NAME, {"spec": {"replicas": 7}}), at)
        report = ctl.reconcile()
        assert [o.status for o in report.outcomes] == ["conflict"] and report.errors
        obj = cluster.obj("Deployment", NS, NAME)
        assert obj["spec"]["replicas"] == 7 and args_of(obj) == args_of(deployment())  # theirs, nothing of ours
        assert LAST_CHANGE not in (obj["metadata"].get("annotations") or {})
        at[0] = NOW + timedelta(minutes=5)
        assert [o.status for o in ctl.reconcile().outcomes] == ["applied"]
        obj = cluster.obj("Deployment", NS, NAME)
        assert obj["spec"]["replicas"] == 6 and args_of(obj)[3] == "0.82"  # from their 7, one step to 4


def test_rbac_denial_and_timeouts_are_reported_and_the_loop_goes_on() -> None:
    other = "mistral-7b"
    pol2 = policy("auto2", auto_spec(target={"workloadRef": {"kind": "Deployment", "name": other}}))
    p = plan(recommendation(), recommendation(other))
    with WriteCluster([deployment(), deployment(other), policy("auto", auto_spec()), pol2]) as cluster:
        cluster.fail("PATCH", f"/deployments/{NAME}$", 403)
        report = controller(cluster.kube(), [NOW], p).reconcile()
        by = {o.workload: o for o in report.outcomes}
        assert by[KEY].status == "failed" and "403 Forbidden" in by[KEY].message
        assert by[f"{NS}/Deployment/{other}"].status == "applied"
        assert cluster.obj("Deployment", NS, NAME)["spec"]["replicas"] == 2
        cluster.heal()
        cluster.hang("GET", f"/deployments/{NAME}$", 1.0)
        slow = controller(cluster.kube(timeout_s=0.2), [NOW + timedelta(minutes=1)], p).reconcile()
        assert any("timeout" in e for e in slow.errors), slow.errors
        assert cluster.obj("Deployment", NS, NAME)["spec"]["replicas"] == 2


def test_the_controllers_mode_caps_what_a_policy_may_do() -> None:
    from recommender.controller.policy import Mode

    with WriteCluster([deployment(), policy("auto", auto_spec())]) as cluster:
        report = controller(cluster.kube(), [NOW], max_mode=Mode.RECOMMEND).reconcile()
        assert [o.status for o in report.outcomes] == ["recommended"]
        obj = cluster.obj("Deployment", NS, NAME)
        assert obj["spec"] == deployment()["spec"] and RECOMMENDATION in obj["metadata"]["annotations"]


class CountingKube(Kube):
    """The same API, counting the single-object reads per kind."""

    def __init__(self, kube: Kube) -> None:
        super().__init__(kube.api, kube.timeout_s)
        self.gets: list[str] = []

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any]:
        self.gets.append(kind)
        return super().get(kind, namespace, name)


def test_an_auto_cycle_reads_its_workload_once_and_records_from_the_writes_answer() -> None:
    with WriteCluster([deployment(), policy("auto", auto_spec())]) as cluster:
        kube = CountingKube(cluster.kube())
        at = [NOW]
        ctl = controller(kube, at)
        assert [o.status for o in ctl.reconcile().outcomes] == ["applied"]
        assert kube.gets.count("Deployment") == 1  # the regression check, the apply and the annotation share it
        obj = cluster.obj("Deployment", NS, NAME)
        assert obj["spec"]["replicas"] == 3 and RECOMMENDATION in obj["metadata"]["annotations"]
        at[0] = NOW + timedelta(seconds=300)  # in the cooldown: blocked, and the annotation is already current
        kube.gets.clear()
        assert [o.status for o in ctl.reconcile().outcomes] == ["blocked"]
        assert kube.gets.count("Deployment") == 1
