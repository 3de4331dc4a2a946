"""The GPU devices dcgm-exporter reports, read from Prometheus answers: which devices (GPU or MIG instance,
product, profile, memory, node) each pod holds and how many pods shared one at the same time, folded in chunk
by chunk so no answer is kept; and the GPU nodes with their MIG instances per GPU and profile. Pure functions
over JSON-shaped data.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from collectors.pods import NodeDevices, PodDevices, pod_key
from collectors.prometheus.parse import Latest, Result
from collectors.prometheus.points import Points

_UUID_LABELS = ("UUID", "uuid", "gpu_uuid")


def _device_id(labels: Mapping[str, str]) -> str:
    """A physical GPU (UUID, else host + index) plus the MIG instance on it, if any."""
    gpu = next((labels[k] for k in _UUID_LABELS if labels.get(k)), None)
    gpu = gpu or f"{labels.get('Hostname') or labels.get('hostname', '?')}/{labels.get('gpu', '?')}"
    return f"{gpu}/{labels.get('GPU_I_ID', '')}"


class DeviceTable:
    """What dcgm-exporter attributed to each pod, folded in chunk by chunk so no answer is kept.

    ``shared_with`` is the most pods seen on one device at the same time, so a rolling update that puts
    a new pod on the GPU its predecessor left is not mistaken for time-slicing. Devices and nodes keep the
    time each was last seen, so that a loop can :meth:`forget` what left its window and add only new steps.

    The instants each pod was seen on each device are kept as arrays per device and pod (8 bytes an instant),
    not as a set per device and instant (about 330 bytes: 220 MB for 2,000 pods over 336 inventory steps).
    """

    def __init__(self, ns_label: str, pod_label: str, node_labels: Sequence[str] = ()) -> None:
        self.ns_label, self.pod_label, self.node_labels = ns_label, pod_label, tuple(node_labels)
        self.seen: dict[str, dict[str, list[np.ndarray]]] = defaultdict(lambda: defaultdict(list))  # dev → pod → t
        self.per_pod: dict[str, dict[str, Any]] = {}

    def add(self, result: Result) -> DeviceTable:
        for item in result:
            labels = item.get("metric") or {}
            ns, pod = labels.get(self.ns_label), labels.get(self.pod_label)
            if not ns or not pod:
                continue
            key, dev = pod_key(ns, pod), _device_id(labels)
            points = item.get("values")
            if isinstance(points, Points) and len(points):
                times, values = points.times, points.values
            else:  # an instant answer's one sample (or none), or pairs as a test writes them
                pairs = points or [item.get("value", (0, "NaN"))]
                times = np.array([float(t) for t, _ in pairs])
                values = np.array([float(v) for _, v in pairs])
            finite = np.isfinite(values)
            if finite.any():
                self.seen[dev][key].append(times[finite])
            seen = float(times.max()) if len(times) else -math.inf
            info = self.per_pod.setdefault(key, {"ns": ns, "pod": pod, "devices": {}, "product": None,
                                                 "profile": None, "mib": None, "t": -math.inf, "nodes": {}})
            info["devices"][dev] = max(info["devices"].get(dev, -math.inf), seen)
            if node := _node(labels, self.node_labels):
                info["nodes"][node] = max(info["nodes"].get(node, -math.inf), seen)
            info["product"] = info["product"] or labels.get("modelName")
            info["profile"] = info["profile"] or labels.get("GPU_I_PROFILE")
            if finite.any():
                last = np.flatnonzero(finite)[-1]
                if times[last] >= info["t"]:
                    info["t"], info["mib"] = float(times[last]), float(values[last])
        return self

    def _instants(self, dev: str) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        """Each pod's distinct instants on ``dev`` (its arrays joined into one), and every instant with the
        number of pods seen at it."""
        pods = self.seen[dev]
        for key, parts in pods.items():
            if len(parts) > 1 or len(parts[0]) > 1:
                pods[key] = [np.unique(np.concatenate(parts))]
        joined = {key: parts[0] for key, parts in pods.items()}
        every, count = np.unique(np.concatenate(list(joined.values())), return_counts=True)
        return joined, every, count

    @property
    def on_device(self) -> dict[tuple[str, float], set[str]]:
        """The instants a device had several pods (those alone change ``shared_with``), with those pods."""
        out: dict[tuple[str, float], set[str]] = {}
        for dev in list(self.seen):
            if len(self.seen[dev]) < 2:
                continue
            joined, every, count = self._instants(dev)
            for t in every[count > 1].tolist():
                out[(dev, t)] = {key for key, ts in joined.items() if _has(ts, t)}
        return out

    @on_device.setter
    def on_device(self, shared: Mapping[tuple[str, float], set[str]]) -> None:
        """Restore the instants :attr:`on_device` gave (a cache file keeps those)."""
        self.seen = defaultdict(lambda: defaultdict(list))
        for (dev, t), pods in shared.items():
            for key in pods:
                self.seen[dev][key].append(np.array([float(t)]))

    def forget(self, before_s: float) -> DeviceTable:
        """Drop what was last seen before ``before_s`` (devices, nodes, then pods with no device left), and the
        instants a device had one pod: only shared ones change ``shared_with``, and a loop that keeps the table
        for a whole window at its fine step would otherwise hold an entry per device per step."""
        kept: dict[str, dict[str, list[np.ndarray]]] = defaultdict(lambda: defaultdict(list))
        for dev in list(self.seen):
            if len(self.seen[dev]) < 2:
                continue
            joined, every, count = self._instants(dev)
            shared = every[(count > 1) & (every >= before_s)]
            for key, ts in joined.items():
                if len(both := ts[np.isin(ts, shared)]):
                    kept[dev][key].append(both)
        self.seen = kept
        for key, info in list(self.per_pod.items()):
            info["devices"] = {d: t for d, t in info["devices"].items() if t >= before_s}
            info["nodes"] = {n: t for n, t in info["nodes"].items() if t >= before_s}
            if not info["devices"]:
                del self.per_pod[key]
            elif info["t"] < before_s:
                info["t"], info["mib"] = -math.inf, None
        return self

    def records(self) -> tuple[PodDevices, ...]:
        shared: dict[str, int] = defaultdict(lambda: 1)
        for dev in list(self.seen):
            if len(self.seen[dev]) < 2:
                continue
            joined, every, count = self._instants(dev)
            for key, ts in joined.items():
                shared[key] = max(shared[key], int(count[np.searchsorted(every, ts)].max()))
        return tuple(
            PodDevices(i["ns"], i["pod"], i["product"], len(i["devices"]), i["profile"], i["mib"], shared[key],
                       tuple(sorted(i["nodes"])))
            for key, i in sorted(self.per_pod.items())
        )


def _has(times: np.ndarray, t: float) -> bool:
    """Whether sorted ``times`` hold ``t``."""
    i = int(np.searchsorted(times, t))
    return i < len(times) and times[i] == t


def devices(result: Result, ns_label: str, pod_label: str, node_labels: Sequence[str] = ()
            ) -> tuple[PodDevices, ...]:
    """:class:`DeviceTable` over one answer."""
    return DeviceTable(ns_label, pod_label, node_labels).add(result).records()


def _node(labels: Mapping[str, str], node_labels: Sequence[str]) -> str | None:
    return next((labels[k] for k in node_labels if labels.get(k)), None)


def gpu_nodes(found: Latest, node_labels: Sequence[str], cluster_labels: Sequence[str] = ()
              ) -> tuple[NodeDevices, ...]:
    """GPU nodes from :func:`~collectors.prometheus.queries.node_query` answers (MIG instances counted per
    GPU and profile): GPU indexes 0 to the highest exported, a GPU with no MIG label holds no MIG devices.
    Series without a node or GPU index name no node and are left out. Each with the values of
    ``cluster_labels`` its series carry (``NodeDevices.clusters``)."""
    per_node: dict[str, dict[int, dict[str, int]]] = defaultdict(dict)
    product: dict[str, str | None] = {}
    clusters: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for labels, value, _ in found:
        node, index = _node(labels, node_labels), labels.get("gpu", "")
        if not node or not index.isdigit():
            continue
        clusters[node] |= {(c, labels[c]) for c in cluster_labels if labels.get(c)}
        gpu = per_node[node].setdefault(int(index), {})
        if profile := labels.get("GPU_I_PROFILE"):
            gpu[profile] = int(value)
        product[node] = product.get(node) or labels.get("modelName")
    return tuple(
        NodeDevices(node, product.get(node), tuple(tuple(sorted(gpus.get(i, {}).items()))
                                                   for i in range(max(gpus) + 1)), tuple(sorted(clusters[node])))
        for node, gpus in sorted(per_node.items())
    )
