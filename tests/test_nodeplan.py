"""Per-node MIG plans: own GPUs first, whole GPUs left alone, overflow moved, bad input named."""

from __future__ import annotations

from collections import Counter

from policies.miglayout import validate_layout
from policies.nodeplan import MigDemand, NodePlanResult, plan_nodes
from policies.packing import place
from recommender.core.catalogue import load_catalogue
from recommender.core.inventory import GpuNode

CAT = load_catalogue()
A100 = CAT.gpus["A100-80GB"]
M = "A100-80GB"


def _valid(result: NodePlanResult) -> None:
    """Every emitted layout is placeable and passes the independent validator; config entries match."""
    for plan in result.nodes:
        for devs in plan.layouts:
            lay = place(CAT.gpus[plan.gpu_model], [CAT.gpus[plan.gpu_model].profile(n) for n, c in devs.items()
                                                   for _ in range(c)])
            assert lay is not None and validate_layout(lay.gpu, lay.placed) == []
        if plan.config_name.startswith("rightsizer-"):
            entries = result.mig_parted_config["mig-configs"][plan.config_name]
            assert sorted(i for e in entries for i in e["devices"]) == list(range(plan.gpus_total))


def test_unchanged_node_keeps_its_config_and_evicts_nothing() -> None:
    node = GpuNode("n1", M, 2, "custom-a", ({"3g.40gb": 2}, {"4g.40gb": 1, "3g.40gb": 1}))
    demands = [MigDemand("ns/D/a", "n1", M, "3g.40gb", 3), MigDemand("ns/D/b", "n1", M, "4g.40gb", 1)]
    res = plan_nodes(demands, [node], CAT)
    (plan,) = res.nodes
    assert plan.reconfigured_gpus == 0 and plan.config_name == "custom-a"
    assert [dict(x) for x in plan.layouts] == [{"3g.40gb": 2}, {"4g.40gb": 1, "3g.40gb": 1}]
    assert any("nothing is evicted" in r for r in plan.reasons)
    _valid(res)


def test_repack_counts_and_explains_reconfiguration() -> None:
    # today 3 GPUs each hold one 3g; 3 × 3g need ceil(3/2) = 2 GPUs: one GPU keeps its single 3g, one
    # becomes 2 × 3g (1 reconfigured), the third is left as it is (unused, nothing evicted)
    node = GpuNode("n1", M, 3, None, ({"3g.40gb": 1},) * 3)
    res = plan_nodes([MigDemand("ns/D/a", "n1", M, "3g.40gb", 3)], [node], CAT)
    (plan,) = res.nodes
    assert sum(Counter(x).get("3g.40gb", 0) for x in plan.layouts) >= 3
    assert plan.reconfigured_gpus == 1
    assert any("evicts every GPU pod" in r for r in plan.reasons)
    _valid(res)


def test_whole_gpus_leave_room_and_overflow_moves_to_another_node() -> None:
    # n1: 2 GPUs, one held whole → 1 GPU for MIG; 2 × 7g need 2 → one 7g moves to n2's free GPU
    n1 = GpuNode("n1", M, 2, "all-disabled")
    n2 = GpuNode("n2", M, 1, "all-disabled")
    demands = [MigDemand("ns/D/w", "n1", M, None, 1), MigDemand("ns/D/a", "n1", M, "7g.80gb", 2)]
    res = plan_nodes(demands, [n1, n2], CAT)
    by = {p.node: p for p in res.nodes}
    assert [dict(x) for x in by["n1"].layouts].count({}) == 1  # the whole GPU: MIG disabled
    assert [dict(x) for x in by["n2"].layouts] == [{"7g.80gb": 1}]
    assert by["n2"].workloads == ("ns/D/a",) and not res.new_gpus
    entries = res.mig_parted_config["mig-configs"][by["n1"].config_name]
    assert {"devices": [1], "mig-enabled": False} in entries or {"devices": [0], "mig-enabled": False} in entries
    _valid(res)


def test_no_room_anywhere_asks_for_new_gpus() -> None:
    res = plan_nodes([MigDemand("ns/D/a", "n1", M, "7g.80gb", 3)], [GpuNode("n1", M, 1, "all-disabled")], CAT)
    # 3 × 7g, one per GPU; n1 holds 1 → 2 missing, on new nodes sized like the largest A100 node (1 GPU)
    new = [p for p in res.nodes if p.node.startswith("<new A100-80GB node")]
    assert res.new_gpus == {M: 2} and [p.gpus_total for p in new] == [1, 1]
    assert any("needs 2 more A100-80GB GPU(s)" in r for r in new[0].reasons)
    _valid(res)


def test_unknown_node_demands_get_pseudo_nodes() -> None:
    res = plan_nodes([MigDemand("ns/D/a", None, M, "1g.10gb", 9)], [], CAT)
    (plan,) = res.nodes
    # 9 × 1g: at most 7 per GPU → 2 GPUs
    assert plan.node == "<A100-80GB, node unknown 1>" and len(plan.layouts) == 2
    assert sum(x.get("1g.10gb", 0) for x in plan.layouts) == 9
    _valid(res)


def test_bad_input_is_named_never_raised() -> None:
    node = GpuNode("n1", M, 1)
    demands = [
        MigDemand("ns/D/x", "n1", "Z9000", "1g.10gb", 1),  # unknown GPU model
        MigDemand("ns/D/y", "n1", M, "1g.6gb", 1),  # an A30 profile
        MigDemand("ns/D/z", "n1", "L4", "1g.10gb", 1),  # no MIG at all
        MigDemand("ns/D/k", "n1", M, "1g.10gb", 0),  # nothing asked
    ]
    res = plan_nodes(demands, [node], CAT)
    assert res.nodes == () and len(res.warnings) == 4
    assert any("unknown GPU model 'Z9000'" in w for w in res.warnings)
    assert any("'1g.6gb' is not a MIG profile of A100-80GB" in w for w in res.warnings)
    assert any("L4 has no MIG" in w for w in res.warnings)
