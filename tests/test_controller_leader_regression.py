"""Leader election over one Lease (injected clock) and rollback after an injected TTFT regression."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from recommender.controller.guardrails import Health, regressions
from recommender.controller.leader import LeaderElector
from recommender.controller.loop import Controller
from recommender.controller.records import LAST_CHANGE
from tests import planfixture as pf
from tests.controllerfixture import NAME, NS, auto_spec, deployment, plan, policy, snapshot
from tests.kubewrite import WriteCluster

NOW = pf.END


def test_only_one_of_two_electors_leads_and_the_other_takes_over_after_expiry() -> None:
    at = [NOW]
    with WriteCluster() as cluster:
        a = LeaderElector(cluster.kube(), "gpu-rightsizer", "leader", "a", lease_duration_s=30, clock=lambda: at[0])
        b = LeaderElector(cluster.kube(), "gpu-rightsizer", "leader", "b", lease_duration_s=30, clock=lambda: at[0])
        assert (a.is_leader(), b.is_leader()) == (True, False)
        at[0] += timedelta(seconds=20)
        assert (a.is_leader(), b.is_leader()) == (True, False)  # a renewed at +20 s
        at[0] += timedelta(seconds=29)
        assert b.is_leader() is False  # 29 s since a's renewal: not expired
        at[0] += timedelta(seconds=2)
        assert b.is_leader() is True and a.is_leader() is False  # 31 s: b takes over, a steps down
        lease = cluster.obj("Lease", "gpu-rightsizer", "leader")["spec"]
        assert lease["holderIdentity"] == "b" and lease["leaseTransitions"] == 1
        b.release()
        assert a.is_leader() is True  # released: no need to wait for expiry


def test_a_follower_controller_does_not_act() -> None:
    at = [NOW]
    with WriteCluster([deployment(), policy("auto", auto_spec())]) as cluster:
        def make(identity: str) -> Controller:
            el = LeaderElector(cluster.kube(), NS, "leader", identity, clock=lambda: at[0])
            return Controller(cluster.kube(), lambda now, _: (plan(now=now), snapshot(now, 0.3, 0.3)),
                              clock=lambda: at[0], elector=el)
        first, second = make("a"), make("b")
        assert first.reconcile().leader is True
        at[0] += timedelta(seconds=1)
        cluster.edit("Deployment", NS, NAME, {"metadata": {"annotations": None}})  # forget the record: no cooldown
        follower = second.reconcile()
        assert follower.leader is False and follower.outcomes == []
        assert cluster.obj("Deployment", NS, NAME)["spec"]["replicas"] == 3  # one step, by the leader only


@pytest.mark.parametrize(("after_s", "rolled_back"), [(1.5, True), (0.32, False)])
def test_rollback_after_a_ttft_regression(after_s: float, rolled_back: bool) -> None:
    at = [NOW]
    spec = auto_spec(latencyObjectives={"ttftSeconds": 1.0})
    with WriteCluster([deployment(), policy("auto", spec)]) as cluster:
        change_at = NOW
        snaps = {NOW: snapshot(NOW, 0.3, 0.3)}
        later = NOW + timedelta(minutes=5)
        snaps[later] = snapshot(later, 0.3, after_s, change_at=change_at)
        ctl = Controller(cluster.kube(), lambda now, _: (plan(now=now), snaps[now]), clock=lambda: at[0])
        assert [o.status for o in ctl.reconcile().outcomes] == ["applied"]
        at[0] = later
        report = ctl.reconcile()
        obj = cluster.obj("Deployment", NS, NAME)
        record = json.loads(obj["metadata"]["annotations"][LAST_CHANGE])
        if rolled_back:
            assert [o.status for o in report.outcomes] == ["rolled-back"]
            assert "TTFT p95 0.3s → 1.5s" in report.outcomes[0].message
            assert obj["spec"]["replicas"] == 2 and record["status"] == "rolled-back"
            assert any(e["type"] == "Warning" for e in cluster.events(NS))
        else:
            assert [o.status for o in report.outcomes] == ["blocked"]  # no regression; cooldown holds
            assert obj["spec"]["replicas"] == 3 and record["status"] == "applied"


@pytest.mark.parametrize(("before", "after", "expected"), [
    (Health(0.3), Health(0.5), ("TTFT p95 0.3s → 0.5s",)),  # +67% and +0.2 s: both slacks exceeded
    (Health(0.3), Health(0.36), ()),  # +20% < 25%
    (Health(0.01), Health(0.05), ()),  # +400% but only +0.04 s < 0.1 s
    (Health(None, 1.0), Health(None, 4.0), ("waiting requests 1 → 4",)),  # > 1.5 and +3 > 2
    (Health(oom_kills=0), Health(oom_kills=1), ("OOM kills 0 → 1",)),
    (Health(0.3), Health(None), ()),  # no data after: no evidence
])
def test_regression_table(before: Health, after: Health, expected: tuple[str, ...]) -> None:
    assert regressions(before, after) == expected


def test_regression_over_the_objective_counts_even_when_small() -> None:
    assert regressions(Health(0.95), Health(1.05), ttft_objective_s=1.0) == ("TTFT p95 1.05s is over the objective 1s",)


