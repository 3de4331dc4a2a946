"""deploy/: every overlay renders, validates offline, and keeps its promises (RBAC, ports, CRD, rules).

Rendering needs ``kubectl`` (``kubectl kustomize``; CI installs Debian's kubernetes-client, kubectl
1.20 with kustomize v2.0.3); set ``KUBECTL`` to use another binary. Built-in kinds are validated with
kubernetes-validate against Kubernetes ``K8S_VERSION``; our own kinds against the CRD's schema.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import kubernetes_validate
import pytest
import yaml

from collectors.prometheus import queries
from collectors.prometheus import rules as recording
from policies.autoscalerobjects import autoscaler_objects
from recommender.core import usage as m
from recommender.core.inventory import WorkloadRef
from recommender.core.plan import ScalingPlan
from recommender.outputs import jsondoc

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
OVERLAYS = ("recommend", "auto", "auto-cluster-wide", "external-metrics")
K8S_VERSION = "1.30.0"
NS = "gpu-rightsizer"
EXAMPLE_PLAN = ScalingPlan(m.REQUEST_RATE, 1.0, 1.0, 0, 1, 1, 0.0, 300, False, 0.0, None, waiting_per_replica=1.0)
SA = ("ServiceAccount", NS, "gpu-rightsizer")
READ = {"get", "list", "watch"}
# (apiGroup, resource) → the write verbs the controller may hold there: the whole allowlist.
WRITES_RECOMMEND = {
    ("", "events"): {"create"},
    ("rightsizer.io", "gpurightsizingpolicies/status"): {"patch"},
    ("coordination.k8s.io", "leases"): {"create", "patch"},
}
WORKLOAD_WRITES = {
    ("apps", "deployments"): {"patch"},
    ("apps", "statefulsets"): {"patch"},
    ("keda.sh", "scaledobjects"): {"patch"},
    ("autoscaling", "horizontalpodautoscalers"): {"patch"},
    # DRA claim objects of its own (admission-policy.yaml: labelled ours, owned by the workload)
    ("resource.k8s.io", "resourceclaimtemplates"): {"create", "delete"},
    ("resource.k8s.io", "resourceclaims"): {"create", "delete"},
    ("batch.volcano.sh", "jobs"): {"patch"},  # a task template's vGPU resources only (admission-policy.yaml)
}
DELETABLE = {("resource.k8s.io", "resourceclaimtemplates"), ("resource.k8s.io", "resourceclaims")}
NODE_WRITES = {("", "nodes"): {"patch"}, ("", "pods/eviction"): {"create"}}
WRITES_AUTO = WRITES_RECOMMEND | WORKLOAD_WRITES | NODE_WRITES | {
    ("", "configmaps"): {"patch"},
    ("", "secrets"): {"create"},  # its signing key: admission-policy.yaml allows that one Secret only
}
SIGNING_KEY = "gpu-rightsizer-signing-key"
OPT_IN = sorted((DEPLOY / "overlays" / "auto" / "opt-in").glob("*.yaml"))
BUILTIN_ROLES = {"system:auth-delegator", "extension-apiserver-authentication-reader"}


def scaling(plan: ScalingPlan, namespace: str, name: str) -> dict[str, Any] | None:
    """The JSON report's ``scaling`` of ``plan`` for one workload, with the objects the pipeline would make."""
    return jsondoc.scaling(plan, autoscaler_objects(plan, namespace, name))


def _kubectl() -> str:
    found = os.environ.get("KUBECTL") or shutil.which("kubectl")
    if not found:
        pytest.skip("kubectl not on PATH (CI installs Debian's kubernetes-client); cannot render deploy/")
    return found


@cache
def _render(overlay: str) -> tuple[dict[str, Any], ...]:
    done = subprocess.run([_kubectl(), "kustomize", str(DEPLOY / "overlays" / overlay)],
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        pytest.fail(f"kubectl kustomize {overlay}: {done.stderr.strip().splitlines()[-1:]}")
    return tuple(d for d in yaml.safe_load_all(done.stdout) if d)


def _one(docs: tuple[dict[str, Any], ...], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def _config(docs: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    cm = _one(docs, "ConfigMap")
    assert cm["metadata"]["name"].startswith("gpu-rightsizer-config"), cm["metadata"]["name"]
    assert cm["metadata"]["namespace"] == NS
    return yaml.safe_load(cm["data"]["config.yaml"])


def _load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


# --- every overlay renders and every built-in object is valid Kubernetes -----------------------------

@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_validates_against_kubernetes_schemas(overlay: str) -> None:
    errors = []
    for doc in _render(overlay):
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # not in kubernetes-validate's schemas: checked in the monitoring tests below
        try:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        except (kubernetes_validate.ValidationError, kubernetes_validate.SchemaNotFoundError) as e:
            errors.append(f"{doc['kind']}/{doc['metadata']['name']}: {type(e).__name__} {e}")
    assert errors == []


def test_validation_is_not_vacuous() -> None:
    """A misspelt field must fail, or the test above proves nothing."""
    bad = copy.deepcopy(_one(_render("recommend"), "Deployment"))
    bad["spec"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


@pytest.mark.parametrize(("overlay", "replicas", "mode", "election", "external"), [
    ("recommend", 1, "Recommend", False, False),
    ("auto", 2, "Auto", True, False),  # two replicas are only safe with leader election
    ("auto-cluster-wide", 2, "Auto", True, False),
    ("external-metrics", 1, "Recommend", False, True),
])
def test_overlay_settings(overlay: str, replicas: int, mode: str, election: bool, external: bool) -> None:
    docs = _render(overlay)
    config = _config(docs)
    assert _one(docs, "Deployment")["spec"]["replicas"] == replicas
    assert (config["mode"], config["leader_election"]["enabled"]) == (mode, election)
    assert config["serve"]["external_metrics"] is external
    assert any(d["kind"] == "APIService" for d in docs) is external
    assert isinstance(config["interval_s"], int) and config["interval_s"] > 0


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_config_sections_are_valid_settings(overlay: str) -> None:
    """The config's sections load into the settings models the controller builds from them."""
    from recommender.core.settings import Settings

    serve = pytest.importorskip("recommender.serve.settings", reason="recommender.serve not present")
    config = _config(_render(overlay))
    settings = Settings.model_validate({k: config[k] for k in ("namespaces", "history_s", "prometheus")})
    assert settings.prometheus.url == config["prometheus"]["url"]
    assert serve.ServeSettings.model_validate(config["serve"]).external_metrics is config["serve"]["external_metrics"]


# --- the pod, its Service, its probes and its config agree -------------------------------------------

@pytest.mark.parametrize("overlay", OVERLAYS)
def test_deployment_service_and_config_agree(overlay: str) -> None:
    docs = _render(overlay)
    dep, svc = _one(docs, "Deployment", "gpu-rightsizer"), _one(docs, "Service", "gpu-rightsizer")
    pod = dep["spec"]["template"]
    (ctr,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in ctr["ports"]}
    assert set(ports) == {"http", "grpc", "https"}
    assert {p["targetPort"] for p in svc["spec"]["ports"]} == set(ports)
    assert {p["name"]: p["port"] for p in svc["spec"]["ports"]}["https"] == 443  # APIServices call 443
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert ctr[probe]["httpGet"] == {"path": path, "port": "http"}
    labels = pod["metadata"]["labels"]
    for selector in (svc["spec"]["selector"], dep["spec"]["selector"]["matchLabels"],
                     _one(docs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"]):
        assert selector.items() <= labels.items()
    assert pod["spec"]["serviceAccountName"] in {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"}
    # The config the pod mounts is the ConfigMap rendered here, at the path the command reads.
    volume = next(v for v in pod["spec"]["volumes"] if "configMap" in v)
    assert volume["configMap"]["name"] == _one(docs, "ConfigMap")["metadata"]["name"]
    mount = next(m for m in ctr["volumeMounts"] if m["name"] == volume["name"])
    config_path = ctr["args"][ctr["args"].index("--config") + 1]
    assert Path(config_path).parent == Path(mount["mountPath"])
    servers = _config(docs)["serve"]
    assert (servers["http_port"], servers["grpc_port"], servers["https_port"]) == (
        ports["http"], ports["grpc"], ports["https"])



# --- the NetworkPolicy: only KEDA, the scraper and (external metrics) the API server get in --------

def _policy_ports(rule: dict[str, Any], named: dict[str, int]) -> set[int]:
    """A rule's ports as numbers: names resolve through the container's ports (an unknown name fails)."""
    return {named[p["port"]] if isinstance(p["port"], str) else p["port"] for p in rule["ports"]}


def _peers(rule: dict[str, Any], key: str) -> set[str]:
    """``ns:<name>`` for a namespace peer (by its name label), ``cidr:<block>`` for an address block."""
    found = set()
    for peer in rule[key]:
        if "ipBlock" in peer:
            found.add(f"cidr:{peer['ipBlock']['cidr']}")
        else:
            assert set(peer) == {"namespaceSelector"}, peer  # no podSelector: any pod of that namespace
            found.add(f"ns:{peer['namespaceSelector']['matchLabels']['kubernetes.io/metadata.name']}")
    return found


def _admitted(docs: tuple[dict[str, Any], ...], direction: str) -> set[tuple[str, int]]:
    """(peer, port) pairs the overlay's NetworkPolicies allow for the controller pod."""
    dep = _one(docs, "Deployment", "gpu-rightsizer")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    named = {p["name"]: p["containerPort"] for p in dep["spec"]["template"]["spec"]["containers"][0]["ports"]}
    pairs = set()
    for policy in (d for d in docs if d["kind"] == "NetworkPolicy"):
        assert policy["metadata"]["namespace"] == NS
        assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
        for rule in policy["spec"].get(direction, []):
            peers = _peers(rule, "from" if direction == "ingress" else "to")
            pairs |= {(peer, port) for peer in peers for port in _policy_ports(rule, named)}
    return pairs


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_network_policy_admits_only_keda_the_scraper_and_the_api_server(overlay: str) -> None:
    docs = _render(overlay)
    ports = {p["name"]: p["containerPort"]
             for p in _one(docs, "Deployment", "gpu-rightsizer")["spec"]["template"]["spec"]["containers"][0]["ports"]}
    served = {p["targetPort"] for p in _one(docs, "Service", "gpu-rightsizer")["spec"]["ports"]}
    expected = {("ns:keda", ports["grpc"]), ("ns:keda", ports["http"]), ("ns:monitoring", ports["http"])}
    external = _config(docs)["serve"]["external_metrics"]
    if external:  # the API server is no pod: an address block, and only to the external metrics API
        expected.add(("cidr:0.0.0.0/0", ports["https"]))
    assert _admitted(docs, "ingress") == expected
    # every port the Service exposes is open to someone exactly when its server runs
    assert {name for name in served if any(port == ports[name] for _, port in expected)} == (
        served if external else served - {"https"})


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_network_policy_lets_the_controller_reach_dns_the_api_and_prometheus(overlay: str) -> None:
    docs = _render(overlay)
    prometheus = urlsplit(_config(docs)["prometheus"]["url"])
    host = prometheus.hostname or ""
    namespace = host.split(".")[1]  # <service>.<namespace>.svc
    assert _admitted(docs, "egress") == {("ns:kube-system", 53), ("cidr:0.0.0.0/0", 443), ("cidr:0.0.0.0/0", 6443),
                                         (f"ns:{namespace}", prometheus.port or 80)}
    policy = _one(docs, "NetworkPolicy", "gpu-rightsizer")
    dns = next(r for r in policy["spec"]["egress"] if r["ports"][0]["port"] == 53)
    assert {p["protocol"] for p in dns["ports"]} == {"UDP", "TCP"}

def test_pod_is_locked_down() -> None:
    pod = _one(_render("recommend"), "Deployment")["spec"]["template"]["spec"]
    (ctr,) = pod["containers"]
    sc = ctr["securityContext"]
    assert sc["runAsNonRoot"] and sc["readOnlyRootFilesystem"] and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"] and "add" not in sc["capabilities"]
    assert sc["seccompProfile"]["type"] == "RuntimeDefault" == pod["securityContext"]["seccompProfile"]["type"]
    assert {"cpu", "memory"} <= ctr["resources"]["requests"].keys()
    assert "memory" in ctr["resources"]["limits"]
    assert ctr["image"].startswith("ghcr.io/gpu-rightsizer/gpu-rightsizer:")


# --- RBAC: least privilege -------------------------------------------------------------------------

def _grants(docs: tuple[dict[str, Any], ...]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(role, rule) for every rule bound to our ServiceAccount; checks that every binding resolves."""
    roles = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d
             for d in docs if d["kind"] in ("Role", "ClusterRole")}
    out = []
    for b in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        ref = b["roleRef"]
        key = (ref["kind"], b["metadata"].get("namespace") if ref["kind"] == "Role" else None, ref["name"])
        if key not in roles:
            assert ref["name"] in BUILTIN_ROLES, f"{b['metadata']['name']} binds missing {key}"
            continue
        if any((s["kind"], s.get("namespace"), s["name"]) == SA for s in b["subjects"]):
            out += [(roles[key], rule) for rule in roles[key]["rules"]]
    return out


@pytest.mark.parametrize(("overlay", "allowed"), [
    ("recommend", WRITES_RECOMMEND), ("auto", WRITES_AUTO), ("auto-cluster-wide", WRITES_AUTO),
    ("external-metrics", WRITES_RECOMMEND)])
def test_rbac_is_least_privilege(overlay: str, allowed: dict[tuple[str, str], set[str]]) -> None:
    docs = _render(overlay)
    grants = _grants(docs)
    assert grants, "no rule is bound to the controller's ServiceAccount"
    for role, rule in grants:
        where = f"{role['kind']}/{role['metadata']['name']}"
        if "secrets" in rule["resources"]:  # only its signing key, in its own namespace
            assert (role["kind"], role["metadata"]["namespace"]) == ("Role", NS), where
            assert rule.get("resourceNames") == [SIGNING_KEY] or rule["verbs"] == ["create"], where
        assert not {"escalate", "bind", "impersonate", "deletecollection"} & set(rule["verbs"]), where
        if "delete" in rule["verbs"]:  # only the DRA claim objects it made (undoing a failed apply)
            assert {(g, r) for g in rule["apiGroups"] for r in rule["resources"]} <= DELETABLE, where
        for group in rule["apiGroups"]:
            for res in rule["resources"]:
                writes = set(rule["verbs"]) - READ
                assert writes <= allowed.get((group, res), set()), f"{where}: {sorted(writes)} on {group}/{res}"
                if res == "leases":  # our own namespace only
                    assert (role["kind"], role["metadata"]["namespace"]) == ("Role", NS), where
                if res == "configmaps":  # the mig-parted config, in the GPU Operator's namespace only
                    assert (role["kind"], role["metadata"]["namespace"]) == ("Role", "gpu-operator"), where


def test_base_role_reads_every_kind_the_collector_lists() -> None:
    """Every kind discovery lists (batch and training job CRDs included) is readable by the base ClusterRole:
    get, list and watch, and no more."""
    from collectors.kubernetes.discover import NAMESPACED, NODES, OPTIONAL

    role = next(d for d in yaml.safe_load_all((DEPLOY / "base" / "rbac-read.yaml").read_text())
                if d and d["kind"] == "ClusterRole")
    reads = {(g, r) for rule in role["rules"] if set(rule["verbs"]) == READ
             for g in rule["apiGroups"] for r in rule["resources"]}
    listed = {(res.group, res.plural) for res in (*NAMESPACED, *OPTIONAL, NODES)}
    assert {("batch.volcano.sh", "jobs"), ("scheduling.volcano.sh", "podgroups"), ("kubeflow.org", "pytorchjobs"),
            ("kubeflow.org", "mpijobs"), ("trainer.kubeflow.org", "trainjobs")} <= listed
    assert listed <= reads, sorted(listed - reads)
    writes = {(g, r) for rule in role["rules"] if set(rule["verbs"]) - READ
              for g in rule["apiGroups"] for r in rule["resources"]}
    assert not writes & {("batch.volcano.sh", "jobs"), ("scheduling.volcano.sh", "podgroups"),
                         ("kubeflow.org", "pytorchjobs"), ("kubeflow.org", "mpijobs")}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_resource_the_collectors_list_is_readable(overlay: str) -> None:
    """The DRA objects (resource.k8s.io) included: a kind the collector lists but may not read is a silent gap."""
    from collectors.kubernetes.claims import KINDS
    from recommender.core.resources import RESOURCES
    readable = {(g, r) for _, rule in _grants(_render(overlay)) if set(rule["verbs"]) >= READ
                for g in rule["apiGroups"] for r in rule["resources"]}
    for kind in KINDS:
        res = RESOURCES[kind]
        assert (res.group, res.plural) in readable, f"{overlay}: cannot read {res.rbac_name}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_rbac_rule_uses_a_wildcard(overlay: str) -> None:
    """Not in any overlay nor opt-in file, for anyone (the HPA's read of external metrics included: the
    built-in system:controller:horizontal-pod-autoscaler role already grants it)."""
    docs = [*_render(overlay), *(d for p in OPT_IN for d in yaml.safe_load_all(p.read_text()) if d)]
    rules = [(d["metadata"]["name"], r) for d in docs if d["kind"] in ("Role", "ClusterRole") for r in d["rules"]]
    assert rules
    for name, rule in rules:
        for key in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
            assert not any("*" in v for v in rule.get(key, [])), f"{name}: {key} {rule[key]}"


def _bound_writes(docs: tuple[dict[str, Any], ...], binding: str) -> set[tuple[str, str]]:
    """(apiGroup, resource) that ``binding``-kind bindings of our ServiceAccount grant a write on."""
    only = tuple(d for d in docs if d["kind"] not in ("RoleBinding", "ClusterRoleBinding") or d["kind"] == binding)
    return {(g, r) for _, rule in _grants(only) if set(rule["verbs"]) - READ
            for g in rule["apiGroups"] for r in rule["resources"]}


def test_auto_changes_workloads_only_in_namespaces_opted_in() -> None:
    """The default Auto render grants no workload or node write cluster-wide; the opt-in RoleBinding and the
    MIG ClusterRoleBinding bind roles that render has; the cluster-wide variant is a separate overlay."""
    docs = _render("auto")
    assert not _bound_writes(docs, "ClusterRoleBinding") & (WORKLOAD_WRITES.keys() | NODE_WRITES.keys())
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRole"}
    for path in OPT_IN:
        kubernetes_validate.validate(_load(path), K8S_VERSION, strict=True)
    namespaced = _load(DEPLOY / "overlays" / "auto" / "opt-in" / "namespace-rolebinding.yaml")
    assert namespaced["kind"] == "RoleBinding" and namespaced["metadata"]["namespace"] not in (NS, None)
    granted = _bound_writes((*docs, namespaced), "RoleBinding")
    assert WORKLOAD_WRITES.keys() <= granted and not granted & NODE_WRITES.keys()
    assert roles[namespaced["roleRef"]["name"]]
    mig = _load(DEPLOY / "overlays" / "auto" / "opt-in" / "mig-nodes-clusterrolebinding.yaml")
    assert _bound_writes((*docs, mig), "ClusterRoleBinding") & NODE_WRITES.keys() == NODE_WRITES.keys()
    assert not _bound_writes((*docs, mig), "ClusterRoleBinding") & WORKLOAD_WRITES.keys()
    wide = _bound_writes(_render("auto-cluster-wide"), "ClusterRoleBinding")
    assert WORKLOAD_WRITES.keys() <= wide and not wide & NODE_WRITES.keys()


def test_recommend_writes_nothing_auto_needs() -> None:
    granted = {(g, r) for role, rule in _grants(_render("recommend")) if set(rule["verbs"]) - READ
               for g in rule["apiGroups"] for r in rule["resources"]}
    assert granted <= WRITES_RECOMMEND.keys()
    assert not granted & {("apps", "deployments"), ("", "nodes"), ("", "pods/eviction")}


def _names(docs: tuple[dict[str, Any], ...], resource: str) -> set[tuple[str, str]]:
    """(namespace, name) of every object of ``resource`` our grants are limited to by resourceNames."""
    return {(role["metadata"].get("namespace", ""), n) for role, rule in _grants(docs)
            if resource in rule["resources"] for n in rule.get("resourceNames", [])}


def test_rbac_names_the_configured_lease_and_mig_configmap() -> None:
    docs = _render("auto")
    config = _config(docs)
    election = config["leader_election"]
    assert _names(docs, "leases") == {(election["lease_namespace"], election["lease_name"])}
    from recommender.core.settings_sources import KubernetesSettings
    k = KubernetesSettings(**config.get("kubernetes") or {})  # the device plugin's ConfigMap of named configs
    assert _names(docs, "configmaps") == {tuple(config["mig"]["configmap"].split("/")),
                                          (k.device_plugin_namespace, k.device_plugin_configmap_name)}


def test_apiservice_points_at_our_https_port() -> None:
    docs = _render("external-metrics")
    api = _one(docs, "APIService")["spec"]
    svc = _one(docs, "Service", api["service"]["name"])
    assert (api["group"], api["version"], api["service"]["namespace"]) == ("external.metrics.k8s.io", "v1beta1", NS)
    port = next(p for p in svc["spec"]["ports"] if p["port"] == api["service"].get("port", 443))
    assert port["targetPort"] == "https"
    # The HPA controller reads external metrics through its built-in role (system:controller:horizontal-pod-
    # autoscaler: get/list on external.metrics.k8s.io *); a grant of ours would only repeat it as a wildcard.
    hpa = [b for b in docs if b["kind"] == "ClusterRoleBinding"
           and {"name": "horizontal-pod-autoscaler", "namespace": "kube-system"} in
           [{k: s.get(k) for k in ("name", "namespace")} for s in b["subjects"]]]
    assert hpa == []
    reader = _one(docs, "RoleBinding", "gpu-rightsizer-auth-reader")
    assert reader["metadata"]["namespace"] == "kube-system"  # kustomize's namespace must not move it
    assert _names(docs, "apiservices") == {("", _one(docs, "APIService")["metadata"]["name"])}


def test_external_metrics_has_its_certificate() -> None:
    docs = _render("external-metrics")
    serve = _config(docs)["serve"]
    pod = _one(docs, "Deployment")["spec"]["template"]["spec"]
    (ctr,) = pod["containers"]
    secret = next(v for v in pod["volumes"] if "secret" in v)
    mount = next(m for m in ctr["volumeMounts"] if m["name"] == secret["name"])
    for key in ("tls_cert", "tls_key"):
        assert Path(serve[key]).parent == Path(mount["mountPath"])
    assert "subPath" not in mount  # a subPath mount never sees the renewed Secret the controller reloads
    assert {m["mountPath"] for m in ctr["volumeMounts"]} >= {"/etc/rightsizer", mount["mountPath"]}  # patch merged


# --- monitoring --------------------------------------------------------------------------------------

def test_servicemonitor_scrapes_our_service() -> None:
    docs = _render("recommend")
    sm, svc = _one(docs, "ServiceMonitor"), _one(docs, "Service", "gpu-rightsizer")
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert NS in sm["spec"]["namespaceSelector"]["matchNames"]
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in svc["spec"]["ports"]} and endpoint["path"] == "/metrics"


def _rules() -> dict[str, str]:
    doc = _load(DEPLOY / "monitoring" / "recording-rules.yaml")
    assert doc["apiVersion"] == "monitoring.coreos.com/v1" and doc["kind"] == "PrometheusRule"
    return {r["record"]: r["expr"] for g in doc["spec"]["groups"] for r in g["rules"]}


def test_recording_rules_are_what_the_recommender_queries() -> None:
    """One rule per family per resolution: the 2 min range rules every minute, the 10 min step rules every 10 min
    (at most their step, so every block is evaluated), each expression what the collector's own code forms."""
    doc = _load(DEPLOY / "monitoring" / "recording-rules.yaml")
    groups = {g["name"]: g for g in doc["spec"]["groups"]}
    assert set(groups) == {"gpu-rightsizer.usage", "gpu-rightsizer.usage-steps"}
    assert groups["gpu-rightsizer.usage"]["interval"] == "1m"
    assert groups["gpu-rightsizer.usage-steps"]["interval"] == "10m"
    ranged = {r["record"]: r["expr"] for r in groups["gpu-rightsizer.usage"]["rules"]}
    stepped = {r["record"]: r["expr"] for r in groups["gpu-rightsizer.usage-steps"]["rules"]}
    for fam in queries.FAMILIES:
        want = queries.usage_query(fam.metric, queries.Scope(()), 120)
        got = ranged.get(f"namespace_pod:{fam.metric}:2m")
        assert got is not None and " ".join(got.split()) == want, f"update the rule for {fam.metric}: {want}"
        want = recording.step_rule_expr(fam.metric, 600)
        got = stepped.get(recording.step_name(fam.metric, 600))
        assert got is not None and " ".join(got.split()) == want, f"update the step rule for {fam.metric}: {want}"
        assert recording.step_range_s(recording.step_name(fam.metric, 600)) == 600
    assert len(ranged) == len(stepped) == len(queries.FAMILIES) and len(_rules()) == 2 * len(queries.FAMILIES)


def test_promtool_accepts_the_rules(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian's prometheus package)")
    doc = _load(DEPLOY / "monitoring" / "recording-rules.yaml")
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": doc["spec"]["groups"]}))
    done = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in done.stdout + done.stderr


# --- the CRD: examples pass, malformed policies do not -----------------------------------------------

def _crd_schema() -> dict[str, Any]:
    crd = _load(DEPLOY / "base" / "gpurightsizingpolicy-crd.yaml")
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
    return version["schema"]["openAPIV3Schema"]


def _strict(node: Any) -> Any:
    """The schema as `kubectl apply` enforces it: unknown fields are errors (field validation Strict)."""
    if isinstance(node, list):
        return [_strict(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strict(v) for k, v in node.items()}
    if "properties" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


# OpenAPI 3.0 schema objects use draft-4 keywords (exclusiveMinimum is a boolean).
VALIDATOR = jsonschema.Draft4Validator(_strict(_crd_schema()), format_checker=jsonschema.FormatChecker())
POLICIES = sorted(DEPLOY.glob("examples/policy-*.yaml"))


def _errors(doc: Any) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in VALIDATOR.iter_errors(doc)]


@pytest.mark.parametrize("path", POLICIES, ids=lambda p: p.name)
def test_example_policies_match_the_crd(path: Path) -> None:
    doc = _load(path)
    assert (doc["apiVersion"], doc["kind"]) == ("rightsizer.io/v1alpha1", "GPURightsizingPolicy")
    assert _errors(doc) == []


def test_examples_cover_every_mode_a_selector_and_windows() -> None:
    specs = [_load(p)["spec"] for p in POLICIES]
    assert {s.get("mode", "Recommend") for s in specs} == {"Off", "Recommend", "Auto"}
    assert any("selector" in s["target"] for s in specs)
    assert any(s.get("maintenanceWindows") for s in specs)


def _break(change: str) -> dict[str, Any]:
    doc = _load(DEPLOY / "examples" / "policy-maintenance-windows.yaml")
    spec = doc["spec"]
    match change:
        case "bad mode":
            spec["mode"] = "Sometimes"
        case "mode Off unquoted":  # `mode: Off` in YAML 1.1 is the boolean false
            spec["mode"] = yaml.safe_load("mode: Off")["mode"]
        case "both targets":
            spec["target"]["selector"] = {"matchLabels": {"app": "x"}}
        case "no target":
            spec["target"] = {}
        case "empty selector":
            spec["target"] = {"selector": {}}
        case "empty matchLabels":
            spec["target"] = {"selector": {"matchLabels": {}}}
        case "negative minReplicas":
            spec["bounds"]["minReplicas"] = -1
        case "zero maxReplicas":
            spec["bounds"]["maxReplicas"] = 0
        case "unknown mechanism":
            spec["allowedMechanisms"] = ["mig", "vgpu"]
        case "zero ttft":
            spec["latencyObjectives"]["ttftSeconds"] = 0
        case "sub-millisecond ttft":  # under vLLM's first TTFT bucket: every request would count as over it
            spec["latencyObjectives"]["ttftSeconds"] = 0.0009
        case "bad profile":
            spec["bounds"]["smallestProfile"] = "1g"
        case "bad cron":
            spec["maintenanceWindows"][0]["schedule"] = "every night"
        case "window without duration":
            del spec["maintenanceWindows"][0]["durationMinutes"]
        case "bad class":
            spec["classOverride"] = "interactive"
        case "unknown field":
            spec["bounds"]["maxReplica"] = 3
        case "bad workload kind":
            spec["target"]["workloadRef"]["kind"] = "Pod"
        case "bad condition status":
            doc["status"] = {"conditions": [{"type": "Ready", "status": "Yes", "reason": "Ok", "message": "",
                                             "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    return doc


@pytest.mark.parametrize("change", [
    "bad mode", "mode Off unquoted", "both targets", "no target", "empty selector", "empty matchLabels",
    "negative minReplicas",
    "zero maxReplicas", "unknown mechanism", "zero ttft", "sub-millisecond ttft", "bad profile", "bad cron",
    "window without duration",
    "bad class", "unknown field", "bad workload kind", "bad condition status"])
def test_crd_rejects_malformed_policies(change: str) -> None:
    assert _break("none") != _break(change)
    assert _errors(_break(change)), f"schema accepted a policy with {change}"


def test_the_crds_ttft_bounds_are_the_controllers() -> None:
    """The CRD refuses what the controller's parser refuses: an objective under vLLM's first TTFT bucket, or over
    the maximum."""
    policy = pytest.importorskip("recommender.controller.policy", reason="recommender.controller not present")
    from recommender.core.usage import VLLM_TTFT_BUCKETS_S

    spec = _crd_schema()["properties"]["spec"]["properties"]
    ttft = spec["latencyObjectives"]["properties"]["ttftSeconds"]
    assert (ttft["minimum"], ttft["maximum"]) == (VLLM_TTFT_BUCKETS_S[0], policy.MAX_TTFT_OBJECTIVE_S)
    assert not ttft.get("exclusiveMinimum") and not ttft.get("exclusiveMaximum")


@pytest.mark.parametrize("path", POLICIES, ids=lambda p: p.name)
def test_controller_accepts_what_the_crd_accepts(path: Path) -> None:
    """The controller's own parser (extra fields forbidden) takes every example the CRD takes."""
    policy = pytest.importorskip("recommender.controller.policy", reason="recommender.controller not present")
    assert policy.parse_policy(_load(path)).problem is None


def test_controller_status_fits_the_crd(plan: Any) -> None:
    """A status the controller writes must pass the status subresource's schema, or every write fails."""
    loop = pytest.importorskip("recommender.controller.loop", reason="recommender.controller not present")
    records = pytest.importorskip("recommender.controller.records", reason="recommender.controller not present")
    summary = getattr(loop, "_summary", None)
    if summary is None:
        pytest.skip("recommender.controller.loop has no _summary")
    now = plan.generated_at
    doc = _break("none")
    doc["status"] = {
        "observedGeneration": 3,
        "recommendations": [summary(r) for r in plan.recommendations],
        "conditions": [records.condition("Valid", False, "InvalidSpec", "bounds.minReplicas 5 > maxReplicas 2", now)],
        "lastActions": [{"time": records.ts(now), "workload": "inference/Deployment/chat", "result": "rolled-back",
                         "message": "TTFT p95 rose"}],
    }
    assert doc["status"]["recommendations"]
    assert _errors(doc) == []


def _nodes(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every schema node with its path (properties, items, additionalProperties)."""
    out = [(path, node)]
    for name, child in node.get("properties", {}).items():
        out += _nodes(child, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            out += _nodes(node[key], f"{path}[]")
    return out


def test_crd_schema_is_structural() -> None:
    """What the API server demands of a CRD schema, which jsonschema does not check."""
    for path, node in _nodes(_crd_schema()):
        assert "type" in node, f"{path}: every node needs a type"
        assert not ("properties" in node and "additionalProperties" in node), f"{path}: not both"
        assert node.get("uniqueItems") is not True, f"{path}: uniqueItems is refused; use list-type set"
        for branch in node.get("oneOf", []) + node.get("anyOf", []) + node.get("allOf", []):
            assert not {"type", "description", "default"} & branch.keys(), f"{path}: junctors hold no types"
            assert set(branch.get("required", [])) <= node["properties"].keys(), path
        for rule in node.get("x-kubernetes-validations", []):
            # CEL runs only on the API server: at least check it names fields that exist where it sits.
            for field in re.findall(r"self\.(\w+)", rule["rule"]):
                assert field in node["properties"], f"{path}: rule {rule['rule']!r} names unknown {field}"
            assert rule["message"]


def test_cel_only_rules_are_declared() -> None:
    """minReplicas <= maxReplicas and profile order are beyond OpenAPI: they must be CEL rules."""
    bounds = _crd_schema()["properties"]["spec"]["properties"]["bounds"]
    rules = " ".join(r["rule"] for r in bounds["x-kubernetes-validations"])
    assert "self.minReplicas <= self.maxReplicas" in rules
    assert "smallestProfile" in rules and "largestProfile" in rules
    swapped = _break("none")
    swapped["spec"]["bounds"].update(minReplicas=5, maxReplicas=2)
    assert _errors(swapped) == []  # documents the gap: only the API server refuses this one


# --- KEDA examples -----------------------------------------------------------------------------------

def _service_port(name: str) -> int:
    svc = _load(DEPLOY / "base" / "service.yaml")
    return next(p["port"] for p in svc["spec"]["ports"] if p["name"] == name)


@pytest.mark.parametrize("path", sorted(DEPLOY.glob("examples/scaledobject-*.yaml")), ids=lambda p: p.name)
def test_scaledobjects_point_at_our_servers(path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    (so,) = [d for d in docs if d["kind"] == "ScaledObject"]
    assert so["apiVersion"] == "keda.sh/v1alpha1"
    http_scaled = {d["metadata"]["name"]: d for d in docs if d["kind"] == "HTTPScaledObject"}
    spec, ns = so["spec"], so["metadata"]["namespace"]
    target = spec["scaleTargetRef"]
    assert target["kind"] in ("Deployment", "StatefulSet") and target["name"]
    assert 0 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]
    if spec["minReplicaCount"] == 0:
        assert spec["cooldownPeriod"] > 0  # KEDA's wait before the last replica goes
    if "idleReplicaCount" in spec:
        assert spec["idleReplicaCount"] < spec["minReplicaCount"]
    assert 0 < spec["fallback"]["replicas"] <= spec["maxReplicaCount"]
    host = f"gpu-rightsizer.{NS}.svc"
    doc = scaling(EXAMPLE_PLAN, ns, target["name"])
    report_queries = {t["metadata"]["query"] for t in doc["keda"]["triggers"]} if doc else set()
    for trig in spec["triggers"]:
        meta = trig["metadata"]
        assert all(isinstance(v, str) for v in meta.values()), "KEDA trigger metadata values are strings"
        if trig["type"] == "external":
            assert meta["scalerAddress"] == f"{host}:{_service_port('grpc')}"
            assert meta["workload"] == f"{target['kind']}/{target['name']}"
        elif trig["type"] == "metrics-api":
            assert meta["url"] == f"http://{host}:{_service_port('http')}/api/v1/keda/{ns}/{target['name']}"
            assert meta["valueLocation"] and float(meta["targetValue"]) > 0
            assert float(meta.get("activationTargetValue", "0")) >= 0
        elif trig["type"] == "prometheus":  # the report's own triggers, which Auto keeps in step with the plan
            assert trig["metricType"] == "AverageValue", "a Value target would not divide by the replicas"
            assert meta["query"] in report_queries, f"not a query the report writes for {target['name']}"
            assert meta["serverAddress"].startswith("http") and float(meta["threshold"]) > 0
        elif trig["type"] == "external-push":  # KEDA's HTTP add-on, holding requests at zero
            _check_http_addon(http_scaled.pop(meta["httpScaledObject"]), so)
            assert meta["scalerAddress"].endswith(":9090")
        else:
            pytest.fail(f"unexpected trigger type {trig['type']}")
    assert not http_scaled, f"HTTPScaledObjects no trigger reads: {sorted(http_scaled)}"


def _check_http_addon(hso: dict[str, Any], so: dict[str, Any]) -> None:
    """The add-on creates no ScaledObject of its own (KEDA allows one per workload), under another name than
    ours (its reconciler removes a same-named one), for the same workload, and holds a request at zero for
    at least the weights' load that ``initialCooldownPeriod`` allows for."""
    assert hso["apiVersion"] == "http.keda.sh/v1alpha1"
    assert hso["metadata"]["annotations"]["httpscaledobject.keda.sh/skip-scaledobject-creation"] == "true"
    assert hso["metadata"]["name"] != so["metadata"]["name"]
    assert hso["metadata"]["namespace"] == so["metadata"]["namespace"]
    ref, target = hso["spec"]["scaleTargetRef"], so["spec"]["scaleTargetRef"]
    assert (ref["kind"], ref["name"]) == (target["kind"], target["name"]) and ref["service"]
    assert (hso["spec"]["replicas"]["min"], hso["spec"]["replicas"]["max"]) == (
        so["spec"]["minReplicaCount"], so["spec"]["maxReplicaCount"])
    wait = hso["spec"]["timeouts"]["conditionWait"]
    assert wait.endswith("s") and float(wait[:-1]) >= so["spec"]["initialCooldownPeriod"]


# --- the HPA example: autoscaling/v2 on our external metrics adapter ------------------------------------------

HPA_EXAMPLES = sorted(DEPLOY.glob("examples/hpa-*.yaml"))


def test_there_is_an_hpa_example() -> None:
    assert HPA_EXAMPLES


@pytest.mark.parametrize("path", HPA_EXAMPLES, ids=lambda p: p.name)
def test_hpa_examples_are_valid_kubernetes(path: Path) -> None:
    hpa = _load(path)
    kubernetes_validate.validate(hpa, K8S_VERSION, strict=True)
    spec = hpa["spec"]
    assert hpa["apiVersion"] == "autoscaling/v2" and 1 <= spec["minReplicas"] <= spec["maxReplicas"]
    assert spec["behavior"]["scaleDown"]["stabilizationWindowSeconds"] <= 3600


@pytest.mark.parametrize("path", HPA_EXAMPLES, ids=lambda p: p.name)
def test_hpa_examples_ask_what_our_adapter_answers(path: Path) -> None:
    """Each External metric's name and selector, sent as the HPA sends them (matchLabels as key=value terms), get
    an ExternalMetricValueList for the example's own workload from the adapter; the target type fits the metric."""
    from dataclasses import replace
    from datetime import UTC, datetime

    from recommender.serve import ServeSettings, extmetrics
    from recommender.serve.targets import DESIRED_REPLICAS, find_recommendation, target_for
    from tests import servefixture as sf

    hpa = _load(path)
    ns, ref = hpa["metadata"]["namespace"], hpa["spec"]["scaleTargetRef"]
    base = sf.plan()
    llama = next(r for r in base.recommendations if r.ref.key == sf.LLAMA)
    ours = replace(llama, workload=replace(llama.workload, ref=WorkloadRef(ns, ref["kind"], ref["name"])))
    plan = replace(base, recommendations=(ours, *base.recommendations))
    metrics = [x for x in hpa["spec"]["metrics"] if x["type"] == "External"]
    assert metrics
    for metric in metrics:
        ext = metric["external"]
        labels = ext["metric"]["selector"]["matchLabels"]
        selector = extmetrics.parse_selector(",".join(f"{k}={v}" for k, v in labels.items()))
        rec = find_recommendation(plan, ns, extmetrics.workload_of(selector))
        assert rec.ref == ours.ref, "the selector names another workload"
        target = target_for(plan, rec, 0.0, ServeSettings())
        body = extmetrics.value_list(ext["metric"]["name"], target, datetime(2026, 1, 1, tzinfo=UTC), 60)
        assert [i["metricName"] for i in body["items"]] == [ext["metric"]["name"]]
        assert ext["target"]["type"] == "AverageValue", "a Value target would not divide by the replicas"
        if ext["metric"]["name"] == DESIRED_REPLICAS:
            assert ext["target"]["averageValue"] == "1"
        else:
            assert float(ext["target"]["averageValue"]) > 0


def test_the_report_hpa_validates_and_matches_the_example_form() -> None:
    """The report's ``scaling.hpa`` is valid Kubernetes, and asks the adapter in the example's form."""
    doc = scaling(EXAMPLE_PLAN, "inference", "llama-chat")
    assert doc is not None
    hpa = doc["hpa"]
    kubernetes_validate.validate(hpa, K8S_VERSION, strict=True)
    example = _load(DEPLOY / "examples" / "hpa-external.yaml")
    assert hpa["spec"]["scaleTargetRef"] == example["spec"]["scaleTargetRef"]
    assert hpa["spec"]["metrics"][0]["external"]["metric"] == example["spec"]["metrics"][0]["external"]["metric"]
