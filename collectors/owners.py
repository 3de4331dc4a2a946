"""Which workload a pod belongs to: its current pod list, kube-state-metrics' owner series, a name-prefix
match against known workloads, and finally Kubernetes' pod-naming conventions (marked as inferred).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from collectors.pods import PodOwner, pod_key
from recommender.core.inventory import Workload, WorkloadRef

_RS_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # Kubernetes' SafeEncodeString alphabet


_DEPLOY_POD = re.compile(rf"^(?P<name>.+)-[{_RS_CHARS}]{{6,10}}-[{_RS_CHARS}]{{5}}$")


_CRONJOB_POD = re.compile(rf"^(?P<name>.+)-\d{{8,10}}-[{_RS_CHARS}]{{5}}$")


_JOB_POD = re.compile(rf"^(?P<name>.+)-[{_RS_CHARS}]{{5}}$")


_STS_POD = re.compile(r"^(?P<name>.+)-\d+$")


def infer_owner(namespace: str, pod: str) -> PodOwner:
    """Guess a pod's owner from Kubernetes' pod-naming conventions (used when no API/KSM says)."""
    for pattern, kind in ((_CRONJOB_POD, "CronJob"), (_DEPLOY_POD, "Deployment"), (_STS_POD, "StatefulSet"),
                          (_JOB_POD, "Job")):
        hit = pattern.match(pod)
        if hit:
            return PodOwner(namespace, pod, kind, hit.group("name"), inferred=True)
    return PodOwner(namespace, pod, "Pod", pod, inferred=True)


LWS = "LeaderWorkerSet"


def lws_group(name: str, pod: str) -> str | None:
    """The group of LeaderWorkerSet ``name`` that ``pod`` is in: ``<name>-<i>`` (its leader) or
    ``<name>-<i>-<j>`` (a worker) → ``i``; None for another name."""
    hit = re.fullmatch(rf"{re.escape(name)}-(\d+)(?:-\d+)?", pod)
    return hit.group(1) if hit else None


def leader_worker_sets(found: Mapping[tuple[str, str], PodOwner]) -> dict[tuple[str, str], PodOwner]:
    """``found`` (per (namespace, pod), its top-level owner as kube-state-metrics says) with LeaderWorkerSets'
    pods given to them, which it does not name: each group's workers are a StatefulSet named after the group's
    leader pod (``<lws>-<i>``, a pod of the leader StatefulSet ``<lws>``), its pods ``<lws>-<i>-<j>``. Those, and
    the leader StatefulSet's pods, are the LeaderWorkerSet's."""
    out = dict(found)
    leaders: set[tuple[str, str]] = set()
    for (ns, pod), owner in found.items():
        leader = found.get((ns, owner.name)) if owner.kind == "StatefulSet" else None
        if leader is None or leader.kind != "StatefulSet" or not re.fullmatch(rf"{re.escape(leader.name)}-\d+",
                                                                                  owner.name) \
                or not re.fullmatch(rf"{re.escape(owner.name)}-\d+", pod):
            continue
        out[(ns, pod)] = PodOwner(ns, pod, LWS, leader.name)
        leaders.add((ns, leader.name))
    for (ns, pod), owner in found.items():
        if owner.kind == "StatefulSet" and (ns, owner.name) in leaders:
            out[(ns, pod)] = PodOwner(ns, pod, LWS, owner.name)
    return out


def _by_prefix(namespace: str, pod: str, names: Mapping[str, Sequence[WorkloadRef]]) -> WorkloadRef | None:
    """The workload in the namespace whose name is the longest ``<name>-`` prefix of the pod name."""
    best: WorkloadRef | None = None
    for ref in names.get(namespace, ()):
        if pod.startswith(ref.name + "-") and (best is None or len(ref.name) > len(best.name)):
            best = ref
    return best


def attribute_pods(
    pods: Iterable[str], workloads: Sequence[Workload], owners: Sequence[PodOwner]
) -> tuple[dict[str, WorkloadRef], dict[WorkloadRef, list[str]]]:
    """Map pod keys ("ns/pod") to workloads; returns the map and notes per workload ref."""
    by_pod = {pod_key(w.ref.namespace, p): w.ref for w in workloads for p in w.pods}
    by_owner = {pod_key(o.namespace, o.pod): o for o in owners}
    names: dict[str, list[WorkloadRef]] = defaultdict(list)
    for w in workloads:
        names[w.ref.namespace].append(w.ref)
    mapping: dict[str, WorkloadRef] = {}
    notes: dict[WorkloadRef, list[str]] = defaultdict(list)
    for key in pods:
        ns, pod = key.split("/", 1)
        ref = by_pod.get(key) or _by_prefix(ns, pod, names)
        if ref is None:
            owner = by_owner.get(key) or infer_owner(ns, pod)
            ref = WorkloadRef(ns, owner.kind, owner.name)
            if owner.inferred:
                notes[ref].append(f"owner {owner.kind}/{owner.name} inferred from pod names (no API or KSM)")
            if owner.kind == "Pod":
                notes[ref].append("bare pod without an owner: sized as its own workload")
        mapping[key] = ref
    return mapping, notes
