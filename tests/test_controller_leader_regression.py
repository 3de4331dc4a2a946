"""Leader election over one Lease (injected clock) and rollback after an injected TTFT regression."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from recommender.controller.guardrails import Health, regressions
from recommender.controller.leader import LeaderElector
from recommender.controller.loop import Controller
from recommender.core.annotations import LAST_CHANGE
from tests import planfixture as pf
from tests.controllerfixture import NAME, NS, auto_spec, deployment, plan, policy, snapshot
from tests.kubewrite import WriteCluster

NOW = pf.END


def test_a_follower_controller_does_not_act() -> None:
    """The follower reconciles 1 s, 31 s, 150 s and 299 s after the leader (past the 30 s lease, as at the
    shipped 300 s interval) while both electors tick every retry period: it never leads, never writes."""
    at = [NOW]
    with WriteCluster([deployment(), policy("auto", auto_spec())]) as cluster:
        electors: dict[str, LeaderElector] = {}

        def make(identity: str) -> Controller:
            electors[identity] = LeaderElector(cluster.kube(), NS, "leader", identity, clock=lambda: at[0])
            return Controller(cluster.kube(), lambda now, _: (plan(now=now), snapshot(now, 0.3, 0.3)),
                              clock=lambda: at[0], elector=electors[identity])
        first, second = make("a"), make("b")
        assert electors["a"].tick() is True and electors["b"].tick() is False
        assert first.reconcile().leader is True
        cluster.edit("Deployment", NS, NAME, {"metadata": {"annotations": None}})  # forget the record: no cooldown
        writes = len([r for r in cluster.requests() if not r.startswith("GET")])
        for second_s in range(1, 300):
            at[0] = NOW + timedelta(seconds=second_s)
            if second_s % electors["a"].timing.retry_period_s == 0:  # the renewal threads
                electors["a"].tick()
                electors["b"].tick()
            if second_s in (1, 31, 150, 299):
                follower = second.reconcile()
                assert follower.leader is False and follower.outcomes == [] and follower.errors == []
        assert len([r for r in cluster.requests() if not r.startswith("GET")]) == writes + 59  # a's renewals
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


