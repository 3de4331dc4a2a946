"""Device-plugin sharing configs per node pool (policies.devplugin) and reading a config back
(recommender.core.devplugin): pools, replicas, renaming, MPS vs time-slicing, MIG nodes, bad ConfigMap keys.
Every generated config is validated against the plugin's documented schema (recommender/data)."""

from __future__ import annotations

from importlib.resources import files
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

from policies.devplugin import config_document, plan_device_plugin
from recommender.core.devplugin import ConfigError, DevicePluginConfig, parse_config
from recommender.core.inventory import Allocation, GpuNode, Sharing, Workload, WorkloadRef
from recommender.core.plan import DevicePluginPlan, NodeMigPlan, Recommendation
from recommender.core.settings import Settings
from recommender.mechanisms.mps import MpsShare
from recommender.outputs import devplugintext as dpt

M = "A100-80GB"
SETTINGS = Settings()
SCHEMA = yaml.safe_load(files("recommender").joinpath("data/device-plugin-config.schema.yaml").read_text())
VALIDATOR = Draft202012Validator(SCHEMA)


def _rec(name: str, after: Allocation | None, before: Allocation | None = None, nodes: tuple[str, ...] = ("n1",)
         ) -> Recommendation:
    before = before or Allocation(Sharing.EXCLUSIVE, gpus=1, gpu_equivalents=1.0, gpu_model=M)
    w = Workload(WorkloadRef("ml", "Deployment", name), before, nodes=nodes)
    return Recommendation(w, after, (), 1.0)


def ts(n: int, gpus: int = 1) -> Allocation:
    return Allocation(Sharing.TIME_SLICING, gpus=gpus, gpu_equivalents=1 / n, gpu_model=M)


def mps(pct: float) -> Allocation:
    return Allocation(Sharing.MPS, gpus=1, share=MpsShare(pct, 80_000 * pct / 100), gpu_equivalents=pct / 100,
                      gpu_model=M)


def _plan(recs: list[Recommendation], nodes: list[GpuNode], mig: tuple[NodeMigPlan, ...] = ()) -> DevicePluginPlan:
    got = plan_device_plugin(recs, nodes, mig, SETTINGS)
    assert got is not None
    for doc in got.configs.values():  # every generated config is one the plugin documents
        VALIDATOR.validate(doc)
        assert parse_config(yaml.safe_dump(doc)) is not None  # and reads back
    return got


def _node(plan: DevicePluginPlan, name: str) -> Any:
    return next(n for n in plan.nodes if n.node == name)


def test_time_slicing_pool_renames_and_fails_multi_requests() -> None:
    plan = _plan([_rec("a", ts(4)), _rec("b", ts(4), nodes=("n2",))], [GpuNode("n1", M, 8), GpuNode("n2", M, 8)])
    assert list(plan.configs) == ["a100-80gb-ts-4"]  # one pool: same model, same sharing
    assert plan.configs["a100-80gb-ts-4"] == {
        "version": "v1", "flags": {"migStrategy": "none"},
        "sharing": {"timeSlicing": {"renameByDefault": True, "failRequestsGreaterThanOne": True,
                                    "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}
    n1 = _node(plan, "n1")
    assert (n1.config_name, n1.strategy, n1.replicas, n1.changed) == ("a100-80gb-ts-4", "time-slicing", 4, True)
    assert dpt.label(n1) == "nvidia.com/device-plugin.config=a100-80gb-ts-4"
    assert "advertises 8 GPU(s) × 4 nvidia.com/gpu.shared" in n1.reasons[-1]  # 8 GPUs × 4 replicas


def test_node_replicas_are_the_fewest_any_workload_needs() -> None:
    # a needs 1/4 of a GPU, b 1/2: 2 replicas per GPU gives each at least its share (4 would starve b)
    plan = _plan([_rec("a", ts(4)), _rec("b", ts(2))], [GpuNode("n1", M, 2)])
    assert _node(plan, "n1").replicas == 2 and list(plan.configs) == ["a100-80gb-ts-2"]


def test_mps_config_has_only_resources_and_replicas_from_the_share() -> None:
    plan = _plan([_rec("a", mps(25))], [GpuNode("n1", M, 1)])  # 25 % of the SMs: floor(1 / 0.25) = 4
    assert plan.configs == {"a100-80gb-mps-4": {"version": "v1", "flags": {"migStrategy": "none"},
                                                "sharing": {"mps": {"resources": [{"name": "nvidia.com/gpu",
                                                                                   "replicas": 4}]}}}}


def test_time_slicing_and_mps_on_one_node_keep_one_and_say_so() -> None:
    plan = _plan([_rec("a", mps(25)), _rec("b", ts(4)), _rec("c", ts(2))], [GpuNode("n1", M, 1)])
    n1 = _node(plan, "n1")
    assert n1.strategy == "time-slicing"  # two workloads against one
    assert any("exclusive per node" in r and "ml/Deployment/a" in r for r in n1.reasons)


def test_mig_nodes_get_no_mps_config() -> None:
    layouts = ({"3g.40gb": 2}, {})
    mig = (NodeMigPlan("n1", M, 2, layouts, ("ml/Deployment/x",), "rightsizer-n1", 1),)
    plan = plan_device_plugin([_rec("a", mps(25)), _rec("b", ts(4), nodes=("n2",))],
                              [GpuNode("n1", M, 2), GpuNode("n2", M, 1)], mig, SETTINGS)
    assert plan is not None and list(plan.configs) == ["a100-80gb-ts-4"]  # no MPS config anywhere
    assert "n1" not in {n.node for n in plan.nodes}  # nothing else shares n1: no config, a warning says why
    assert any(w.startswith("node n1: MPS runs only on full GPUs") and "ml/Deployment/a" in w for w in plan.warnings)
    # beside time-slicing on a node with MIG devices today: time-slicing, the MIG strategy mixed, the reason kept
    both = _plan([_rec("a", mps(25)), _rec("b", ts(4))], [GpuNode("n1", M, 2, "all-1g.10gb", ({"1g.10gb": 7},))])
    n1 = _node(both, "n1")
    assert n1.strategy == "time-slicing" and any("MPS runs only on full GPUs" in r for r in n1.reasons)
    assert both.configs[n1.config_name]["flags"] == {"migStrategy": "mixed"}


def test_unchanged_node_keeps_its_label_and_writes_no_config() -> None:
    today = DevicePluginConfig("time-slicing", 4, True, True)
    plan = _plan([_rec("a", ts(4))], [GpuNode("n1", M, 8, device_plugin_config="shared-4", device_plugin=today)])
    n1 = _node(plan, "n1")
    assert (n1.config_name, n1.changed) == ("shared-4", False)
    assert n1.current == "time-slicing ×4 (renamed nvidia.com/gpu.shared)"
    assert plan.configs == {} and dpt.configmap_text(plan) == ""


def test_time_slicing_without_rename_is_kept_while_no_pod_moves_there() -> None:
    today = DevicePluginConfig("time-slicing", 2, False, True)
    node = GpuNode("n1", M, 1, device_plugin_config="ts", device_plugin=today)
    kept = _plan([_rec("a", None, before=ts(4))], [node])  # no recommendation: today's 1/4 share stays
    assert kept.configs["a100-80gb-ts-4-gpu"]["sharing"]["timeSlicing"]["renameByDefault"] is False
    moved = _plan([_rec("a", ts(4))], [node])  # a pod moved onto time-slicing requests nvidia.com/gpu.shared
    assert moved.configs["a100-80gb-ts-4"]["sharing"]["timeSlicing"]["renameByDefault"] is True


def test_multi_gpu_requests_turn_fail_requests_off() -> None:
    plan = _plan([_rec("a", ts(2, gpus=2))], [GpuNode("n1", M, 4)])
    doc = plan.configs["a100-80gb-ts-2-multi"]
    assert doc["sharing"]["timeSlicing"]["failRequestsGreaterThanOne"] is False


def test_node_that_shares_nothing_any_more_goes_back_to_no_sharing() -> None:
    today = DevicePluginConfig("time-slicing", 4, True, True)
    plan = _plan([_rec("a", Allocation(Sharing.EXCLUSIVE, gpus=1, gpu_equivalents=1.0, gpu_model=M))],
                 [GpuNode("n1", M, 1, device_plugin_config="ts", device_plugin=today)])
    assert plan.configs == {"a100-80gb-no-sharing": {"version": "v1", "flags": {"migStrategy": "none"}}}
    assert _node(plan, "n1").strategy == "none"


def test_no_sharing_anywhere_is_no_plan() -> None:
    assert plan_device_plugin([_rec("a", None)], [GpuNode("n1", M, 1)], (), SETTINGS) is None


def test_unknown_current_config_is_one_reason_and_counts_as_changed() -> None:
    node = GpuNode("n1", M, 1, device_plugin_config="broken", device_plugin_unknown="key broken: not YAML")
    n1 = _node(_plan([_rec("a", ts(4))], [node]), "n1")
    assert n1.current == "unknown" and n1.changed
    assert [r for r in n1.reasons if r.startswith("current")] == ["current config unknown: key broken: not YAML"]


def test_workloads_on_unknown_nodes_pool_per_model() -> None:
    plan = _plan([_rec("a", ts(4), nodes=()), _rec("b", ts(4), nodes=("gone",))], [])
    assert [n.node for n in plan.nodes] == ["<A100-80GB, node unknown>"]
    assert plan.nodes[0].workloads == ("ml/Deployment/a", "ml/Deployment/b")
    assert any("node gone not in the inventory" in w for w in plan.warnings)


def test_configmap_yaml_holds_each_config_under_its_key() -> None:
    plan = _plan([_rec("a", ts(4)), _rec("b", mps(50), nodes=("n2",))], [GpuNode("n1", M, 8), GpuNode("n2", M, 8)])
    cm = yaml.safe_load(dpt.configmap_text(plan))
    assert cm["metadata"] == {"name": "rightsizer-device-plugin", "namespace": "gpu-operator"}
    assert {k: yaml.safe_load(v) for k, v in cm["data"].items()} == dict(plan.configs)


@pytest.mark.parametrize(("text", "want"), [
    ("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n",
     DevicePluginConfig("time-slicing", 4)),
    ("version: v1\nflags: {migStrategy: mixed}\nsharing:\n  mps:\n    renameByDefault: true\n    resources:\n"
     "    - {name: nvidia.com/gpu, replicas: 2}\n", DevicePluginConfig("mps", 2, True, mig_strategy="mixed")),
    ("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 1}\n",
     DevicePluginConfig()),  # replicas 1 shares nothing
    ("version: v1\n", DevicePluginConfig()),
])
def test_parse_reads_what_a_config_shares(text: str, want: DevicePluginConfig) -> None:
    assert parse_config(text) == want


@pytest.mark.parametrize(("text", "why"), [
    ("sharing: [", "not YAML"),
    ("- a\n", "not a mapping"),
    ("version: v2\n", "not v1"),
    ("flags: {migStrategy: some}\n", "migStrategy"),
    ("sharing:\n  timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 2}]}\n  mps: {resources: "
     "[{name: nvidia.com/gpu, replicas: 2}]}\n", "mutually exclusive"),
    ("sharing: {timeSlicing: {resources: []}}\n", "no resources"),
    ("sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 0}]}}\n", "positive integer"),
    ("sharing: {timeSlicing: {resources: [{replicas: 2}]}}\n", "no resource name"),
    ("sharing: {timeSlicing: {renameByDefault: yes please, resources: [{name: nvidia.com/gpu, replicas: 2}]}}\n",
     "true or false"),
])
def test_parse_gives_one_reason_for_a_bad_config(text: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        parse_config(text)


def test_schema_rejects_what_the_plugin_rejects() -> None:
    good = config_document(DevicePluginConfig("time-slicing", 4, True, True))
    both = {**good, "sharing": {**good["sharing"], "mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}}
    zero = config_document(DevicePluginConfig("mps", 0))
    mig_mps = {"version": "v1", "sharing": {"mps": {"resources": [{"name": "nvidia.com/mig-1g.10gb", "replicas": 2}]}}}
    assert VALIDATOR.is_valid(good)
    assert not VALIDATOR.is_valid(both) and not VALIDATOR.is_valid(zero) and not VALIDATOR.is_valid(mig_mps)
