"""OOM kills and preemptions/evictions counted from the workload's pod statuses feed the regression
check: an Auto change after which its pods get OOMKilled (or preempted) is rolled back next cycle."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest

from recommender.controller.guardrails import (
    PodState,
    pod_counts_since,
    pod_counts_within,
    pod_state,
    workload_pods,
)
from recommender.controller.loop import Controller
from recommender.core.annotations import LAST_CHANGE
from tests import planfixture as pf
from tests.controllerfixture import NAME, NS, auto_spec, deployment, plan, pods_of, policy, snapshot
from tests.kubewrite import WriteCluster

NOW = pf.END
LATER = NOW + timedelta(minutes=5)


def ts(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def oomed(restarts: int, at: datetime, terminated_now: bool = False) -> dict[str, Any]:
    """A container status whose latest termination is an OOM kill at ``at``."""
    term = {"exitCode": 137, "reason": "OOMKilled", "finishedAt": ts(at)}
    if terminated_now:
        return {"name": "vllm", "restartCount": restarts, "state": {"terminated": term}}
    return {"name": "vllm", "restartCount": restarts, "state": {"running": {"startedAt": ts(at)}},
            "lastState": {"terminated": term}}


def pod(name: str, statuses: list[dict[str, Any]] | None = None, labels: dict[str, str] | None = None,
        **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NS, "labels": labels or {"app": NAME}},
            "status": {"phase": "Running", "containerStatuses": statuses or [], **status}}


DISRUPTED: dict[str, Any] = {"conditions": [{"type": "DisruptionTarget", "status": "True",
                                             "reason": "PreemptionByScheduler", "lastTransitionTime": ts(LATER)}]}


def test_workload_pods_follow_the_selector_and_namespace() -> None:
    pods = [pod("a"), pod("b", labels={"app": "other"}), {**pod("c"), "metadata": {"name": "c", "namespace": "x",
                                                                                    "labels": {"app": NAME}}}]
    assert [p["metadata"]["name"] for p in workload_pods(deployment(), pods)] == ["a"]
    no_selector = deployment()
    no_selector["spec"]["selector"] = {}
    assert [p["metadata"]["name"] for p in workload_pods(no_selector, pods)] == ["a"]  # template labels
    no_selector["spec"]["template"]["metadata"]["labels"] = {}
    assert workload_pods(no_selector, pods) == []  # an empty selector selects nothing, never everything


def test_pod_counts_table() -> None:
    old = NOW - timedelta(hours=3)
    before = pod_state([pod("a", [oomed(3, old)]), pod("b", [oomed(1, NOW - timedelta(minutes=10))]),
                        pod("c", reason="Evicted")])
    # a: OOM 3 h ago, outside the hour; b: OOM 10 min ago; c: evicted, no time (counts) → (1, 1)
    assert pod_counts_within(before, NOW - timedelta(hours=1), NOW) == (1, 1)
    assert before.terminations == {"a/vllm": 3, "b/vllm": 1}
    after = pod_state([pod("a", [oomed(5, LATER)]), pod("b", [oomed(1, LATER, terminated_now=True)]),
                       pod("c", reason="Evicted"), pod("d", **DISRUPTED),
                       pod("e", [oomed(2, LATER)])])
    # a: 5 − 3 = 2; b: (1 restart + 1 while terminated) − 1 = 1; e (new pod): 2 − 0 = 2 → 5 OOM kills;
    # d newly disrupted, c already was → 1
    assert pod_counts_since(before.terminations, sorted(before.disrupted), after) == (5, 1)
    assert pod_counts_since(before.terminations, sorted(before.disrupted), before) == (0, 0)


def test_a_restart_for_another_reason_is_not_an_oom_kill() -> None:
    crashed = {"name": "vllm", "restartCount": 4, "lastState": {"terminated": {"reason": "Error", "exitCode": 1}}}
    state = pod_state([pod("a", [crashed])])
    assert state == PodState({"a/vllm": 4}, {}, {})
    assert pod_counts_since({"a/vllm": 0}, [], state) == (0, 0)


@pytest.mark.parametrize(("status", "why"), [
    ({"containerStatuses": [oomed(1, LATER)]}, "OOM kills 0 → 1"),
    ({"containerStatuses": [oomed(0, LATER, terminated_now=True)]}, "OOM kills 0 → 1"),
    (DISRUPTED, "pods preempted or evicted 0 → 1"),
    ({"phase": "Failed", "reason": "Evicted"}, "pods preempted or evicted 0 → 1"),
])
def test_an_oom_kill_or_preemption_after_an_auto_change_rolls_it_back(status: dict[str, Any], why: str) -> None:
    at = [NOW]
    dep = deployment()
    other = pods_of(deployment("mistral-7b"), 1)[0]  # another workload's pod: never counted
    with WriteCluster([dep, *pods_of(dep), other, policy("auto", auto_spec())]) as cluster:
        ctl = Controller(cluster.kube(), lambda now, _: (plan(now=now), snapshot(now, .3, .3)), clock=lambda: at[0])
        assert [o.status for o in ctl.reconcile().outcomes] == ["applied"]
        record = json.loads(cluster.obj("Deployment", NS, NAME)["metadata"]["annotations"][LAST_CHANGE])
        assert record["pods"]["terminations"] == {f"{NAME}-0/vllm": 0, f"{NAME}-1/vllm": 0}
        cluster.edit("Pod", NS, f"{NAME}-1", {"status": status})
        at[0] = LATER
        report = ctl.reconcile()
        assert [o.status for o in report.outcomes] == ["rolled-back"], report
        assert why in report.outcomes[0].message
        assert cluster.obj("Deployment", NS, NAME)["spec"]["replicas"] == 2


@pytest.mark.parametrize("where", ["before the change", "in another workload"])
def test_an_oom_kill_from_before_the_change_or_elsewhere_does_not_roll_back(where: str) -> None:
    at = [NOW]
    dep = deployment()
    pods = pods_of(dep)
    other = pods_of(deployment("mistral-7b"), 1)[0]
    if where == "before the change":
        pods[1]["status"]["containerStatuses"] = [oomed(2, NOW - timedelta(minutes=30))]
    with WriteCluster([dep, *pods, other, policy("auto", auto_spec())]) as cluster:
        ctl = Controller(cluster.kube(), lambda now, _: (plan(now=now), snapshot(now, .3, .3)), clock=lambda: at[0])
        assert [o.status for o in ctl.reconcile().outcomes] == ["applied"]
        if where == "in another workload":
            cluster.edit("Pod", NS, "mistral-7b-0", {"status": {"containerStatuses": [oomed(1, LATER)]}})
        at[0] = LATER
        report = ctl.reconcile()
        assert [o.status for o in report.outcomes] == ["blocked"], report  # no regression; cooldown holds
        assert cluster.obj("Deployment", NS, NAME)["spec"]["replicas"] == 3
