"""Tenancy: which workloads may share one GPU through a mechanism that isolates neither memory nor faults.

Pure rules first (tenant_of), then packing through run_once on hand-made snapshots, then a cluster on the
Kubernetes API emulator: Deployments of two teams and the host-side copies of two vClusters' pods.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from pydantic import ValidationError

from collectors.kubernetes.discover import discover_cluster
from collectors.snapshot import normalize
from recommender.analysis.tenancy import may_share, tenant_of
from recommender.core import usage as m
from recommender.core.catalogue import load_catalogue
from recommender.core.inventory import Sharing, Workload
from recommender.core.plan import Plan
from recommender.core.progress import NullProgress
from recommender.core.settings import MechanismSettings, Settings
from recommender.core.settings_tenancy import TenancySettings, VClusterSettings
from recommender.mechanisms import MECHANISMS
from recommender.mechanisms.base import isolates
from recommender.pipeline.run import run_once
from tests.builders import END, snapshot, whole_gpu, workload
from tests.kubefixture import KubeEmulator, container, gpu_node, manifest, pod_from, template

DEFAULT = TenancySettings()
VC, VNS = "vcluster.loft.sh/managed-by", "vcluster.loft.sh/namespace"  # the syncer's labels (vcluster.com docs)


def _w(name: str, ns: str, **labels: str) -> Workload:
    return workload(name, whole_gpu(), ns=ns, labels=labels)


# --- who is one tenant -----------------------------------------------------------------------------------------

def test_by_default_a_namespace_is_a_tenant() -> None:
    a, a2, b = _w("a", "team-a"), _w("a2", "team-a"), _w("b", "team-b")
    assert may_share(a, a2, DEFAULT)
    assert not may_share(a, b, DEFAULT)
    assert tenant_of(a, DEFAULT).why == "namespace team-a"


def test_a_label_widens_a_tenant_across_namespaces_when_the_settings_say_labels_decide() -> None:
    by_team = TenancySettings(label="team")
    a, b = _w("a", "ns-1", team="search"), _w("b", "ns-2", team="search")
    other, unlabelled = _w("c", "ns-3", team="ads"), _w("d", "ns-1")
    assert may_share(a, b, by_team) and not may_share(a, b, DEFAULT)
    assert not may_share(a, other, by_team)
    # without the label, a workload stays its namespace's tenant: not the label's, though in the same namespace
    assert not may_share(a, unlabelled, by_team)
    assert tenant_of(a, by_team).why == "label team=search"


def test_namespace_groups_join_the_namespaces_an_admin_names() -> None:
    grouped = TenancySettings(namespace_groups={"research": ("ml", "nlp")})
    ml, nlp, ads = _w("a", "ml"), _w("b", "nlp"), _w("c", "ads")
    assert may_share(ml, nlp, grouped) and not may_share(ml, ads, grouped)
    assert tenant_of(ml, grouped).why == "namespace group research"


def test_a_namespace_in_two_groups_is_a_settings_error() -> None:
    with pytest.raises(ValidationError, match="one group at most"):
        TenancySettings(namespace_groups={"a": ("ml",), "b": ("ml", "x")})
    with pytest.raises(ValidationError):  # misspelt key: an error, not a silently ignored setting
        TenancySettings.model_validate({"labels": "team"})


def test_vcluster_pods_are_told_apart_within_their_host_namespace() -> None:
    host = "vc-host"
    b_default = _w("p1-x-default-x-vc-b", host, **{VC: "vc-b", VNS: "default"})
    b_default2 = _w("p2-x-default-x-vc-b", host, **{VC: "vc-b", VNS: "default"})
    b_train = _w("p3-x-train-x-vc-b", host, **{VC: "vc-b", VNS: "train"})
    c_default = _w("p4-x-default-x-vc-c", host, **{VC: "vc-c", VNS: "default"})
    plain = _w("host-app", host)
    assert may_share(b_default, b_default2, DEFAULT)
    assert not may_share(b_default, b_train, DEFAULT)  # a vCluster's namespaces are tenants, as host ones are
    assert not may_share(b_default, c_default, DEFAULT)  # two vClusters in one host namespace
    assert not may_share(b_default, plain, DEFAULT)
    whole_vcluster = TenancySettings(vcluster=VClusterSettings(per_virtual_namespace=False))
    assert may_share(b_default, b_train, whole_vcluster) and not may_share(b_default, c_default, whole_vcluster)
    off = TenancySettings(vcluster=VClusterSettings(enabled=False))
    assert may_share(b_default, c_default, off)  # the host namespace alone decides
    assert tenant_of(b_train, DEFAULT).why == "vCluster vc-b namespace train in namespace vc-host"


def test_a_vcluster_in_several_host_namespaces_is_one_tenant_only_through_a_namespace_group() -> None:
    one = _w("p1-x-default-x-vc-b", "vc-b-default", **{VC: "vc-b", VNS: "default"})
    two = _w("p2-x-train-x-vc-b", "vc-b-train", **{VC: "vc-b", VNS: "train"})
    whole_vcluster = VClusterSettings(per_virtual_namespace=False)
    assert not may_share(one, two, TenancySettings(vcluster=whole_vcluster))
    grouped = TenancySettings(namespace_groups={"vc-b": ("vc-b-default", "vc-b-train")}, vcluster=whole_vcluster)
    assert may_share(one, two, grouped)


# --- hostile input -----------------------------------------------------------------------------------------------

def test_a_forged_label_gets_no_foreign_namespace_unless_labels_decide() -> None:
    """Anyone who writes a workload writes its labels. By default they decide nothing; with ``label`` set they
    decide (the documented trade-off: only for label values a tenant cannot choose)."""
    victim, forger = _w("svc", "team-a", team="a"), _w("miner", "evil", team="a")
    assert not may_share(victim, forger, DEFAULT)
    assert not may_share(victim, forger, TenancySettings(namespace_groups={"a": ("team-a",)}))
    assert may_share(victim, forger, TenancySettings(label="team"))  # the setting says labels decide


def test_forged_vcluster_labels_never_join_another_host_namespace() -> None:
    real = _w("p1-x-default-x-vc-b", "vc-b-host", **{VC: "vc-b", VNS: "default"})
    forged = _w("miner", "evil", **{VC: "vc-b", VNS: "default"})
    whole = TenancySettings(vcluster=VClusterSettings(per_virtual_namespace=False))
    assert not may_share(real, forged, DEFAULT) and not may_share(real, forged, whole)


@pytest.mark.parametrize("value", ["", "x" * 64, "../etc", "a b", "-a"])
def test_an_invalid_label_value_is_ignored_with_a_note(value: str) -> None:
    w = _w("a", "team-a", team=value, **{VC: value})
    got = tenant_of(w, TenancySettings(label="team"))
    assert got.key.startswith("namespace:team-a") and got.notes
    assert not may_share(w, _w("b", "team-b", team=value), TenancySettings(label="team"))


# --- which mechanisms isolate ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "isolating"), [
    ("exclusive", True), ("mig", True),  # a device, a GPU instance (reference.md §1.1)
    ("mps", False), ("time-slicing", False), ("hami", False), ("kai", False),  # reference.md §3, §4, §6, §7
])
def test_only_whole_gpus_and_mig_isolate_tenants(name: str, isolating: bool) -> None:
    assert isolates(MECHANISMS.get(name)) is isolating


# --- packing through the pipeline --------------------------------------------------------------------------------

def _batch(name: str, ns: str, **labels: str) -> Workload:
    """Batch by annotation: 7,000 MiB and 5% of the SMs → an MPS share (10% of the SMs, 8,050 MiB pinned)."""
    return workload(name, whole_gpu(), ns=ns, labels=labels, annotations={"rightsizer.io/class": "batch"})


def _plan(ws: list[Workload], tenancy: TenancySettings = DEFAULT) -> Plan:
    series = {m.FB_USED_MIB: {w.ref.name: 7000.0 for w in ws}, m.GR_ENGINE_ACTIVE_FRAC: {w.ref.name: 0.05 for w in ws}}
    settings = Settings(mechanisms=MechanismSettings(tenancy=tenancy))
    return run_once(snapshot(ws, series), settings, END)


def test_two_tenants_never_share_a_gpu_through_mps_and_the_report_says_what_it_costs() -> None:
    plan = _plan([_batch("a", "team-a"), _batch("b", "team-b")])
    assert {r.recommended.sharing for r in plan.recommendations if r.recommended} == {Sharing.MPS}
    # two 10% shares fit one A100-80GB, but not across namespaces: one GPU each
    assert plan.summary.gpus_needed_packed == 2
    assert any(w.startswith("tenancy:") and "1 more GPU(s)" in w and "1 A100-80GB" in w for w in plan.warnings)
    for r in plan.recommendations:
        assert any(x.startswith(f"tenancy: shares a A100-80GB only with workloads of namespace {r.ref.namespace}")
                   for x in r.reasons), r.reasons
        assert any(f"only with MPS clients of namespace {r.ref.namespace}" in x for x in r.reasons)


def test_one_namespace_shares_one_gpu_and_nothing_is_said() -> None:
    plan = _plan([_batch("a", "team-a"), _batch("b", "team-a")])
    assert plan.summary.gpus_needed_packed == 1
    assert not any(w.startswith("tenancy:") for w in plan.warnings)
    assert not any(x.startswith("tenancy:") for r in plan.recommendations for x in r.reasons)


@pytest.mark.parametrize("tenancy", [
    TenancySettings(label="team"),
    TenancySettings(namespace_groups={"search": ("team-a", "team-b")}),
], ids=["label", "namespace-group"])
def test_a_widened_tenant_shares_one_gpu(tenancy: TenancySettings) -> None:
    plan = _plan([_batch("a", "team-a", team="search"), _batch("b", "team-b", team="search")], tenancy)
    assert plan.summary.gpus_needed_packed == 1
    assert not any(w.startswith("tenancy:") for w in plan.warnings)
    assert any("only with MPS clients of " in x and "search" in x for r in plan.recommendations for x in r.reasons)


# --- on the Kubernetes API emulator ------------------------------------------------------------------------------

A100 = "NVIDIA-A100-SXM4-80GB"
GPU1 = {"nvidia.com/gpu": "1", "cpu": "4", "memory": "32Gi"}
BATCH = {"rightsizer.io/class": "batch"}


def _team(ns: str, name: str) -> list[dict[str, Any]]:
    """A Deployment of one team, its ReplicaSet and one pod on a whole A100."""
    tmpl = template({"app": name}, container("worker", "ghcr.io/acme/embed:1.4", GPU1))
    dep = manifest("Deployment", ns, name, {"replicas": 1, "template": tmpl}, {"app": name}, BATCH)
    rs = manifest("ReplicaSet", ns, f"{name}-6c9d7f", {"replicas": 1, "template": tmpl},
                  {"app": name, "pod-template-hash": "6c9d7f"}, owner=dep)
    return [dep, rs, pod_from(rs, ns, f"{name}-6c9d7f-x2k4p", tmpl, "gpu-0", {"pod-template-hash": "6c9d7f"})]


def _vcluster_pod(host: str, vcluster: str, vns: str, name: str) -> dict[str, Any]:
    """The host-side copy of a vCluster's pod: renamed ``<name>-x-<namespace>-x-<vcluster>``, labelled and
    annotated by the syncer, owned by nothing on the host."""
    tmpl = template({}, container("worker", "ghcr.io/acme/embed:1.4", GPU1),
                    annotations={**BATCH, "vcluster.loft.sh/name": name, "vcluster.loft.sh/namespace": vns})
    labels = {"app": name, VC: vcluster, VNS: vns, "vcluster.loft.sh/controlled-by": vcluster, "release": vcluster}
    return pod_from(None, host, f"{name}-x-{vns}-x-{vcluster}", tmpl, "gpu-0", labels)


def _cluster_plan(kube: KubeEmulator, tenancy: TenancySettings = DEFAULT) -> Plan:
    """Discover the cluster, normalise its workloads as the collector does, give each the same usage, plan."""
    settings = kube.settings().model_copy(update={"mechanisms": MechanismSettings(tenancy=tenancy)})
    catalogue = load_catalogue()
    with kube.api_client() as api:
        found, nodes = discover_cluster(settings, NullProgress(), catalogue, api)
    ws = [normalize(w, catalogue) for w in found]
    series = {m.FB_USED_MIB: {w.ref.name: 7000.0 for w in ws}, m.GR_ENGINE_ACTIVE_FRAC: {w.ref.name: 0.05 for w in ws}}
    return run_once(replace(snapshot(ws, series), nodes=nodes, source="kubernetes"), settings, END)


@pytest.fixture(scope="module")
def kube() -> Any:
    objects = [gpu_node("gpu-0", A100, 81920, count=8), *_team("team-a", "embed-a"), *_team("team-b", "embed-b"),
               _vcluster_pod("vc-host", "vc-b", "default", "etl"), _vcluster_pod("vc-host", "vc-c", "default", "etl")]
    with KubeEmulator(objects) as k:
        yield k


def test_on_the_emulator_two_teams_and_two_vclusters_are_four_tenants(kube: KubeEmulator) -> None:
    plan = _cluster_plan(kube)
    keys = {r.ref.key for r in plan.recommendations}
    assert keys == {"team-a/Deployment/embed-a", "team-b/Deployment/embed-b",
                    "vc-host/Pod/etl-x-default-x-vc-b", "vc-host/Pod/etl-x-default-x-vc-c"}
    assert {r.recommended.sharing for r in plan.recommendations if r.recommended} == {Sharing.MPS}
    assert plan.summary.gpus_needed_packed == 4  # four 10% shares: one GPU packed together, four apart
    assert any(w.startswith("tenancy:") and "3 more GPU(s)" in w for w in plan.warnings)
    vc = next(r for r in plan.recommendations if r.ref.name.endswith("vc-b"))
    assert any("workloads of vCluster vc-b namespace default in namespace vc-host" in x for x in vc.reasons)


def test_on_the_emulator_the_settings_widen_tenants(kube: KubeEmulator) -> None:
    teams = TenancySettings(namespace_groups={"embed": ("team-a", "team-b")},
                            vcluster=VClusterSettings(enabled=False))
    plan = _cluster_plan(kube, teams)
    assert plan.summary.gpus_needed_packed == 2  # the teams together, the two vClusters' host namespace together
    assert any(w.startswith("tenancy:") and "1 more GPU(s)" in w for w in plan.warnings)  # still two tenants
    everyone = TenancySettings(namespace_groups={"all": ("team-a", "team-b", "vc-host")},
                               vcluster=VClusterSettings(enabled=False))
    plan = _cluster_plan(kube, everyone)
    assert plan.summary.gpus_needed_packed == 1 and not any(w.startswith("tenancy:") for w in plan.warnings)
