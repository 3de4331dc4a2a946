"""Device-plugin sharing configs applied per node with the MIG state machine: cordon, drain, label, verify by the
capacity the plugin advertises, uncordon; reverted by the deadline; nothing written where the ConfigMap is not
ours and lacks the config."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import yaml

from policies.devplugin import config_document
from recommender.controller.devplugin import Wanted, step
from recommender.controller.loop import Controller
from recommender.controller.mig import MigSettings
from recommender.core.annotations import DEVICE_PLUGIN_CONFIG_LABEL as LABEL
from recommender.core.annotations import DEVICE_PLUGIN_STATE_ANNOTATION as STATE
from recommender.core.annotations import MANAGED_BY, MANAGED_BY_LABEL, STATE_ANNOTATION
from recommender.core.devplugin import TIME_SLICING, DevicePluginConfig
from recommender.core.plan import DevicePluginPlan, NodeDevicePluginPlan
from tests.controllerfixture import NS, deployment, plan, policy, snapshot
from tests.kubefixture import container, gpu_node, manifest, pod_from, template
from tests.kubewrite import WriteCluster

T0 = datetime(2026, 11, 2, 2, 10, tzinfo=UTC)  # inside the 02:00 window (120 min)
NODE = "gpu-a"
GPUS = 4
WINDOW = [{"schedule": "0 2 * * *", "durationMinutes": 120}]
FAST = MigSettings(drain_timeout_s=600, config_timeout_s=900)
CM = ("gpu-operator", "rightsizer-device-plugin")
CONFIG = "a100-80gb-ts-4"
DOC = config_document(DevicePluginConfig(TIME_SLICING, 4, True, True))  # renamed: nvidia.com/gpu.shared
NODE_PLAN = NodeDevicePluginPlan(NODE, "A100-80GB", GPUS, None, "no sharing", CONFIG, TIME_SLICING, 4,
                                 (f"{NS}/Deployment/x",), True)
DP = DevicePluginPlan(*CM, {CONFIG: DOC}, (NODE_PLAN,))
SPEC = {"target": {"selector": {"matchLabels": {"app": "x"}}}, "mode": "Auto",
        "allowedMechanisms": ["device-plugin-node"], "maintenanceWindows": WINDOW}


def configmap(ours: bool = True, data: dict[str, str] | None = None) -> dict[str, Any]:
    cm = manifest("ConfigMap", CM[0], CM[1], {}, {MANAGED_BY_LABEL: MANAGED_BY} if ours else {})
    cm.pop("spec", None)
    cm["data"] = dict(data or {})
    return cm


def cluster_objects(cm: dict[str, Any] | None) -> list[dict[str, Any]]:
    pod = pod_from(None, NS, "llama-0", template({"app": "x"}, container("vllm", "vllm/vllm-openai",
                                                                          {"nvidia.com/gpu": "1"})), NODE)
    return [gpu_node(NODE, "NVIDIA-A100-SXM4-80GB", 81920, GPUS), pod, deployment(), *([cm] if cm else [])]


def node_state(cluster: WriteCluster) -> tuple[str | None, bool, bool]:
    """(config label, cordoned, a change in flight)."""
    node = cluster.obj("Node", None, NODE)
    text = (node["metadata"].get("annotations") or {}).get(STATE)
    in_flight = text is not None and '"phase": "reverted"' not in text
    return (node["metadata"].get("labels") or {}).get(LABEL), bool(node["spec"].get("unschedulable")), in_flight


def advertise(cluster: WriteCluster, count: int) -> None:
    """The device plugin restarted with the config: the kubelet reports the renamed resource."""
    cluster.edit("Node", None, NODE, {"status": {"capacity": {"nvidia.com/gpu.shared": str(count)},
                                                 "allocatable": {"nvidia.com/gpu.shared": str(count)}}})


def run(cluster: WriteCluster, at: datetime, dp: DevicePluginPlan = DP, window: bool = True) -> list[str]:
    nodes = {n["metadata"]["name"]: n for n in cluster.kube().list("Node")}
    outs = step(cluster.kube(), dp, CM, nodes, {NODE: Wanted(dp.nodes[0], window)}, at, FAST)
    return [f"{o.phase}: {o.message}" for o in outs]


def test_a_node_moves_from_no_sharing_to_time_slicing_through_cordon_label_verify_uncordon() -> None:
    with WriteCluster([*cluster_objects(configmap()), policy("ts", SPEC)]) as cluster:
        def fresh(at: datetime) -> Controller:  # a new controller process each time: state only on the node
            return Controller(cluster.kube(), lambda now, _: (replace(plan(now=now), device_plugin=DP),
                                                              snapshot(now, .3, .3)), clock=lambda: at, mig=FAST)
        early = fresh(T0 - timedelta(hours=1)).reconcile().device_plugin
        assert early == [f"{NODE}: waiting-window: device-plugin config None → {CONFIG} waits for a maintenance "
                         "window"]
        assert node_state(cluster) == (None, False, False)
        fresh(T0).reconcile()
        assert node_state(cluster) == (None, True, True)  # cordoned first, nothing else yet
        assert cluster.obj("ConfigMap", *CM)["data"] == {}
        fresh(T0 + timedelta(minutes=1)).reconcile()
        assert not cluster.exists("Pod", NS, "llama-0")  # evicted through the Eviction API
        fresh(T0 + timedelta(minutes=2)).reconcile()
        assert node_state(cluster) == (CONFIG, True, True)
        assert yaml.safe_load(cluster.obj("ConfigMap", *CM)["data"][CONFIG]) == DOC  # ours: the config written
        waiting = fresh(T0 + timedelta(minutes=3)).reconcile().device_plugin[0]
        assert "configuring" in waiting and "nvidia.com/gpu.shared=16" in waiting
        advertise(cluster, 8)  # not yet what 4 GPUs × 4 replicas give
        assert "configuring" in fresh(T0 + timedelta(minutes=4)).reconcile().device_plugin[0]
        advertise(cluster, GPUS * 4)
        done = fresh(T0 + timedelta(minutes=5)).reconcile().device_plugin
        assert done == [f"{NODE}: done: device-plugin config {CONFIG} applied; uncordoned"]
        assert node_state(cluster) == (CONFIG, False, False)
        assert any(e["reason"] == "RightsizerDevicePluginApplied" for e in cluster.events("default"))


def test_a_verify_that_never_comes_is_reverted_by_the_deadline() -> None:
    with WriteCluster(cluster_objects(configmap())) as cluster:
        run(cluster, T0)
        run(cluster, T0 + timedelta(minutes=1))
        assert run(cluster, T0 + timedelta(minutes=2))[0].startswith("configuring")
        assert node_state(cluster) == (CONFIG, True, True)
        # the plugin never advertises the shared capacity; the controller no longer plans the change
        nodes = {n["metadata"]["name"]: n for n in cluster.kube().list("Node")}
        stuck = step(cluster.kube(), None, CM, nodes, {}, T0 + timedelta(minutes=10), FAST)
        assert stuck[0].phase == "configuring"
        nodes = {n["metadata"]["name"]: n for n in cluster.kube().list("Node")}
        (out,) = step(cluster.kube(), None, CM, nodes, {}, T0 + timedelta(minutes=18), FAST)
        assert out.phase == "reverted" and "before the deadline" in out.message
        assert node_state(cluster) == (None, False, False)  # label back (none), uncordoned
        assert any(e["reason"] == "RightsizerDevicePluginReverted" for e in cluster.events("default"))
        # reverted: not started again in the same window
        assert run(cluster, T0 + timedelta(minutes=20))[0].startswith("backoff")


def test_a_configmap_not_ours_without_the_config_is_reported_and_nothing_is_written() -> None:
    other = {"a100-80gb-ts-2": yaml.safe_dump(config_document(DevicePluginConfig(TIME_SLICING, 2)))}
    with WriteCluster(cluster_objects(configmap(ours=False, data=other))) as cluster:
        before = cluster.obj("ConfigMap", *CM)
        out = run(cluster, T0)
        assert out == [f"not-applied: not applied: config {CONFIG} missing from ConfigMap {CM[0]}/{CM[1]} (not "
                       f"{MANAGED_BY_LABEL}={MANAGED_BY}: only its existing configs are selected)"]
        assert node_state(cluster) == (None, False, False)
        assert STATE not in (cluster.obj("Node", None, NODE)["metadata"].get("annotations") or {})
        assert cluster.obj("ConfigMap", *CM)["data"] == before["data"]
        assert cluster.obj("ConfigMap", *CM)["metadata"].get("resourceVersion") == \
            before["metadata"].get("resourceVersion")


def test_a_configmap_not_ours_is_never_written_but_its_existing_config_is_selected() -> None:
    theirs = {CONFIG: "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n"
                      "    - name: nvidia.com/gpu\n      replicas: 4\n"}
    with WriteCluster(cluster_objects(configmap(ours=False, data=theirs))) as cluster:
        for minutes in (0, 1, 2):
            run(cluster, T0 + timedelta(minutes=minutes))
        assert node_state(cluster) == (CONFIG, True, True)
        assert cluster.obj("ConfigMap", *CM)["data"] == theirs  # their text, not ours
        advertise(cluster, 16)
        assert run(cluster, T0 + timedelta(minutes=3))[0].startswith("done")


def test_a_config_name_missing_everywhere_is_reported_and_nothing_is_written() -> None:
    with WriteCluster(cluster_objects(configmap())) as cluster:
        dp = replace(DP, configs={})  # the plan names a config it does not carry, the ConfigMap lacks it too
        out = run(cluster, T0, dp)
        assert out == [f"not-applied: not applied: config {CONFIG} is in neither the plan nor ConfigMap "
                       f"{CM[0]}/{CM[1]}"]
        assert node_state(cluster) == (None, False, False)
        assert cluster.obj("ConfigMap", *CM)["data"] == {}


def test_no_configmap_no_change() -> None:
    with WriteCluster(cluster_objects(None)) as cluster:
        (out,) = run(cluster, T0)
        assert out.startswith("not-applied: not applied: ConfigMap gpu-operator/rightsizer-device-plugin not found")
        assert node_state(cluster) == (None, False, False)


def test_a_policy_without_device_plugin_node_changes_no_node() -> None:
    spec = {**SPEC, "allowedMechanisms": ["mig-node"]}
    with WriteCluster([*cluster_objects(configmap()), policy("ts", spec)]) as cluster:
        ctl = Controller(cluster.kube(), lambda now, _: (replace(plan(now=now), device_plugin=DP),
                                                         snapshot(now, .3, .3)), clock=lambda: T0, mig=FAST)
        assert ctl.reconcile().device_plugin == []
        assert node_state(cluster) == (None, False, False)


def test_a_mig_change_in_flight_on_the_node_holds_the_device_plugin_change() -> None:
    objs = cluster_objects(configmap())
    objs[0]["metadata"]["annotations"] = {STATE_ANNOTATION: '{"phase": "draining"}'}
    with WriteCluster(objs) as cluster:
        (out,) = run(cluster, T0)
        assert out.startswith("busy:") and node_state(cluster) == (None, False, False)


def test_one_node_at_a_time() -> None:
    objs = cluster_objects(configmap())
    second = gpu_node("gpu-b", "NVIDIA-A100-SXM4-80GB", 81920, GPUS)
    nplan_b = replace(NODE_PLAN, node="gpu-b")
    with WriteCluster([*objs, second]) as cluster:
        nodes = {n["metadata"]["name"]: n for n in cluster.kube().list("Node")}
        want = {NODE: Wanted(NODE_PLAN, True), "gpu-b": Wanted(nplan_b, True)}
        outs = step(cluster.kube(), replace(DP, nodes=(NODE_PLAN, nplan_b)), CM, nodes, want, T0, FAST)
        assert [o.phase for o in outs] == ["draining", "waiting-turn"]
        assert not cluster.obj("Node", None, "gpu-b")["spec"].get("unschedulable")
