"""GPU workloads from the Kubernetes API: list objects, resolve each pod's top-level owner, parse specs.

A workload is the highest object we can find by following controller ownerReferences: Pod →
ReplicaSet → Deployment, Pod → Job → CronJob, Pod → StatefulSet, and for LeaderWorkerSet worker pod →
worker StatefulSet → leader Pod → leader StatefulSet → LeaderWorkerSet. Its allocation is read from the
controller's pod template (what every replica gets), not from whichever pods happen to run; pods only
say which node, and so which GPU, the workload runs on. A Deployment's ReplicaSets and a StatefulSet's or
LeaderWorkerSet's ControllerRevisions, one per template rolled out, say since when its replicas have the shape
they have now (``revisions.shape_since``). Listing is the only I/O; :func:`build_workloads` is pure and tests without
a server.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kubernetes import client

from collectors.kubernetes.claims import DraObjects, list_dra, resolve, with_claims
from collectors.kubernetes.client import (
    KubernetesDenied,
    KubernetesNotServed,
    list_objects,
    make_api_client,
)
from collectors.kubernetes.devplugin import read_configs, with_configs
from collectors.kubernetes.jobs import FROM_PODS
from collectors.kubernetes.parse import PRODUCT_LABEL, ParsedSpec, parse_pod_spec, unresolved, with_node
from collectors.kubernetes.revisions import Revision, controller_ref, replaced_since, revision_of, shape_since
from collectors.kubernetes.templates import parse_controller, pod_template
from recommender.core.annotations import MIG_CONFIG_LABEL, POD_GROUP_ANNOTATION, SCHEDULE_ANNOTATION, quoted
from recommender.core.autoscalers import HPA, SCALED_OBJECT, by_target, describe
from recommender.core.catalogue import Catalogue
from recommender.core.inventory import MAX_DEVICES, GpuNode, Sharing, Workload, WorkloadRef
from recommender.core.progress import Progress
from recommender.core.resources import RESOURCES, VOLCANO_JOB, Resource, kind_key, owner_kind
from recommender.core.settings import Settings
from recommender.core.timestamps import parse_time

NAMESPACED = tuple(RESOURCES[k] for k in (
    "Deployment", "StatefulSet", "ReplicaSet", "ControllerRevision", "Job", "CronJob", "Pod"))
LEADER_WORKER_SETS = RESOURCES["LeaderWorkerSet"]
# who owns a workload's replicas (listed once per scope, not per workload; KEDA not installed: no ScaledObjects)
AUTOSCALERS = (RESOURCES[HPA], RESOURCES[SCALED_OBJECT])
# batch and training jobs (Volcano, Kubeflow, JobSet): CRDs that may not be installed
JOBS = tuple(RESOURCES[k] for k in (VOLCANO_JOB, "PodGroup", "PyTorchJob", "MPIJob", "TrainJob", "JobSet"))
OPTIONAL = (LEADER_WORKER_SETS, *JOBS, *AUTOSCALERS)
NODES = RESOURCES["Node"]
LISTED_KINDS = frozenset(kind_key(r) for r in (*NAMESPACED, LEADER_WORKER_SETS, *JOBS))
LIST_TASK = "kubernetes: list objects"
_MAX_OWNER_DEPTH = 8  # LeaderWorkerSet chains are 4 deep; more is a loop or something we do not know
_DROPPED_ANNOTATIONS = frozenset({"kubectl.kubernetes.io/last-applied-configuration"})  # whole manifests

Key = tuple[str, str, str]  # (namespace, kind, name)


@dataclass
class Listing:
    """What the API returned, indexed: objects by (namespace, kind, name), node labels by node name."""

    objects: dict[Key, dict[str, Any]] = field(default_factory=dict)
    node_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    nodes_listed: bool = True
    autoscalers: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # kind → HPAs, ScaledObjects
    dra: DraObjects = field(default_factory=DraObjects)  # ResourceClaims and what resolves them

    def add(self, kind: str, items: Sequence[Mapping[str, Any]]) -> None:
        """Index by the kind we listed: items of a list response carry no ``kind`` of their own."""
        for item in items:
            meta = item.get("metadata") or {}
            self.objects[(meta.get("namespace") or "", kind, meta.get("name") or "")] = dict(item)


GPU_COUNT_LABEL = "nvidia.com/gpu.count"  # GFD


def discover_workloads(
    settings: Settings, progress: Progress, api_client: client.ApiClient | None = None
) -> tuple[Workload, ...]:
    """GPU workloads in ``settings.namespaces`` (empty: all), sorted by namespace, kind, name."""
    api = api_client or make_api_client(settings.kubernetes)
    return build_workloads(list_cluster(api, settings.namespaces, settings.kubernetes.timeout_s, progress))


def discover_cluster(
    settings: Settings, progress: Progress, catalogue: Catalogue, api_client: client.ApiClient | None = None
) -> tuple[tuple[Workload, ...], tuple[GpuNode, ...]]:
    """The GPU workloads and the GPU nodes (for per-node MIG plans), from one listing."""
    api = api_client or make_api_client(settings.kubernetes)
    listing = list_cluster(api, settings.namespaces, settings.kubernetes.timeout_s, progress)
    configs = read_configs(api, settings.kubernetes)
    notes: list[str] = []
    nodes = tuple(with_configs(n, listing.node_labels.get(n.name, {}), configs,
                               settings.kubernetes.device_plugin_default_config)
                  for n in gpu_nodes(listing, catalogue, notes))
    for note in notes:
        progress.log(note)
    return build_workloads(listing), nodes


def list_cluster(
    api: client.ApiClient, namespaces: Sequence[str], timeout_s: float, progress: Progress
) -> Listing:
    """One list call per resource and namespace (one across all namespaces when none are given)."""
    scopes: list[str | None] = list(dict.fromkeys(namespaces)) or [None]
    progress.start(LIST_TASK, total=len(scopes) * (len(NAMESPACED) + len(OPTIONAL)) + 2)
    listing = Listing()
    served = {kind_key(r): True for r in OPTIONAL}
    for namespace in scopes:
        for resource in NAMESPACED:
            listing.add(resource.kind, list_objects(api, resource, namespace, timeout_s))
            progress.advance(LIST_TASK)
        for res in OPTIONAL:
            key = kind_key(res)
            items = _list_optional(api, res, namespace, timeout_s, progress) if served[key] else None
            served[key] = items is not None
            if res in AUTOSCALERS:
                listing.autoscalers.setdefault(res.kind, []).extend(items or [])
            else:
                listing.add(key, items or [])
            progress.advance(LIST_TASK)
    try:
        nodes = list_objects(api, NODES, None, timeout_s)
        listing.node_labels = {n["metadata"]["name"]: (n["metadata"].get("labels") or {}) for n in nodes}
    except KubernetesDenied as exc:  # nodes are cluster-scoped: namespace-scoped users often cannot list them
        listing.nodes_listed = False
        progress.log(f"GPU products unknown where pods do not select one: {exc}")
    progress.advance(LIST_TASK)
    listing.dra = list_dra(api, scopes, timeout_s, progress)
    progress.advance(LIST_TASK)
    return listing


def _list_optional(
    api: client.ApiClient, res: Resource, namespace: str | None, timeout_s: float, progress: Progress,
) -> list[dict[str, Any]] | None:
    """List a CRD that may not be installed; None (stop asking) when it is not served or not allowed."""
    try:
        return list_objects(api, res, namespace, timeout_s)
    except KubernetesNotServed:
        return None  # the CRD is not installed: nothing to say
    except KubernetesDenied as exc:
        progress.log(f"skipping {res.kind}s: {exc}")
        return None


def build_workloads(listing: Listing) -> tuple[Workload, ...]:
    """Group pods under their top-level owners, keep the workloads that hold a GPU, and name the autoscaler
    that owns each one's replicas (``recommender.core.autoscalers``)."""
    pods: dict[Key, list[dict[str, Any]]] = {}
    notes: dict[Key, list[str]] = {}
    revisions: dict[Key, list[Revision]] = {}
    tops: set[Key] = set()
    for key, obj in listing.objects.items():
        top, why = top_owner(key, obj, listing.objects)
        notes.setdefault(top, []).extend(why)
        if key[1] == "Pod":
            pods.setdefault(top, []).append(obj)
        elif top == key:
            tops.add(key)
        if (rev := revision_of(key[1], obj)) is not None and (ref := controller_ref(obj)) is not None:
            revisions.setdefault((key[0], str(ref.get("kind", "")), str(ref.get("name", ""))), []).append(rev)
    found = (_workload(k, listing, pods.get(k, []), notes.get(k, []), revisions.get(k, []))
             for k in sorted(tops | set(pods)))
    scalers = by_target(listing.autoscalers.get(HPA, []), listing.autoscalers.get(SCALED_OBJECT, []))
    return tuple(replace(w, autoscaler=describe(scalers.get((w.ref.namespace, w.ref.kind, w.ref.name), ())))
                 for w in found if w is not None)


def top_owner(key: Key, obj: Mapping[str, Any], objects: Mapping[Key, Mapping[str, Any]]) -> tuple[Key, list[str]]:
    """Follow controller ownerReferences up to the highest object we listed, saying where it stopped."""
    for _ in range(_MAX_OWNER_DEPTH):
        ref = controller_ref(obj)
        if ref is None and key[1] == "Pod" and (group := _pod_group(key, obj, objects)) is not None:
            key, obj = group, objects[group]  # a pod of a Volcano PodGroup, with no controller of its own
            continue
        if ref is None:
            bare = key[1] == "Pod"
            return key, ["bare pod: no controller owns it, so nothing recreates it"] if bare else []
        kind = owner_kind(str(ref.get("apiVersion", "")), str(ref.get("kind", "")))
        owner_key: Key = (key[0], kind, str(ref.get("name", "")))
        owner = objects.get(owner_key)
        if owner is None:
            if key[1] == "Pod":
                return _missing_owner(owner_key, obj)
            kind, name = owner_key[1:]
            why = "not found (deleted?)" if kind in LISTED_KINDS else "not read"
            return key, [f"owner {kind} {name} {why}; {key[1]} {key[2]} taken as the workload"]
        key, obj = owner_key, owner
    return key, [f"ownerReferences deeper than {_MAX_OWNER_DEPTH} levels; stopped at {key[1]} {key[2]}"]


def _pod_group(key: Key, pod: Mapping[str, Any], objects: Mapping[Key, Mapping[str, Any]]) -> Key | None:
    """The listed PodGroup a controller-less pod names in ``scheduling.k8s.io/group-name``, if any."""
    name = ((pod.get("metadata") or {}).get("annotations") or {}).get(POD_GROUP_ANNOTATION)
    group: Key = (key[0], "PodGroup", str(name))
    return group if name and group in objects else None


def _missing_owner(ref: Key, pod: Mapping[str, Any]) -> tuple[Key, list[str]]:
    """A pod whose owner is gone or of a kind we do not list: group by the reference itself.

    A ReplicaSet is named ``<deployment>-<pod-template-hash>``, so its Deployment can be inferred.
    """
    namespace, kind, name = ref
    template_hash = ((pod.get("metadata") or {}).get("labels") or {}).get("pod-template-hash")
    if kind == "ReplicaSet" and template_hash and name.endswith(f"-{template_hash}"):
        deployment = name[: -len(template_hash) - 1]
        return (namespace, "Deployment", deployment), [
            f"ReplicaSet {name} not found; owner inferred from its name: Deployment {deployment}"
        ]
    if kind in LISTED_KINDS:
        return ref, [f"owner {kind} {name} not found (deleted?); allocation read from its pods"]
    return ref, [f"owner kind {kind} is not read; allocation read from its pods"]


def _workload(key: Key, listing: Listing, pods: list[dict[str, Any]], notes: list[str],
              revisions: Sequence[Revision] = ()) -> Workload | None:
    obj = listing.objects.get(key)
    pods = sorted(pods, key=lambda p: p["metadata"]["name"])
    template = pod_template(key[1], obj) if obj is not None and key[1] != "Pod" else (pods[0] if pods else {})
    claims, claim_notes = resolve(key[0], template, pods, listing.dra)
    if obj is not None and key[1] != "Pod":
        parsed, meta = parse_controller(key[1], obj, claims), obj.get("metadata") or {}
        if parsed.allocation.sharing is Sharing.NONE and pods and key[1] in FROM_PODS:
            spec = pods[0].get("spec") or {}
            found = parse_pod_spec(spec, (pods[0].get("metadata") or {}).get("annotations") or {}, len(pods))
            parsed = replace(found, notes=(*parsed.notes, *found.notes, f"{key[1]} {key[2]} has no pod template "
                                           "holding a GPU: allocation read from its pods"))
    elif pods:
        spec, meta = pods[0].get("spec") or {}, pods[0].get("metadata") or {}
        parsed = parse_pod_spec(spec, meta.get("annotations") or {}, replicas=len(pods), claims=claims)
    else:
        return None
    if parsed.allocation.sharing is Sharing.NONE:
        return None
    since = shape_since(parsed, revisions) if obj is not None and revisions else None
    since, on_delete = replaced_since(key[1], obj, since, pods)
    notes = [*notes, *on_delete, *claim_notes]
    parsed = with_claims(unresolved(place(parsed, pods, listing)), claims)
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in _DROPPED_ANNOTATIONS}
    schedule = ((obj or {}).get("spec") or {}).get("schedule") if key[1] == "CronJob" else None
    if schedule:  # the classifier reads a schedule as strong evidence of batch
        annotations.setdefault(SCHEDULE_ANNOTATION, str(schedule))
    return Workload(
        ref=WorkloadRef(*key),
        allocation=parsed.allocation,
        pods=tuple(p["metadata"]["name"] for p in pods),
        labels=dict(meta.get("labels") or {}),
        annotations=annotations,
        source="kubernetes",
        notes=tuple(dict.fromkeys([*notes, *parsed.notes])),
        served_model=parsed.served_model,
        nodes=tuple(sorted({n for p in pods if (n := (p.get("spec") or {}).get("nodeName"))})),
        cold_start_s=cold_start_s(pods),
        shape_since=since,
        template_path=parsed.template_path,
    )


def cold_start_s(pods: Sequence[Mapping[str, Any]]) -> float | None:
    """Median seconds from pod start to Ready over pods that became ready: what scale-from-zero costs
    (image pull, weights load, warm-up). None when no pod tells."""
    took = []
    for pod in pods:
        status = pod.get("status") or {}
        started = parse_time(status.get("startTime"))
        ready = next((parse_time(c.get("lastTransitionTime")) for c in status.get("conditions") or []
                      if c.get("type") == "Ready" and c.get("status") == "True"), None)
        if started and ready and ready >= started:
            took.append((ready - started).total_seconds())
    return float(statistics.median(took)) if took else None


def gpu_nodes(listing: Listing, catalogue: Catalogue, notes: list[str] | None = None) -> tuple[GpuNode, ...]:
    """GPU nodes from their GFD labels: model, device count and the MIG config label they carry. A count label
    that is not a whole number from 0 to ``MAX_DEVICES`` leaves its node out, said in ``notes``."""
    out = []
    for name, labels in sorted(listing.node_labels.items()):
        raw = str(labels.get(GPU_COUNT_LABEL, "0")).strip()
        count = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 4 else -1
        if not 0 <= count <= MAX_DEVICES:
            if notes is not None:
                notes.append(f"node {name}: {GPU_COUNT_LABEL}={quoted(raw)} is not a device count from 0 to "
                             f"{MAX_DEVICES:,}: left out of the MIG plans")
            continue
        if count == 0:
            continue
        out.append(GpuNode(name, catalogue.canonical(labels.get(PRODUCT_LABEL)), count, labels.get(MIG_CONFIG_LABEL)))
    return tuple(out)


def place(parsed: ParsedSpec, pods: Sequence[Mapping[str, Any]], listing: Listing) -> ParsedSpec:
    """Finish the allocation from the node its pods run on, else from the GPU product they select."""
    nodes = [n for p in pods if (n := (p.get("spec") or {}).get("nodeName")) in listing.node_labels]
    if nodes:
        by_product = Counter(listing.node_labels[n].get(PRODUCT_LABEL) for n in nodes)
        product = by_product.most_common(1)[0][0]
        node = next(n for n in nodes if listing.node_labels[n].get(PRODUCT_LABEL) == product)
        done = with_node(parsed, listing.node_labels[node])
        if len(by_product) > 1:
            seen = ", ".join(sorted(str(p) for p in by_product))
            done = replace(done, notes=(*done.notes, f"pods run on several GPU products ({seen}); using {product}"))
        return done
    if parsed.selected_product:
        like = (v for v in listing.node_labels.values() if v.get(PRODUCT_LABEL) == parsed.selected_product)
        return with_node(parsed, next(like, {PRODUCT_LABEL: parsed.selected_product}))
    if not listing.nodes_listed:
        return replace(parsed, notes=(*parsed.notes, "GPU product unknown: nodes could not be listed"))
    return parsed
