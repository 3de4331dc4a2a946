"""Node MIG reconfiguration: resumable across controller restarts, never leaves a node cordoned."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from recommender.controller.loop import Controller
from recommender.controller.mig import MigSettings, advance
from recommender.core import usage as m
from recommender.core.annotations import MIG_CONFIG_LABEL as MIG_CONFIG
from recommender.core.annotations import MIG_CONFIG_STATE_LABEL as MIG_STATE
from recommender.core.annotations import STATE_ANNOTATION
from recommender.core.plan import NodeMigPlan, Plan
from tests.controllerfixture import NS, deployment, plan, policy, snapshot
from tests.kubefixture import container, gpu_node, pod_from, template
from tests.kubewrite import WriteCluster

T0 = datetime(2026, 11, 2, 2, 10, tzinfo=UTC)  # inside the 02:00 window (120 min)
NODE = "gpu-a"
WINDOW = [{"schedule": "0 2 * * *", "durationMinutes": 120}]
FAST = MigSettings(drain_timeout_s=600, config_timeout_s=900)


def cluster_objects() -> list[dict]:
    pod = pod_from(None, NS, "llama-0", template({"app": "x"}, container("vllm", "vllm/vllm-openai",
                                                                          {"nvidia.com/gpu": "1"})), NODE)
    return [gpu_node(NODE, "NVIDIA-A100-SXM4-80GB", 81920, labels={MIG_CONFIG: "all-disabled", MIG_STATE: "success"}),
            pod, deployment()]


def node_state(cluster: WriteCluster) -> tuple[str | None, bool, bool]:
    """(MIG label, cordoned, a change in flight); a reverted change's backoff is no change in flight."""
    node = cluster.obj("Node", None, NODE)
    text = (node["metadata"].get("annotations") or {}).get(STATE_ANNOTATION)
    in_flight = text is not None and '"phase": "reverted"' not in text
    return node["metadata"]["labels"].get(MIG_CONFIG), bool(node["spec"].get("unschedulable")), in_flight


def test_restarted_controllers_carry_a_mig_change_through_to_success() -> None:
    nplan = NodeMigPlan(NODE, "A100-80GB", 8, ({"3g.40gb": 2},), (f"{NS}/Deployment/x",), "custom-a", 1)
    spec = {"target": {"selector": {"matchLabels": {"app": "x"}}}, "mode": "Auto",
            "allowedMechanisms": ["mig-node"], "maintenanceWindows": WINDOW}
    with WriteCluster([*cluster_objects(), policy("mig", spec)]) as cluster:
        def fresh(at: datetime) -> Controller:  # a new controller process each time: state only on the node
            return Controller(cluster.kube(), lambda now, _: (plan(now=now, mig_nodes=(nplan,)), snapshot(now, .3, .3)),
                              clock=lambda: at, mig=FAST)
        assert fresh(T0 - timedelta(hours=1)).reconcile().mig == [f"{NODE}: waiting-window: MIG config all-disabled"
                                                                   " → custom-a waits for a maintenance window"]
        assert node_state(cluster) == ("all-disabled", False, False)
        fresh(T0).reconcile()
        assert node_state(cluster) == ("all-disabled", True, True)  # cordoned first
        fresh(T0 + timedelta(minutes=1)).reconcile()
        assert not cluster.exists("Pod", NS, "llama-0")  # evicted through the Eviction API
        fresh(T0 + timedelta(minutes=2)).reconcile()
        assert node_state(cluster) == ("custom-a", True, True)
        assert MIG_STATE not in cluster.obj("Node", None, NODE)["metadata"]["labels"]  # stale success dropped
        assert "configuring" in fresh(T0 + timedelta(minutes=3)).reconcile().mig[0]
        cluster.edit("Node", None, NODE, {"metadata": {"labels": {MIG_STATE: "success"}}})  # the MIG manager
        fresh(T0 + timedelta(minutes=4)).reconcile()
        assert node_state(cluster) == ("custom-a", False, False)


def test_a_change_left_by_a_dead_controller_is_reverted_at_its_deadline() -> None:
    with WriteCluster(cluster_objects()) as cluster:
        kube = cluster.kube()
        assert advance(kube, NODE, "custom-a", T0, True, FAST).phase == "draining"
        assert advance(kube, NODE, "custom-a", T0 + timedelta(minutes=1), True, FAST).phase == "draining"
        assert advance(kube, NODE, "custom-a", T0 + timedelta(minutes=2), True, FAST).phase == "configuring"
        # the controller restarts and no longer wants the change; the MIG manager never reports
        stuck = advance(cluster.kube(), NODE, None, T0 + timedelta(minutes=10), False, FAST)
        assert stuck.phase == "configuring"
        out = advance(cluster.kube(), NODE, None, T0 + timedelta(minutes=18), False, FAST)
        assert out.phase == "reverted" and "before the deadline" in out.message
        assert node_state(cluster) == ("all-disabled", False, False)


def test_a_pod_disruption_budget_that_never_allows_eviction_ends_in_a_revert() -> None:
    with WriteCluster(cluster_objects()) as cluster:
        cluster.block_eviction("llama-0")
        kube = cluster.kube()
        advance(kube, NODE, "custom-a", T0, True, FAST)
        held = advance(kube, NODE, "custom-a", T0 + timedelta(minutes=5), True, FAST)
        assert held.phase == "draining" and "PodDisruptionBudget holds llm/llama-0" in held.message
        assert cluster.exists("Pod", NS, "llama-0")
        out = advance(kube, NODE, "custom-a", T0 + timedelta(minutes=11), True, FAST)
        assert out.phase == "reverted" and node_state(cluster) == ("all-disabled", False, False)


def test_a_failed_mig_manager_reverts_and_a_node_cordoned_before_stays_cordoned() -> None:
    objs = cluster_objects()
    objs[0]["spec"]["unschedulable"] = True  # an admin had cordoned it
    with WriteCluster(objs[:1]) as cluster:
        kube = cluster.kube()
        advance(kube, NODE, "custom-a", T0, True, FAST)
        assert advance(kube, NODE, "custom-a", T0 + timedelta(minutes=1), True, FAST).phase == "configuring"
        cluster.edit("Node", None, NODE, {"metadata": {"labels": {MIG_STATE: "failed"}}})
        out = advance(kube, NODE, "custom-a", T0 + timedelta(minutes=2), True, FAST)
        assert out.phase == "reverted" and node_state(cluster) == ("all-disabled", True, False)


# --- a MIG change always ends: the deadline holds whatever else fails -------------------------------

def draining(cluster: WriteCluster, at: datetime) -> None:
    assert advance(cluster.kube(), NODE, "custom-a", at, True, FAST).phase == "draining"
    assert node_state(cluster) == ("all-disabled", True, True)


def test_planning_failing_for_hours_does_not_keep_a_node_cordoned_past_its_deadline() -> None:
    """Prometheus goes down mid-drain: no plan for hours, yet the node is reverted at its deadline."""
    from recommender.core.errors import PrometheusError

    def no_plan(now: datetime, _: object) -> tuple[Plan, m.Snapshot]:
        raise PrometheusError("Prometheus at http://prom:9090 did not answer")

    with WriteCluster(cluster_objects()) as cluster:
        cluster.block_eviction("llama-0")  # the drain cannot finish on its own
        draining(cluster, T0)
        at = [T0]
        ctl = Controller(cluster.kube(), no_plan, clock=lambda: at[0], mig=FAST)
        seen = []
        for minutes in range(5, 600, 5):  # ten hours of failed cycles
            at[0] = T0 + timedelta(minutes=minutes)
            report = ctl.reconcile()
            assert any(line.startswith("no plan this cycle") for line in report.errors)
            seen.append(node_state(cluster))
            if minutes >= 10:  # the 600 s drain deadline
                assert seen[-1] == ("all-disabled", False, False), minutes
        assert any(e["reason"] == "RightsizerMigReverted" for e in cluster.events("default"))


@pytest.mark.parametrize(("state", "label"), [
    ("{not json", "all-disabled"),  # unreadable: the label is left, the node uncordoned
    ('{"phase": "draining"}', "all-disabled"),  # no deadline, no target
    ('{"phase": "configuring", "target": "custom-a", "previous": "all-disabled"}', "all-disabled"),
    ('["draining"]', "all-disabled"),
    ('{"phase": "draining", "deadline": "tomorrow", "previous": "all-disabled"}', "all-disabled"),
    ('{"phase": "teleporting", "deadline": "2026-11-02T02:20:00Z"}', "all-disabled"),
    ('{"phase": "configuring", "target": "custom-a", "previous": 7, "deadline": "2026-11-02T02:20:00Z"}',
     "all-disabled"),
    ("null", "all-disabled"),
])
def test_an_unreadable_or_partial_state_is_reverted_safely_and_advance_never_raises(state: str, label: str) -> None:
    objs = cluster_objects()
    objs[0]["spec"]["unschedulable"] = True
    objs[0]["metadata"]["annotations"] = {STATE_ANNOTATION: state}
    with WriteCluster(objs) as cluster:
        out = advance(cluster.kube(), NODE, None, T0, False, FAST)
        assert out.phase == "reverted" and "state" in out.message, out
        assert node_state(cluster) == (label, False, False)
        (event,) = [e for e in cluster.events("default") if e["reason"] == "RightsizerMigReverted"]
        assert event["type"] == "Warning"


def test_a_partial_state_that_names_the_previous_config_restores_it() -> None:
    objs = cluster_objects()
    objs[0]["spec"]["unschedulable"] = True
    objs[0]["metadata"]["labels"][MIG_CONFIG] = "custom-a"
    objs[0]["metadata"]["annotations"] = {STATE_ANNOTATION: '{"phase": "configuring", "previous": "all-disabled", '
                                                            '"was_unschedulable": false}'}
    with WriteCluster(objs) as cluster:
        out = advance(cluster.kube(), NODE, None, T0, False, FAST)
        assert out.phase == "reverted"
        assert node_state(cluster) == ("all-disabled", False, False)


def test_advance_turns_any_unexpected_failure_into_an_outcome() -> None:
    class Broken:
        def get(self, *a: object) -> dict:
            raise RuntimeError("a bug")

    out = advance(Broken(), NODE, "custom-a", T0, True, FAST)  # type: ignore[arg-type]
    assert out.phase == "failed" and "a bug" in out.message


def test_a_lease_lost_mid_drain_leaves_the_revert_to_the_next_leader_by_the_deadline() -> None:
    """Leader a cordons, then stops renewing (a network partition): its writes are fenced off; b takes the
    lease after it expires and, planning or not, reverts the node at the change's deadline."""
    from recommender.controller.leader import LeaderElector

    at = [T0]
    with WriteCluster(cluster_objects()) as cluster:
        cluster.block_eviction("llama-0")
        electors = {i: LeaderElector(cluster.kube(), NS, "leader", i, clock=lambda: at[0]) for i in "ab"}
        nplan = NodeMigPlan(NODE, "A100-80GB", 8, ({"3g.40gb": 2},), (f"{NS}/Deployment/x",), "custom-a", 1)
        spec = {"target": {"selector": {"matchLabels": {"app": "x"}}}, "mode": "Auto",
                "allowedMechanisms": ["mig-node"], "maintenanceWindows": WINDOW}
        cluster.add(policy("mig", spec))
        wants = {"a": (nplan,), "b": ()}  # b's plan no longer asks for the change: it only finishes or reverts it
        ctl = {i: Controller(cluster.kube(), lambda now, _, i=i: (plan(now=now, mig_nodes=wants[i]),
                                                                  snapshot(now, .3, .3)),
                             clock=lambda: at[0], mig=FAST, elector=electors[i]) for i in "ab"}
        assert electors["a"].tick() and not electors["b"].tick()
        ctl["a"].reconcile()
        assert node_state(cluster) == ("all-disabled", True, True)  # cordoned by a
        for s in range(30, 700, 30):  # a never renews again; b keeps trying
            at[0] = T0 + timedelta(seconds=s)
            electors["b"].tick()
            for i in "ab":
                report = ctl[i].reconcile()
                if i == "a" and report.leader:
                    assert all("not sent" in e for e in report.errors if "node" in e or "patch" in e)
        assert node_state(cluster) == ("all-disabled", False, False)  # reverted by b by the 600 s deadline
        lease = cluster.obj("Lease", NS, "leader")["spec"]
        assert lease["holderIdentity"] == "b"


def test_a_reverted_change_is_not_started_again_until_its_backoff_is_over() -> None:
    """A PodDisruptionBudget that never allows the drain: after the revert the node stays schedulable for the
    rest of the window instead of being cordoned again every cycle; the next day it is tried again."""
    with WriteCluster(cluster_objects()) as cluster:
        cluster.block_eviction("llama-0")
        kube = cluster.kube()
        draining(cluster, T0)
        assert advance(kube, NODE, "custom-a", T0 + timedelta(minutes=11), True, FAST).phase == "reverted"
        for minutes in (12, 30, 90):  # the window (02:00-04:00) is still open
            out = advance(kube, NODE, "custom-a", T0 + timedelta(minutes=minutes), True, FAST)
            assert out.phase == "backoff" and "not tried again before" in out.message
            assert node_state(cluster) == ("all-disabled", False, False)
        other = advance(kube, NODE, "custom-b", T0 + timedelta(minutes=95), True, FAST)  # another layout may start
        assert other.phase == "draining"


def test_after_the_backoff_the_same_change_may_start_again() -> None:
    with WriteCluster(cluster_objects()) as cluster:
        cluster.block_eviction("llama-0")
        kube = cluster.kube()
        draining(cluster, T0)
        advance(kube, NODE, "custom-a", T0 + timedelta(minutes=11), True, FAST)
        assert advance(kube, NODE, None, T0 + timedelta(days=1, minutes=12), False, FAST).phase == "idle"
        assert STATE_ANNOTATION not in (cluster.obj("Node", None, NODE)["metadata"].get("annotations") or {})
        assert advance(kube, NODE, "custom-a", T0 + timedelta(days=1, minutes=13), True, FAST).phase == "draining"
