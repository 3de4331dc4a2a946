"""A provisional recommendation (short history) is shown by Recommend and never applied by Auto, whatever the
policy's ``changeLimits.minHistorySeconds`` says."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from recommender.controller.kube import Kube
from recommender.controller.loop import Controller
from recommender.core.annotations import LAST_CHANGE
from recommender.core.annotations import RECOMMENDATION_ANNOTATION as RECOMMENDATION
from recommender.core.plan import Recommendation
from tests import planfixture as pf
from tests.controllerfixture import KEY, NAME, NS, auto_spec, deployment, plan, policy, recommendation, snapshot
from tests.kubewrite import WriteCluster

NOW = pf.END
WHY = "provisional: 23.0 h of history, under the 24 h a firm recommendation needs"


def provisional() -> Recommendation:
    """The golden llama recommendation (MIG 3g.40gb, vLLM 0.9 → 0.82, 2 → 4 replicas) on 23 h of history."""
    r = recommendation()
    return replace(r, provisional=True, history_s=23 * 3600.0, confidence=0.14, reasons=(WHY, *r.reasons))


def controller(kube: Kube, rec: Recommendation) -> Controller:
    return Controller(kube, lambda now, _: (plan(rec, now=now), snapshot(now, 0.3, 0.3)), clock=lambda: NOW)


def test_auto_never_applies_a_provisional_recommendation_even_where_the_policy_allows_its_history() -> None:
    limits = {"maxReplicaChangePerStep": 1, "cooldownSeconds": 600, "minHistorySeconds": 3600}
    with WriteCluster([deployment(), policy("auto", auto_spec(changeLimits=limits))]) as cluster:
        before = cluster.obj("Deployment", NS, NAME)
        report = controller(cluster.kube(), provisional()).reconcile()
        (outcome,) = report.outcomes
        assert outcome.status == "blocked" and "provisional" in outcome.message, outcome
        assert "23.0 h of history" in outcome.message
        after = cluster.obj("Deployment", NS, NAME)
        assert after["spec"] == before["spec"]  # neither replicas nor the vLLM args moved
        assert LAST_CHANGE not in (after["metadata"].get("annotations") or {})
        status: dict[str, Any] = cluster.obj("GPURightsizingPolicy", NS, "auto")["status"]
        (shown,) = status["recommendations"]
        assert shown["provisional"] is True
        assert status["lastActions"][-1]["result"] == "blocked"
        # the same recommendation on a firm history is applied under the same policy
        firm = controller(cluster.kube(), recommendation()).reconcile()
        assert [o.status for o in firm.outcomes] == ["applied"], firm


def test_recommend_shows_a_provisional_recommendation_in_status_and_annotation() -> None:
    spec = {"target": {"selector": {"matchLabels": {"app": NAME}}}, "mode": "Recommend"}
    with WriteCluster([deployment(), policy("watch", spec)]) as cluster:
        report = controller(cluster.kube(), provisional()).reconcile()
        assert [o.status for o in report.outcomes] == ["recommended"] and report.errors == []
        annotation = json.loads(cluster.obj("Deployment", NS, NAME)["metadata"]["annotations"][RECOMMENDATION])
        assert annotation["workload"] == KEY and annotation["provisional"] is True
        assert annotation["reasons"][0] == WHY
        (shown,) = cluster.obj("GPURightsizingPolicy", NS, "watch")["status"]["recommendations"]
        assert shown["provisional"] is True and shown["migProfile"] == "3g.40gb"
        assert WHY in report.outcomes[0].message  # the Event's message leads with it
