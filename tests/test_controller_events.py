"""Events about Nodes (cluster-scoped) go to namespace ``default`` as the kubelet's do, and every install's
RBAC lets the controller create Events there, not only in the workloads' namespaces."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from recommender.controller.changes import ObjectRef
from recommender.controller.mig import MigSettings, advance
from recommender.controller.records import emit_event
from recommender.core.annotations import MIG_CONFIG_LABEL as MIG_CONFIG
from recommender.core.annotations import MIG_CONFIG_STATE_LABEL as MIG_STATE
from tests.kubefixture import gpu_node
from tests.kubewrite import WriteCluster

T0 = datetime(2026, 11, 2, 2, 10, tzinfo=UTC)
NODE = "gpu-a"
SA = ("ServiceAccount", "gpu-rightsizer", "gpu-rightsizer")


def node_events(cluster: WriteCluster) -> list[tuple[str, str, dict[str, Any]]]:
    return [(e["reason"], e["type"], e["involvedObject"]) for e in cluster.events("default")]


def test_mig_node_events_are_in_default_with_a_cluster_scoped_involved_object() -> None:
    node = gpu_node(NODE, "NVIDIA-A100-SXM4-80GB", 81920, labels={MIG_CONFIG: "all-disabled", MIG_STATE: "success"})
    on_node = {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": NODE}  # the kubelet's: no namespace,
    # uid = node name (kubectl describe node searches by it)
    with WriteCluster([node]) as cluster:
        kube, fast = cluster.kube(), MigSettings(drain_timeout_s=600, config_timeout_s=900)
        assert advance(kube, NODE, "custom-a", T0, True, fast).phase == "draining"
        assert node_events(cluster) == [("RightsizerMigCordoned", "Normal", on_node)]
        assert advance(kube, NODE, "custom-a", T0 + timedelta(minutes=1), True, fast).phase == "configuring"
        cluster.edit("Node", None, NODE, {"metadata": {"labels": {MIG_STATE: "failed"}}})
        assert advance(kube, NODE, "custom-a", T0 + timedelta(minutes=2), True, fast).phase == "reverted"
        assert node_events(cluster)[-1] == ("RightsizerMigReverted", "Warning", on_node)


def test_workload_events_stay_in_the_workloads_namespace_and_carry_its_uid() -> None:
    with WriteCluster() as cluster:
        assert emit_event(cluster.kube(), ObjectRef("Deployment", "llm", "chat"), "R", "m", T0, uid="u-1") is None
        (event,) = cluster.events("llm")
        assert event["involvedObject"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "chat",
                                           "namespace": "llm", "uid": "u-1"}
        assert cluster.events("default") == []


def _event_namespaces(docs: tuple[dict[str, Any], ...]) -> set[str | None]:
    """Namespaces where our ServiceAccount may create core Events (None: all, through a ClusterRoleBinding)."""
    roles = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d
             for d in docs if d["kind"] in ("Role", "ClusterRole")}
    out: set[str | None] = set()
    for b in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        if not any((s["kind"], s.get("namespace"), s["name"]) == SA for s in b["subjects"]):
            continue
        ref = b["roleRef"]
        role = roles.get((ref["kind"], b["metadata"].get("namespace") if ref["kind"] == "Role" else None, ref["name"]))
        rules = (role or {}).get("rules") or []
        if any("" in r["apiGroups"] and "events" in r["resources"] and "create" in r["verbs"] and
               not r.get("resourceNames") for r in rules):
            out.add(None if b["kind"] == "ClusterRoleBinding" else b["metadata"]["namespace"])
    return out


@pytest.mark.parametrize("overlay", ["recommend", "auto"])
def test_rbac_lets_the_controller_create_events_in_default(overlay: str) -> None:
    from tests.test_deploy import _render  # kubectl kustomize, skipped where kubectl is missing

    where = _event_namespaces(_render(overlay))
    assert None in where or "default" in where, where
