"""The lighter opt-in (``rightsizer.io/mode`` on the workload, no policy object) and the read-only install
(no permission to patch workloads): an unchanged recommendation sends no new Event in either."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from recommender.controller.loop import Controller
from recommender.controller.policy import Mode
from recommender.core import plan as m
from recommender.core.annotations import LAST_CHANGE, MODE_ANNOTATION
from recommender.core.annotations import RECOMMENDATION_ANNOTATION as RECOMMENDATION
from tests import planfixture as pf
from tests.controllerfixture import KEY, NAME, NS, deployment, plan, policy, recommendation, snapshot
from tests.kubewrite import WriteCluster

NOW = pf.END
OTHER = "mistral-7b"


def opted(mode: str, name: str = NAME) -> dict[str, Any]:
    return deployment(name, annotations={MODE_ANNOTATION: mode})


def controller(cluster: WriteCluster, at: list[datetime], recs: list[m.Recommendation] | None = None,
               **kw: Any) -> Controller:
    chosen = recs or [recommendation(), recommendation(OTHER)]
    return Controller(cluster.kube(), lambda now, _: (plan(*chosen, now=now), snapshot(now, .3, .3)),
                      clock=lambda: at[0], **kw)


def reasons(cluster: WriteCluster) -> list[str]:
    return [e["reason"] for e in cluster.events(NS)]


def test_recommend_by_annotation_writes_the_recommendation_and_one_event() -> None:
    with WriteCluster([opted("Recommend"), deployment(OTHER)]) as cluster:
        at = [NOW]
        ctl = controller(cluster, at)
        report = ctl.reconcile()
        assert [(o.workload, o.status) for o in report.outcomes] == [(KEY, "recommended")]  # OTHER: not opted in
        obj = cluster.obj("Deployment", NS, NAME)
        assert obj["spec"] == opted("Recommend")["spec"]
        assert json.loads(obj["metadata"]["annotations"][RECOMMENDATION])["replicas"] == 4
        assert reasons(cluster) == ["RightsizerRecommendation"] and report.errors == []
        assert cluster.events(NS)[0]["involvedObject"]["uid"] == obj["metadata"]["uid"]  # kubectl describe finds it
        at[0] += timedelta(minutes=5)
        assert [o.status for o in ctl.reconcile().outcomes] == ["no-change"]
        assert len(cluster.events(NS)) == 1


def test_auto_by_annotation_acts_with_the_default_guardrails_where_the_platform_allows_it() -> None:
    with WriteCluster([opted("Auto")]) as cluster:
        at = [NOW]
        ctl = controller(cluster, at, [recommendation()], annotation_mode=Mode.AUTO)
        assert [o.status for o in ctl.reconcile().outcomes] == ["applied"]
        obj = cluster.obj("Deployment", NS, NAME)
        assert obj["spec"]["replicas"] == 3  # default maxReplicaChangePerStep 1
        record = json.loads(obj["metadata"]["annotations"][LAST_CHANGE])
        assert record["policy"] == f"{NS}/{MODE_ANNOTATION}:Deployment/{NAME}"
        at[0] += timedelta(minutes=30)
        blocked = ctl.reconcile().outcomes
        assert [o.status for o in blocked] == ["blocked"] and "cooldown" in blocked[0].message  # default 3600 s


def test_a_tenant_annotation_asking_for_auto_is_refused_by_default_with_an_event_and_no_write() -> None:
    """Whoever may edit a Deployment may write rightsizer.io/mode=Auto on it: without the platform's
    ``annotation_mode: Auto`` that forged opt-in is refused -- a Warning Event, nothing written."""
    with WriteCluster([opted("Auto")]) as cluster:
        at = [NOW]
        ctl = controller(cluster, at, [recommendation()])
        report = ctl.reconcile()
        assert report.outcomes == [] and "asks for more than a workload's own annotation may" in report.errors[0]
        (event,) = cluster.events(NS)
        assert (event["reason"], event["type"]) == ("RightsizerOptInRefused", "Warning")
        assert cluster.obj("Deployment", NS, NAME) == opted("Auto")  # not one byte written
        at[0] += timedelta(minutes=5)
        assert ctl.reconcile().outcomes == [] and len(cluster.events(NS)) == 1


@pytest.mark.parametrize(("annotation", "policy_mode", "cap", "expect"), [
    ("Off", None, Mode.AUTO, []),
    ("Auto", "Recommend", Mode.AUTO, ["recommended"]),  # the policy object wins over the annotation
    ("Auto", "Off", Mode.AUTO, []),
    ("Auto", None, Mode.RECOMMEND, ["recommended"]),  # the controller's cap holds on this path too
    ("Recommend", None, Mode.OFF, []),
])
def test_mode_comes_from_a_policy_first_then_the_annotation_within_the_cap(annotation: str, policy_mode: str | None,
                                                                          cap: Mode, expect: list[str]) -> None:
    objs: list[dict[str, Any]] = [opted(annotation)]
    if policy_mode is not None:
        objs.append(policy("p", {"target": {"workloadRef": {"kind": "Deployment", "name": NAME}},
                                 "mode": policy_mode}))
    with WriteCluster(objs) as cluster:
        report = controller(cluster, [NOW], [recommendation()], max_mode=cap, annotation_mode=Mode.AUTO).reconcile()
        assert [o.status for o in report.outcomes] == expect
        assert cluster.obj("Deployment", NS, NAME)["spec"] == opted(annotation)["spec"]


def test_an_invalid_annotation_is_reported_once_as_an_event_and_changes_nothing() -> None:
    with WriteCluster([opted("auto")]) as cluster:
        at = [NOW]
        ctl = controller(cluster, at, [recommendation()])
        report = ctl.reconcile()
        assert report.outcomes == []
        assert report.errors == [f"{KEY}: annotation {MODE_ANNOTATION}: 'auto' is not one of Off, Recommend, Auto "
                                 "(case matters); ignored"]
        (event,) = cluster.events(NS)
        assert (event["reason"], event["type"]) == ("RightsizerInvalidMode", "Warning") and "'auto'" in event["message"]
        at[0] += timedelta(minutes=5)
        assert ctl.reconcile().errors == report.errors  # logged every cycle...
        assert len(cluster.events(NS)) == 1  # ...but one Event
        obj = cluster.obj("Deployment", NS, NAME)
        assert obj["spec"] == opted("auto")["spec"] and RECOMMENDATION not in obj["metadata"]["annotations"]


# --- read-only install: the annotation patch is refused ---------------------------------------------

@pytest.mark.parametrize(("via", "refused"), [
    ("policy", "PATCH"), ("policy", "GET"), ("annotation", "PATCH")])
def test_read_only_an_unchanged_recommendation_sends_no_new_event(via: str, refused: str) -> None:
    spec = {"target": {"selector": {"matchLabels": {"app": NAME}}}, "mode": "Recommend"}
    objs = [deployment(), policy("watch", spec)] if via == "policy" else [opted("Recommend")]
    recs = [recommendation()]
    with WriteCluster(objs) as cluster:
        cluster.fail(refused, f"/deployments/{NAME}$", 403)
        at = [NOW]
        ctl = controller(cluster, at, recs)
        first = ctl.reconcile()
        assert [o.status for o in first.outcomes] == ["recommended"] and first.errors == []
        assert "annotation skipped" in first.outcomes[0].message
        for _ in range(2):
            at[0] += timedelta(minutes=5)
            assert [o.status for o in ctl.reconcile().outcomes] == ["no-change"]
        assert reasons(cluster) == ["RightsizerRecommendation"]
        recs[0] = with_replicas(recs[0], 5)  # the plan function reads ``recs`` each cycle
        at[0] += timedelta(minutes=5)
        assert [o.status for o in ctl.reconcile().outcomes] == ["recommended"]  # it changed: a new Event
        assert reasons(cluster) == ["RightsizerRecommendation"] * 2
        assert RECOMMENDATION not in (cluster.obj("Deployment", NS, NAME)["metadata"].get("annotations") or {})


def test_read_only_a_restarted_controller_compares_with_the_policy_status() -> None:
    spec = {"target": {"selector": {"matchLabels": {"app": NAME}}}, "mode": "Recommend"}
    with WriteCluster([deployment(), policy("watch", spec)]) as cluster:
        cluster.fail("PATCH", f"/deployments/{NAME}$", 403)
        controller(cluster, [NOW], [recommendation()]).reconcile()
        fresh = controller(cluster, [NOW + timedelta(minutes=5)], [recommendation()])  # nothing in memory
        assert [o.status for o in fresh.reconcile().outcomes] == ["no-change"]
        assert reasons(cluster) == ["RightsizerRecommendation"]


def with_replicas(r: m.Recommendation, replicas: int) -> m.Recommendation:
    assert r.scaling is not None
    return replace(r, scaling=replace(r.scaling, recommended_replicas=replicas))
