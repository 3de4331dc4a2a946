"""Group pod-level facts into workloads and workload-level usage: the hand-off from collectors.

Which pod belongs to which workload is :mod:`collectors.owners`; how pod columns become workload columns is
:mod:`collectors.usageframes`; this module puts workloads, their allocations and their usage together into
one :class:`Snapshot`. Pure functions over typed data.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime

import numpy as np
import pandas as pd

from collectors.owners import LWS, attribute_pods, lws_group
from collectors.pods import NodeDevices, PodDevices, PodRequests, PodUsage, VllmInfo, pod_key, without
from collectors.usageframes import aggregate_usage
from recommender.core import usage as m
from recommender.core.annotations import cut
from recommender.core.catalogue import Catalogue
from recommender.core.inventory import Allocation, GpuNode, Sharing, VllmArgs, Workload, WorkloadRef
from recommender.core.usage import Snapshot
from recommender.mechanisms import for_sharing
from recommender.mechanisms.hami import HamiShare
from recommender.mechanisms.mig import MigShare


def _resources_allocation(resources: Iterable[tuple[str, float]]) -> Allocation | None:
    """Allocation from GPU resource requests as kube-state-metrics reports them."""
    res = dict(resources)
    for name, amount in res.items():
        if name.startswith("nvidia.com/mig-"):
            profile = name.removeprefix("nvidia.com/mig-")
            profile = re.sub(r"\.me$", "+me", profile)
            return Allocation(Sharing.MIG, share=MigShare(profile, int(amount)))
    if "nvidia.com/gpumem" in res or "nvidia.com/gpucores" in res:
        return Allocation(Sharing.HAMI, gpus=int(res.get("nvidia.com/gpu", 1)),
                          share=HamiShare(res.get("nvidia.com/gpumem"), res.get("nvidia.com/gpucores")))
    if "nvidia.com/gpu.shared" in res:
        return Allocation(Sharing.TIME_SLICING, gpus=int(res["nvidia.com/gpu.shared"]))
    if "nvidia.com/gpu" in res:
        return Allocation(Sharing.EXCLUSIVE, gpus=int(res["nvidia.com/gpu"]))
    return None


def _devices_allocation(devices: PodDevices) -> Allocation:
    if devices.mig_profile:
        return Allocation(Sharing.MIG, share=MigShare(devices.mig_profile, devices.device_count))
    if devices.shared_with > 1:
        return Allocation(Sharing.TIME_SLICING, gpus=devices.device_count)
    return Allocation(Sharing.EXCLUSIVE, gpus=devices.device_count)


Fact = PodDevices | VllmInfo | PodRequests
FactIndex = Mapping[str, Mapping[type, tuple[int, Fact]]]


def index_facts(usage: PodUsage) -> FactIndex:
    """Pod key → the first device, vLLM and request record of that pod (with its position), built once
    so that looking up a workload's pods costs its pod count, not the fleet's."""
    out: dict[str, dict[type, tuple[int, Fact]]] = defaultdict(dict)
    items: list[Fact] = [*usage.requests, *usage.devices, *usage.vllm]
    for i, item in enumerate(items):
        out[pod_key(item.namespace, item.pod)].setdefault(type(item), (i, item))
    return out


def _first(index: FactIndex, pods: Sequence[str], preferred: Sequence[str] = ()) -> dict[type, Fact]:
    """Per record type, the earliest record of any of ``preferred`` (the pods at the window's end: a rollout may
    have changed what its pods hold), else of any of ``pods``."""
    out: dict[type, Fact] = {}
    for group in (pods, preferred):
        best: dict[type, tuple[int, Fact]] = {}
        for pod in group:
            for kind, candidate in index.get(pod, {}).items():
                if kind not in best or candidate[0] < best[kind][0]:
                    best[kind] = candidate
        out |= {kind: item for kind, (_, item) in best.items()}
    return out


def _nodes(index: FactIndex, pods: Iterable[str]) -> tuple[str, ...]:
    """The nodes DCGM puts the devices of ``pods`` on (for the per-node MIG plan without the API)."""
    found = (index.get(pod, {}).get(PodDevices) for pod in pods)
    return tuple(sorted({n for f in found if f and isinstance(f[1], PodDevices) for n in f[1].nodes}))


def gpu_nodes(found: Iterable[NodeDevices], catalogue: Catalogue) -> tuple[GpuNode, ...]:
    """DCGM's view of the GPU nodes as :class:`GpuNode`: model, GPU count and the MIG devices on each."""
    return tuple(GpuNode(n.name, catalogue.canonical(n.gpu_product), len(n.mig_devices),
                         mig_devices=tuple(dict(gpu) for gpu in n.mig_devices)) for n in found)


# what says a pod was there at a step: its framebuffer, else (dcgm-exporter without its pod mapping) vLLM's gauges
PRESENCE = (m.FB_USED_MIB, m.REQUESTS_RUNNING, m.KV_USAGE_FRAC)


def _last_rows(values: np.ndarray) -> np.ndarray:
    """Per column of ``values``, the last row it has data at (-1: none), found a slice of columns at a time: no
    frame-sized mask is held (at 10,000 pods x 14 d one was 19 MiB, and pandas' ``notna`` made two)."""
    rows = values.shape[0]
    last = np.full(values.shape[1], -1, dtype=np.int64)
    for lo in range(0, values.shape[1] if rows else 0, 256):
        seen = ~np.isnan(values[:, lo:lo + 256])
        last[lo:lo + 256] = np.where(seen.any(axis=0), rows - 1 - np.argmax(seen[::-1], axis=0), -1)
    return last


class _Presence:
    """Per pod, the last step it has data at (-1: none) in the first frame of ``PRESENCE`` that has it (the frames
    share the grid)."""

    def __init__(self, series: Mapping[str, pd.DataFrame]) -> None:
        self.where: dict[str, tuple[np.ndarray, int]] = {}  # pod → (its frame's values, its column)
        self.last: dict[str, int] = {}
        rows = None
        for metric in PRESENCE:
            frame = series.get(metric)
            if frame is None or (rows is not None and frame.shape[0] != rows):
                continue
            rows = frame.shape[0]
            values = frame.to_numpy()  # a view of the frame's one block
            cols = [(p, i) for i, p in enumerate(frame.columns) if p not in self.where]
            if not cols:
                continue
            last = _last_rows(values[:, [i for _, i in cols]]) if len(cols) < values.shape[1] else _last_rows(values)
            for (p, i), row in zip(cols, last, strict=True):
                self.where[p], self.last[p] = (values, i), int(row)

    def live_pods(self, pods: Sequence[str]) -> list[str]:
        """Pods with data at the last step any of them had data: the replicas at the window's end (all of
        them when none has data)."""
        known = [p for p in pods if p in self.where]
        row = max((self.last[p] for p in known), default=-1)
        if row < 0:
            return list(pods)
        return [p for p in known if not np.isnan(self.where[p][0][row, self.where[p][1]])]


def workloads_from_pods(usage: PodUsage, mapping: Mapping[str, WorkloadRef],
                        notes: Mapping[WorkloadRef, list[str]]) -> list[Workload]:
    """Workloads when no Kubernetes API is reachable: from KSM requests and DCGM devices per pod."""
    pods_of: dict[WorkloadRef, list[str]] = defaultdict(list)
    for key, ref in mapping.items():
        pods_of[ref].append(key)
    out = []
    index, presence = index_facts(usage), _Presence(usage.series)
    for ref, pods in sorted(pods_of.items()):
        live = presence.live_pods(pods)
        found = _first(index, pods, live)
        req = found.get(PodRequests)
        alloc, read = _pod_allocation(found)
        alloc = replace(alloc, replicas=max(1, len(live)))
        said = [*notes.get(ref, []), *read]
        if ref.kind == LWS:
            alloc, size = _group_allocation(ref.name, pods, live, index)
            said = [*said, f"LeaderWorkerSet: one replica is a group of {size} pods (kube-state-metrics' owners: "
                           "its worker StatefulSets are named after their leader pods)"]
        source = "kube-state-metrics" if isinstance(req, PodRequests) else "dcgm"
        wl = Workload(ref, alloc, pods=tuple(p.split("/", 1)[1] for p in pods), source=source,
                      notes=tuple(said), nodes=_nodes(index, live))
        out.append(enrich(wl, index, live))
    return out


SINGLE_STRATEGY = ("MIG single strategy: its nvidia.com/gpu is a MIG device (dcgm-exporter's GPU_I_PROFILE), so it "
                   "holds that slice, not a whole GPU")
SHARED_GPU = ("its nvidia.com/gpu is shared with other pods at once (dcgm-exporter): the device plugin's time-slicing "
              "or MPS, which kube-state-metrics does not tell apart; read as time-slicing")


def _pod_allocation(found: Mapping[type, Fact]) -> tuple[Allocation, tuple[str, ...]]:
    """One pod's, from its GPU requests, else its devices, and what was read into it. Whole GPUs requested on MIG
    devices are the device plugin's MIG ``single`` strategy (each ``nvidia.com/gpu`` a MIG device): those
    slices (``SINGLE_STRATEGY``). Whole GPUs other pods use at once are shared by it, which an exclusive GPU never
    is (``SHARED_GPU``)."""
    req, dev = found.get(PodRequests), found.get(PodDevices)
    alloc = _resources_allocation(req.resources) if isinstance(req, PodRequests) else None
    if alloc is not None and alloc.sharing is Sharing.EXCLUSIVE and isinstance(dev, PodDevices):
        if dev.mig_profile:
            return Allocation(Sharing.MIG, share=MigShare(dev.mig_profile, alloc.gpus)), (SINGLE_STRATEGY,)
        if dev.shared_with > 1:
            return Allocation(Sharing.TIME_SLICING, gpus=alloc.gpus), (SHARED_GPU,)
    if alloc is None:
        alloc = _devices_allocation(dev) if isinstance(dev, PodDevices) else Allocation(Sharing.NONE)
    return alloc, ()


def _group_allocation(name: str, pods: Sequence[str], live: Sequence[str], index: FactIndex
                      ) -> tuple[Allocation, int]:
    """A LeaderWorkerSet's replica without the API (its spec's, from ``templates.leader_worker_set`` with it): the
    largest group of ``pods`` (``owners.lws_group``) with a pod in ``live`` (any, where none has), its pods' GPUs
    and MIG slices added up; replicas, the groups with a pod in ``live``. Also that group's size."""
    groups: dict[str, list[str]] = defaultdict(list)
    for pod in pods:
        groups[lws_group(name, pod.split("/", 1)[1]) or ""].append(pod)
    running = [members for members in groups.values() if set(members) & set(live)]
    group = max(running or groups.values(), key=len)
    each = [_pod_allocation(_first(index, [pod]))[0] for pod in group]
    base = next((a for a in each if a.sharing is not Sharing.NONE), each[0])
    share = base.share
    slices = sum(a.mig_count for a in each)
    alloc = replace(base, gpus=sum(a.gpus for a in each),
                    share=replace(share, count=slices) if isinstance(share, MigShare) else share,
                    replicas=max(1, len(running)))
    return alloc, len(group)


def enrich(workload: Workload, index: FactIndex, preferred: Sequence[str] = ()) -> Workload:
    """Fill what the spec cannot say (GPU product, device memory, KV capacity) from metrics: of the ``preferred``
    pods' (keys) where they say it."""
    found = _first(index, [pod_key(workload.ref.namespace, p) for p in workload.pods], preferred)
    alloc, wl = workload.allocation, workload
    dev = found.get(PodDevices)
    if isinstance(dev, PodDevices):
        alloc = replace(alloc, gpu_product=alloc.gpu_product or dev.gpu_product,
                        device_memory_mib=alloc.device_memory_mib or dev.device_memory_mib)
        if dev.shared_with > 1 and alloc.sharing is Sharing.TIME_SLICING and not alloc.gpu_equivalents:
            alloc = replace(alloc, gpu_equivalents=max(alloc.gpus, 1) / dev.shared_with)
            wl = replace(wl, notes=(*wl.notes, f"time-sliced: dcgm-exporter saw {dev.shared_with} pods on its GPU "
                                    f"at once, so it holds 1/{dev.shared_with} of it"))
        if dev.shared_with > 1:
            wl = replace(wl, device_shared_with=dev.shared_with)
        if dev.shared_with > 1 and alloc.sharing is Sharing.EXCLUSIVE:
            wl = replace(wl, notes=(*wl.notes, f"dcgm-exporter attributes its GPU to {dev.shared_with} pods: "
                                    "usage is per device, not per pod (time-slicing or MPS)"))
    info = found.get(VllmInfo)
    if isinstance(info, VllmInfo):
        vllm = alloc.vllm or VllmArgs(model=info.model_name)
        if vllm.gpu_memory_utilization is None and info.gpu_memory_utilization is not None:
            vllm = replace(vllm, gpu_memory_utilization=info.gpu_memory_utilization)
        alloc = replace(alloc, vllm=vllm)
        wl = replace(wl, kv_capacity_tokens=wl.kv_capacity_tokens or info.kv_capacity_tokens,
                     served_model=wl.served_model or info.model_name)
    return replace(wl, allocation=alloc)


def gpu_equivalents(alloc: Allocation, catalogue: Catalogue) -> tuple[float, str | None]:
    """Share of whole GPUs one replica holds, and a caveat when it had to be guessed (by the allocation's
    mechanism; one whose share does not say counts its devices as whole GPUs, with a caveat)."""
    if alloc.sharing is Sharing.NONE:
        return 0.0, None
    mechanism = for_sharing(alloc.sharing)
    held = mechanism.gpu_equivalents(alloc, catalogue.get(alloc.gpu_model)) if mechanism is not None else None
    if held is not None:
        return held
    return float(max(alloc.gpus, 1)), (f"{alloc.sharing.value} share unknown: counted as "
                                       f"{max(alloc.gpus, 1)} whole GPU(s)")


def normalize(workload: Workload, catalogue: Catalogue) -> Workload:
    """Canonical GPU model, device memory from the catalogue when unseen, and GPU-equivalents held."""
    alloc = workload.allocation
    model = alloc.gpu_model or catalogue.canonical(alloc.gpu_product)
    alloc = replace(alloc, gpu_model=model)
    gpu = catalogue.get(model)
    if alloc.device_memory_mib is None and gpu is not None:
        prof = gpu.profile(alloc.mig_profile) if alloc.mig_profile else None
        alloc = replace(alloc, device_memory_mib=prof.usable_mib if prof else gpu.memory_mib)
    share, caveat = gpu_equivalents(alloc, catalogue)
    notes = workload.notes + ((caveat,) if caveat else ())
    return replace(workload, allocation=replace(alloc, gpu_equivalents=share), notes=notes)


def clusters_spanned(mapping: Mapping[str, WorkloadRef], clusters: Mapping[str, tuple[tuple[str, str], ...]]
                     ) -> dict[WorkloadRef, tuple[str, tuple[str, ...]]]:
    """The workloads whose pods' series carry two values or more of one cluster label (``PodUsage.clusters``):
    one name in several clusters behind one API (a StatefulSet's pod in each, or a Deployment's pods attributed
    by name), with that label and its values."""
    seen: dict[WorkloadRef, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for pod, ref in mapping.items():
        for label, value in clusters.get(pod, ()):
            seen[ref][label].add(value)
    return {ref: found for ref, labels in seen.items() if (found := _several(labels)) is not None}


def _several(values: Mapping[str, set[str]]) -> tuple[str, tuple[str, ...]] | None:
    """The first cluster label (by name) of ``values`` (label → its values) that takes two values or more, and
    those values, sorted."""
    return next(((label, tuple(sorted(vs))) for label, vs in sorted(values.items()) if len(vs) > 1), None)


def _listed(values: Sequence[str], shown: int = 3) -> str:
    """The first ``shown`` of ``values`` and how many more. They come from series a tenant's pod may write (any
    label): each escaped as JSON escapes it, and cut, so the line stays one line."""
    more = f" and {len(values) - shown:,} more" if len(values) > shown else ""
    return ", ".join(cut(json.dumps(v)[1:-1]) for v in values[:shown]) + more


def _one_cluster(label: str, value: str) -> str:
    return (f"to size one cluster, set prometheus.extra_selector, e.g. {label}={cut(json.dumps(value))} (or, where "
            f"one cluster's {label} was renamed within the window, prometheus.cluster_labels: [])")


def _spanning_note(label: str, values: tuple[str, ...]) -> str:
    """Why a workload the API lists has no usage: its name's pods run in several clusters behind one API."""
    return (f"its pods' series come from more than one cluster ({label}: {_listed(values)}): its usage is left out, "
            f"since it would add up across clusters; {_one_cluster(label, values[0])}")


def nodes_spanned(nodes: Iterable[NodeDevices]) -> dict[str, tuple[str, tuple[str, ...]]]:
    """The GPU nodes whose series carry two values or more of one cluster label (``NodeDevices.clusters``): one
    name in several clusters, whose GPUs DCGM's series, grouped by node, add up; with that label and its values."""
    out = {}
    for node in nodes:
        seen: dict[str, set[str]] = defaultdict(set)
        for label, value in node.clusters:
            seen[label].add(value)
        if (found := _several(seen)) is not None:
            out[node.name] = found
    return out


def nodes_warning(spanning: Mapping[str, tuple[str, tuple[str, ...]]]) -> str:
    """One line naming the nodes of :func:`nodes_spanned`, and how to plan one cluster's."""
    names = sorted(spanning)
    label, values = spanning[names[0]]
    clusters = sorted({v for lb, vs in spanning.values() if lb == label for v in vs})
    one = len(names) == 1
    return (f"{len(names):,} GPU node{' has' if one else 's have'} one name in more than one cluster "
            f"({label}: {_listed(clusters)}): {_listed(names)} left out of the per-node MIG plan, since "
            f"{'its' if one else 'their'} GPUs would add up across clusters; {_one_cluster(label, values[0])}")


def spanning_warning(spanning: Mapping[WorkloadRef, tuple[str, tuple[str, ...]]]) -> str:
    """One line naming the workloads of :func:`clusters_spanned`, and how to size one cluster."""
    refs = sorted(spanning, key=lambda r: r.key)
    label, values = spanning[refs[0]]
    clusters = sorted({v for lb, vs in spanning.values() if lb == label for v in vs})
    return (f"{len(refs):,} workload{' has' if len(refs) == 1 else 's have'} pods in more than one cluster "
            f"({label}: {_listed(clusters)}): {_listed([r.key for r in refs])} left out, since their usage would add "
            f"up across clusters; {_one_cluster(label, values[0])}")


def assemble(usage: PodUsage, workloads: Sequence[Workload] | None, start: datetime, end: datetime,
             step_s: float, catalogue: Catalogue, source: str) -> Snapshot:
    """The snapshot the pipeline reads: workloads (from the API, or derived) and their usage."""
    pods = {c for frame in usage.series.values() for c in frame.columns}
    pods |= {pod_key(d.namespace, d.pod) for d in usage.devices}
    known = list(workloads or ())
    mapping, notes = attribute_pods(sorted(pods), known, usage.owners)
    spanning = clusters_spanned(mapping, usage.clusters)
    if spanning:
        out = [k for k, ref in mapping.items() if ref in spanning]
        usage = without(usage, out, spanning_warning(spanning))
        mapping = {k: ref for k, ref in mapping.items() if ref not in spanning}
    orphans: list[WorkloadRef] = []
    if workloads is None:
        found = workloads_from_pods(usage, mapping, notes)
    else:
        index = index_facts(usage)
        found = [enrich(w, index) for w in known]
        found = [replace(w, notes=(*w.notes, _spanning_note(*spanning[w.ref]))) if w.ref in spanning else w
                 for w in found]
        orphans = sorted({ref for ref in mapping.values()} - {w.ref for w in known})
        mapping = {k: r for k, r in mapping.items() if r not in orphans}
    warnings = list(usage.warnings)
    if orphans:
        warnings.append(f"{len(orphans)} workload(s) had GPU metrics but are not in the cluster now "
                        f"(deleted?): {', '.join(r.key for r in orphans[:5])}{' ...' if len(orphans) > 5 else ''}")
    final = tuple(normalize(w, catalogue) for w in found)
    nodes: tuple[GpuNode, ...] = ()
    if workloads is None:
        shared = nodes_spanned(usage.gpu_nodes)
        if shared:
            warnings.append(nodes_warning(shared))
        nodes = gpu_nodes((n for n in usage.gpu_nodes if n.name not in shared), catalogue)
    return Snapshot(final, aggregate_usage(usage.series, mapping), start, end, step_s,
                    tuple(warnings), source, nodes)
