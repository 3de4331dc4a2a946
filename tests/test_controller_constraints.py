"""A policy's classOverride and bounds.smallestProfile / largestProfile change what the controller plans,
shows and applies (kmock over HTTP, the real pipeline on a hand-made snapshot, fake clock)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import numpy as np

from recommender.controller.constraints import Constrain
from recommender.controller.loop import Controller
from recommender.core import usage as m
from recommender.core.annotations import RECOMMENDATION_ANNOTATION as RECOMMENDATION
from recommender.core.plan import Plan, WorkloadClass, WorkloadConstraints
from recommender.core.settings import ForecastSettings, Settings
from recommender.pipeline.run import run_once
from tests.builders import END, index, snapshot, whole_gpu, workload
from tests.controllerfixture import KEY, NAME, NS, deployment, policy
from tests.kubewrite import WriteCluster

SELECT = {"selector": {"matchLabels": {"app": NAME}}}
SETTINGS = Settings(forecast=ForecastSettings(enabled=False))


def _snapshot(fb_mib: float = 7000.0, rate: bool = False) -> m.Snapshot:
    """The deployment's workload, real-time by annotation, using ``fb_mib`` and 5% of the SMs: at 7,000 MiB
    × 1.15 = 8,050 MiB a 1g.10gb slice of its A100-80GB when nothing constrains it. With ``rate``, 4 days of
    a daily wave of 2-8 requests/s, all within the objective: a scaling plan (3 replicas, min 2)."""
    w = workload(NAME, whole_gpu(replicas=2), ns=NS, labels={"app": NAME},
                 annotations={"rightsizer.io/class": "real-time"})
    series: dict[str, dict[str, Any]] = {m.FB_USED_MIB: {NAME: fb_mib}, m.GR_ENGINE_ACTIVE_FRAC: {NAME: 0.05}}
    if not rate:
        return snapshot([w], series)
    t = np.arange(len(index(4)), dtype=float)
    series |= {m.REQUEST_RATE: {NAME: 5 + 3 * np.sin(2 * np.pi * t * 600 / 86_400)}, m.TTFT_P95_S: {NAME: 0.5}}
    return snapshot([w], series, days=4)


def _cycle(cluster: WriteCluster, fb_mib: float = 7000.0, rate: bool = False) -> Any:
    def planner(now: datetime, constrain: Constrain) -> tuple[Plan, m.Snapshot]:
        """What ``Cycle`` does after collecting: plan with the constraints of the workloads collected."""
        snap = _snapshot(fb_mib, rate)
        return run_once(snap, SETTINGS, now, constraints=constrain(snap.workloads)), snap

    return Controller(cluster.kube(), planner, clock=lambda: END).reconcile()


def _shown(cluster: WriteCluster, name: str) -> dict[str, Any]:
    (found,) = cluster.obj("GPURightsizingPolicy", NS, name)["status"]["recommendations"]
    return dict(found)


def test_smallest_profile_raises_the_recommended_slice_in_status_and_annotation() -> None:
    plain = {"target": SELECT, "mode": "Recommend"}
    bounded = plain | {"bounds": {"smallestProfile": "2g.20gb"}}
    with WriteCluster([deployment(), policy("plain", plain)]) as cluster:
        assert _cycle(cluster).errors == []
        assert _shown(cluster, "plain")["migProfile"] == "1g.10gb"  # what the bound changes
    with WriteCluster([deployment(), policy("bounded", bounded)]) as cluster:
        assert _cycle(cluster).errors == []
        shown = _shown(cluster, "bounded")
        assert shown["migProfile"] == "2g.20gb"
        assert any("bounds.smallestProfile 2g.20gb" in r and f"policy {NS}/bounded" in r for r in shown["reasons"])
        annotation = json.loads(cluster.obj("Deployment", NS, NAME)["metadata"]["annotations"][RECOMMENDATION])
        assert annotation["migProfile"] == "2g.20gb"


def test_auto_applies_the_raised_slice_and_a_class_override_changes_the_mechanism() -> None:
    spec = {"target": SELECT, "mode": "Auto", "allowedMechanisms": ["mig", "mps"],
            "bounds": {"smallestProfile": "2g.20gb"}}
    with WriteCluster([deployment(), policy("auto", spec)]) as cluster:
        report = _cycle(cluster)
        assert [o.status for o in report.outcomes] == ["applied"], report
        limits = cluster.obj("Deployment", NS, NAME)["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
        assert limits == {"nvidia.com/mig-2g.20gb": "1"}
    batch = {"target": SELECT, "mode": "Recommend", "classOverride": "batch"}
    with WriteCluster([deployment(), policy("batch", batch)]) as cluster:
        assert _cycle(cluster).errors == []
        shown = _shown(cluster, "batch")
        # batch tries an MPS share first; the annotation said real-time (mig → exclusive)
        assert shown["sharing"] == "mps" and "migProfile" not in shown


def test_largest_profile_below_the_need_leaves_the_whole_gpu() -> None:
    spec = {"target": SELECT, "mode": "Recommend", "bounds": {"largestProfile": "1g.5gb"}}  # read as 1g.10gb
    with WriteCluster([deployment(), policy("capped", spec)]) as cluster:
        assert _cycle(cluster).errors == []
        assert _shown(cluster, "capped")["migProfile"] == "1g.10gb"  # 8,050 MiB fits under the bound
    with WriteCluster([deployment(), policy("capped", spec)]) as cluster:
        assert _cycle(cluster, fb_mib=15000.0).errors == []
        shown = _shown(cluster, "capped")
        # 15,000 × 1.15 = 17,250 MiB > 9,728 (1g.10gb) needs 1g.20gb, above the bound: real-time falls back
        # to the whole GPU it holds
        assert shown["sharing"] == "exclusive" and "migProfile" not in shown
        assert any("above bounds.largestProfile 1g.10gb" in r for r in shown["reasons"]), shown["reasons"]


def test_replica_bounds_hold_in_what_recommend_shows() -> None:
    with WriteCluster([deployment(), policy("plain", {"target": SELECT, "mode": "Recommend"})]) as cluster:
        assert _cycle(cluster, rate=True).errors == []
        shown = _shown(cluster, "plain")  # the plan's own advice on the recommended slice, over maxReplicas 2 below
        assert shown["replicas"] > 2 and shown["replicaCapacity"] > 0
    spec = {"target": SELECT, "mode": "Recommend", "bounds": {"maxReplicas": 2}}
    with WriteCluster([deployment(), policy("capped", spec)]) as cluster:
        assert _cycle(cluster, rate=True).errors == []
        shown = _shown(cluster, "capped")
        assert shown["replicas"] == 2
        annotation = json.loads(cluster.obj("Deployment", NS, NAME)["metadata"]["annotations"][RECOMMENDATION])
        assert annotation["replicas"] == 2


def test_conflicting_policies_the_first_by_name_wins_and_the_other_says_so() -> None:
    first = {"target": SELECT, "mode": "Recommend", "bounds": {"smallestProfile": "2g.20gb"}}
    second = {"target": SELECT, "mode": "Recommend", "bounds": {"smallestProfile": "3g.40gb"}}
    with WriteCluster([deployment(), policy("b-second", second), policy("a-first", first)]) as cluster:
        report = _cycle(cluster)
        assert len(report.errors) == 1 and f"policy {NS}/b-second:" in report.errors[0]
        assert KEY in report.errors[0] and f"policy {NS}/a-first" in report.errors[0]
        assert _shown(cluster, "a-first")["migProfile"] == _shown(cluster, "b-second")["migProfile"] == "2g.20gb"
        (cond,) = cluster.obj("GPURightsizingPolicy", NS, "b-second")["status"]["conditions"]
        assert "not applied" in cond["message"] and f"policy {NS}/a-first" in cond["message"]


def test_the_cycle_plans_with_the_constraints_of_the_workloads_it_collected() -> None:
    """``rightsizer controller``'s plan function: collect (the bundled demo here), then constrain and plan."""
    import recommender.cli.main  # noqa: F401  (recommender.cli.controller needs main's helpers loaded first)
    from recommender.cli.controller import Cycle
    from recommender.pipeline.planstore import PlanStore

    seen: list[str] = []

    def constrain(workloads: Any) -> dict[str, WorkloadConstraints]:
        seen.extend(w.ref.key for w in workloads)
        return {seen[0]: WorkloadConstraints(WorkloadClass.BATCH, source="policy demo/p")}

    plan, snap = Cycle("demo", None, SETTINGS, PlanStore())(END, constrain)
    assert seen == [w.ref.key for w in snap.workloads] and len(seen) > 1
    classes = {r.ref.key: r.classification for r in plan.recommendations}
    first = classes[seen[0]]
    assert first is not None and (first.workload_class, first.source) == (WorkloadClass.BATCH, "policy")
    assert all(c is not None and c.source != "policy" for k, c in classes.items() if k != seen[0])
