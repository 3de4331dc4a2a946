"""GPU workloads from the Kubernetes API: list objects, resolve each pod's top-level owner, parse specs.

A workload is the highest object we can find by following controller ownerReferences: Pod →
ReplicaSet → Deployment, Pod → Job → CronJob, Pod → StatefulSet, and for LeaderWorkerSet worker pod →
worker StatefulSet → leader Pod → leader StatefulSet → LeaderWorkerSet. Its allocation is read from the
controller's pod template (what every replica gets), not from whichever pods happen to run; pods only
say which node, and so which GPU, the workload runs on. A Deployment's ReplicaSets and a StatefulSet's or
LeaderWorkerSet's ControllerRevisions, one per template rolled out, say since when its replicas have the shape
they have now (:func:`shape_since`). Listing is the only I/O; :func:`build_workloads` is pure and tests without
a server.
"""

from __future__ import annotations

import itertools
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from collectors.kubernetes.client import (
    KubernetesDenied,
    KubernetesNotServed,
    list_objects,
    make_api_client,
)
from collectors.kubernetes.parse import PRODUCT_LABEL, ParsedSpec, parse_pod_spec, unresolved, with_node
from recommender.core.annotations import MIG_CONFIG_LABEL, SCHEDULE_ANNOTATION
from recommender.core.autoscalers import HPA, SCALED_OBJECT, by_target, describe
from recommender.core.catalogue import Catalogue
from recommender.core.inventory import Allocation, GpuNode, Sharing, Workload, WorkloadRef
from recommender.core.progress import Progress
from recommender.core.resources import RESOURCES, Resource
from recommender.core.settings import Settings
from recommender.core.timestamps import parse_time
from recommender.mechanisms.mig import MigShare

NAMESPACED = tuple(RESOURCES[k] for k in (
    "Deployment", "StatefulSet", "ReplicaSet", "ControllerRevision", "Job", "CronJob", "Pod"))
LEADER_WORKER_SETS = RESOURCES["LeaderWorkerSet"]
# who owns a workload's replicas (listed once per scope, not per workload; KEDA not installed: no ScaledObjects)
AUTOSCALERS = (RESOURCES[HPA], RESOURCES[SCALED_OBJECT])
OPTIONAL = (LEADER_WORKER_SETS, *AUTOSCALERS)
NODES = RESOURCES["Node"]
LISTED_KINDS = frozenset(r.kind for r in (*NAMESPACED, LEADER_WORKER_SETS))
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
    return build_workloads(listing), gpu_nodes(listing, catalogue)


def list_cluster(
    api: client.ApiClient, namespaces: Sequence[str], timeout_s: float, progress: Progress
) -> Listing:
    """One list call per resource and namespace (one across all namespaces when none are given)."""
    scopes: list[str | None] = list(dict.fromkeys(namespaces)) or [None]
    progress.start(LIST_TASK, total=len(scopes) * (len(NAMESPACED) + len(OPTIONAL)) + 1)
    listing = Listing()
    served = {r.kind: True for r in OPTIONAL}
    for namespace in scopes:
        for resource in NAMESPACED:
            listing.add(resource.kind, list_objects(api, resource, namespace, timeout_s))
            progress.advance(LIST_TASK)
        for res in OPTIONAL:
            items = _list_optional(api, res, namespace, timeout_s, progress) if served[res.kind] else None
            served[res.kind] = items is not None
            if res in AUTOSCALERS:
                listing.autoscalers.setdefault(res.kind, []).extend(items or [])
            else:
                listing.add(res.kind, items or [])
            progress.advance(LIST_TASK)
    try:
        nodes = list_objects(api, NODES, None, timeout_s)
        listing.node_labels = {n["metadata"]["name"]: (n["metadata"].get("labels") or {}) for n in nodes}
    except KubernetesDenied as exc:  # nodes are cluster-scoped: namespace-scoped users often cannot list them
        listing.nodes_listed = False
        progress.log(f"GPU products unknown where pods do not select one: {exc}")
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
        if (rev := revision_of(key[1], obj)) is not None and (ref := _controller_ref(obj)) is not None:
            revisions.setdefault((key[0], str(ref.get("kind", "")), str(ref.get("name", ""))), []).append(rev)
    found = (_workload(k, listing, pods.get(k, []), notes.get(k, []), revisions.get(k, []))
             for k in sorted(tops | set(pods)))
    scalers = by_target(listing.autoscalers.get(HPA, []), listing.autoscalers.get(SCALED_OBJECT, []))
    return tuple(replace(w, autoscaler=describe(scalers.get((w.ref.namespace, w.ref.kind, w.ref.name), ())))
                 for w in found if w is not None)


def top_owner(key: Key, obj: Mapping[str, Any], objects: Mapping[Key, Mapping[str, Any]]) -> tuple[Key, list[str]]:
    """Follow controller ownerReferences up to the highest object we listed, saying where it stopped."""
    for _ in range(_MAX_OWNER_DEPTH):
        ref = _controller_ref(obj)
        if ref is None:
            bare = key[1] == "Pod"
            return key, ["bare pod: no controller owns it, so nothing recreates it"] if bare else []
        owner_key: Key = (key[0], str(ref.get("kind", "")), str(ref.get("name", "")))
        owner = objects.get(owner_key)
        if owner is None:
            if key[1] == "Pod":
                return _missing_owner(owner_key, obj)
            kind, name = owner_key[1:]
            why = "not found (deleted?)" if kind in LISTED_KINDS else "not read"
            return key, [f"owner {kind} {name} {why}; {key[1]} {key[2]} taken as the workload"]
        key, obj = owner_key, owner
    return key, [f"ownerReferences deeper than {_MAX_OWNER_DEPTH} levels; stopped at {key[1]} {key[2]}"]


def _controller_ref(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return next((r for r in refs if r.get("controller")), refs[0] if refs else None)


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
    if obj is not None and key[1] != "Pod":
        parsed, meta = parse_controller(key[1], obj), obj.get("metadata") or {}
    elif pods:
        spec, meta = pods[0].get("spec") or {}, pods[0].get("metadata") or {}
        parsed = parse_pod_spec(spec, meta.get("annotations") or {}, replicas=len(pods))
    else:
        return None
    if parsed.allocation.sharing is Sharing.NONE:
        return None
    since = shape_since(parsed, revisions) if obj is not None and revisions else None
    since, on_delete = replaced_since(key[1], obj, since, pods)
    notes = [*notes, *on_delete]
    parsed = unresolved(place(parsed, pods, listing))
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
    )


REVISION_ANNOTATION = "deployment.kubernetes.io/revision"


@dataclass(frozen=True)
class Revision:
    """One template a controller rolled out: its revision number, when it was created, what it ran."""

    number: int
    created: datetime
    spec: ParsedSpec


def revision_of(kind: str, obj: Mapping[str, Any]) -> Revision | None:
    """The revision a ReplicaSet (a Deployment's: ``deployment.kubernetes.io/revision``) or a ControllerRevision
    records: a StatefulSet's or a LeaderWorkerSet's ``revision``, its ``data`` the patch that restores
    ``spec.template`` (``spec.leaderWorkerTemplate``). None for other kinds and owners, or where the number, the
    creation time or the template cannot be read."""
    owner = _controller_ref(obj)
    owned_by = owner.get("kind") if owner is not None else None
    meta = obj.get("metadata") or {}
    data = obj.get("data")
    patched = data.get("spec") if isinstance(data, Mapping) else None
    patched = patched if isinstance(patched, Mapping) else {}
    if (kind, owned_by) == ("ReplicaSet", "Deployment"):
        number = _revision((meta.get("annotations") or {}).get(REVISION_ANNOTATION))
        template = (obj.get("spec") or {}).get("template")
    elif (kind, owned_by) in (("ControllerRevision", "StatefulSet"), ("ControllerRevision", "LeaderWorkerSet")):
        number = _revision(obj.get("revision"))
        template = patched.get("template" if owned_by == "StatefulSet" else "leaderWorkerTemplate")
    else:
        return None
    created = _created(obj)
    if number is None or created is None or not isinstance(template, Mapping):
        return None  # a record we cannot read would count as another shape
    spec = _leader_worker_set({"leaderWorkerTemplate": template}) if owned_by == "LeaderWorkerSet" \
        else _template(template, 1)
    return Revision(number, created, spec)


def shape_since(current: ParsedSpec, revisions: Sequence[Revision]) -> datetime | None:
    """When a controller's pods took the shape its template has now: GPU resources and serving arguments
    (:func:`replica_shape`), from the revisions it keeps, one per template it has rolled out (a Deployment's
    ReplicaSets, a StatefulSet's or a LeaderWorkerSet's ControllerRevisions).

    Newest revision first, the revisions with the current shape run back to the first one of that run,
    created when its rollout began (the old pods served until the new ones were ready; a StatefulSet updated
    ``OnDelete`` changes its pods only as they are deleted, later: :func:`replaced_since`). A rollback reuses an
    old revision's record under a new number with its old creation time, so no revision of another shape may
    be newer: the start is the later of the two. None where every revision kept (``revisionHistoryLimit``)
    has the current shape, or none can be read: the shape is older than what the API remembers.
    """
    shape = replica_shape(current)
    dated = sorted(((r.number, r.created, replica_shape(r.spec) == shape) for r in revisions),
                   key=lambda d: d[0], reverse=True)
    others = [created for _, created, same in dated if not same]
    if not others:
        return None
    run = list(itertools.takewhile(lambda d: d[2], dated))
    return max(min((created for _, created, _ in run), default=max(others)), max(others))


def replaced_since(kind: str, obj: Mapping[str, Any] | None, since: datetime | None,
                   pods: Sequence[Mapping[str, Any]]) -> tuple[datetime | None, list[str]]:
    """``since`` for a StatefulSet updated ``OnDelete``, whose pods take a new template only as they are deleted:
    no earlier than its newest pod's creation, when the pool last changed (homogeneous if every old pod is gone,
    a steady mix if not). A pod recreated for another reason moves it too: the price of not knowing. Other
    controllers roll their pods out on their own, at the revision's time."""
    strategy = (((obj or {}).get("spec") or {}).get("updateStrategy") or {}).get("type")
    if since is None or kind != "StatefulSet" or strategy != "OnDelete":
        return since, []
    newest = max((t for p in pods if (t := _created(p)) is not None), default=since)
    if newest <= since:
        return since, []
    return newest, [f"updated OnDelete: its pods take a new template only as they are deleted; capacity is read "
                    f"from its newest pod's start ({newest:%Y-%m-%d %H:%M} UTC), not the revision's "
                    f"({since:%Y-%m-%d %H:%M} UTC)"]


def replica_shape(parsed: ParsedSpec) -> Allocation:
    """What one replica holds and serves with, from a pod template: a change in it changes how many requests a
    replica serves within the objective (the replica count aside)."""
    return replace(parsed.allocation, replicas=0)


def _created(obj: Mapping[str, Any]) -> datetime | None:
    """An object's ``creationTimestamp``, in UTC (the API writes UTC; one without a zone is read as UTC, so it
    compares with the others)."""
    created = parse_time((obj.get("metadata") or {}).get("creationTimestamp"))
    return created.replace(tzinfo=UTC) if created is not None and created.tzinfo is None else created


def _revision(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


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


def gpu_nodes(listing: Listing, catalogue: Catalogue) -> tuple[GpuNode, ...]:
    """GPU nodes from their GFD labels: model, device count and the MIG config label they carry."""
    out = []
    for name, labels in sorted(listing.node_labels.items()):
        count = _int(labels.get(GPU_COUNT_LABEL), 0)
        if count <= 0:
            continue
        out.append(GpuNode(name, catalogue.canonical(labels.get(PRODUCT_LABEL)), count, labels.get(MIG_CONFIG_LABEL)))
    return tuple(out)


def parse_controller(kind: str, obj: Mapping[str, Any]) -> ParsedSpec:
    """One replica's allocation from a controller's pod template, with its replica count."""
    spec = obj.get("spec") or {}
    if kind == "CronJob":
        job = (spec.get("jobTemplate") or {}).get("spec") or {}
        return _template(job.get("template"), _int(job.get("parallelism"), 1))
    if kind == "Job":
        return _template(spec.get("template"), _int(spec.get("parallelism"), 1))
    if kind == "LeaderWorkerSet":
        return _leader_worker_set(spec)
    return _template(spec.get("template"), _int(spec.get("replicas"), 1))  # 0 replicas is valid


def _template(template: Mapping[str, Any] | None, replicas: int) -> ParsedSpec:
    t = template or {}
    return parse_pod_spec(t.get("spec") or {}, (t.get("metadata") or {}).get("annotations") or {}, replicas)


def _int(value: Any, default: int) -> int:
    return default if value is None else int(value)


def _leader_worker_set(spec: Mapping[str, Any]) -> ParsedSpec:
    """One LeaderWorkerSet replica is a group: a leader plus ``size - 1`` workers, GPUs added up."""
    lwt = spec.get("leaderWorkerTemplate") or {}
    size, replicas = _int(lwt.get("size"), 1), _int(spec.get("replicas"), 1)
    worker = _template(lwt.get("workerTemplate"), replicas)
    leader = _template(lwt.get("leaderTemplate"), replicas) if lwt.get("leaderTemplate") else worker
    base = worker if worker.allocation.sharing is not Sharing.NONE else leader
    slices = leader.allocation.mig_count + (size - 1) * worker.allocation.mig_count
    share = base.allocation.share
    group = replace(
        base.allocation,
        gpus=leader.allocation.gpus + (size - 1) * worker.allocation.gpus,
        share=replace(share, count=slices) if isinstance(share, MigShare) else share,
        vllm=leader.allocation.vllm or worker.allocation.vllm,
    )
    notes = (*leader.notes, *worker.notes, f"LeaderWorkerSet: one replica is a group of {size} pods")
    return replace(base, allocation=group, served_model=leader.served_model or worker.served_model,
                   notes=tuple(dict.fromkeys(notes)))


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
