"""Prometheus answers → pod-level arrays and inventory records. Pure functions over JSON-shaped data.

Range answers are written into per-pod arrays on the query grid as they arrive, so a large answer is
freed as soon as it is read; the inventory (owners, requests, vLLM cache config; devices in ``devices.py``)
comes from coarse range queries whose latest value per label set is what counts.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np
import pandas as pd

from collectors.owners import leader_worker_sets
from collectors.pods import PodOwner, PodRequests, VllmInfo, pod_key
from collectors.prometheus.chunks import Grid
from collectors.prometheus.points import Points
from recommender.core.inventory import MAX_TOKENS

Result = list[dict[str, Any]]
Latest = list[tuple[dict[str, str], float, float]]  # (labels, last finite value, its time), oldest first


@dataclass
class Accumulator:
    """Per-pod value arrays of one metric on the grid, filled chunk by chunk.

    The pods' arrays are the columns of a few column-major blocks, the first as wide as the ``expected`` pods
    (the census' count), so that :meth:`frame` can hand the first block to pandas as it is: pods are given
    columns in key order within each answer, and when that is the frame's order (no pod appeared after the
    first answer in a key between earlier ones) and one block holds them all, nothing is copied. Otherwise the
    columns are copied once into the frame, and the blocks freed. Columns never given to a pod are never
    written, so their pages are never resident.

    ``compact``: the blocks are float32 while every value written reads back as the same float64 (NaN as NaN,
    -0.0 as -0.0; what ``collect.exact_float32`` checks of a whole frame); the first value that does not turns
    them to float64, so the frame holds the same numbers either way, and a float64 copy of a float32-exact
    metric is never made."""

    grid: Grid
    expected: int = 0
    compact: bool = False
    pods: dict[str, int] = field(default_factory=dict)  # pod key → its column, counted across the blocks
    _blocks: list[np.ndarray] = field(default_factory=list)
    _widths: list[int] = field(default_factory=list)  # each block's end: the first column after it

    def __post_init__(self) -> None:
        self._dtype = np.dtype(np.float32 if self.compact else np.float64)

    def add(self, result: Result, ns_label: str, pod_label: str, shift_s: float = 0.0) -> None:
        """Fold one range answer in; ``shift_s``: it was evaluated that long after each grid step. The answer's
        series are written together, one scatter a block (a series' own writes cost as much as its points, for
        the thousands of series an answer holds); a pod twice in one answer is written series by series, the
        later over the earlier, as the server sent them."""
        found = []
        for item in result:
            labels = item.get("metric") or {}
            ns, pod = labels.get(ns_label), labels.get(pod_label)
            values = item.get("values")
            if ns and pod and values is not None and len(values):
                found.append((pod_key(ns, pod), _arrays(values)))
        found.sort(key=lambda x: x[0])
        if len({key for key, _ in found}) < len(found):
            for key, (ts, vs) in found:
                pos, ok = self._positions(ts, shift_s)
                self._column(key)[pos[ok]] = self._held(vs[ok])
            return
        if not found:
            return
        columns = np.array([self._slot(key) for key, _ in found], dtype=np.int64)  # new pods' columns made first
        lengths = [len(ts) for _, (ts, _) in found]
        pos, ok = self._positions(np.concatenate([ts for _, (ts, _) in found]), shift_s)
        values = self._held(np.concatenate([vs for _, (_, vs) in found])[ok])
        pos, at = pos[ok], np.repeat(columns, lengths)[ok]
        start = 0
        for block, end in zip(self._blocks, self._widths, strict=True):
            mine = (at >= start) & (at < end)
            if mine.any():
                block[pos[mine], at[mine] - start] = values[mine]
            start = end

    def _positions(self, times: np.ndarray, shift_s: float) -> tuple[np.ndarray, np.ndarray]:
        """Grid positions of ``times`` evaluated ``shift_s`` after their steps, and which fall on the grid."""
        pos = np.rint((times - shift_s - self.grid.start_s) / self.grid.step_s).astype(np.int64)
        return pos, (pos >= 0) & (pos < self.grid.n)

    def _held(self, values: np.ndarray) -> np.ndarray:
        """``values`` at the blocks' dtype: float32 where every one is exact there, else (turning the blocks to
        float64) as they are."""
        if self._dtype == np.float64:
            return values
        with np.errstate(over="ignore", invalid="ignore"):  # beyond float32: inf, and then not exact
            small = values.astype(np.float32)
        back = small.astype(np.float64)
        if np.array_equal(back, values, equal_nan=True) and np.array_equal(np.signbit(back), np.signbit(values)):
            return small
        self._widen()
        return values

    def _widen(self) -> None:
        """The blocks at float64 (the columns given to pods copied; the others never written, as before)."""
        self._dtype = np.dtype(np.float64)
        starts = [0, *self._widths[:-1]] if self._widths else []  # none yet: the first value read needs float64
        wide = []
        for block, start in zip(self._blocks, starts, strict=True):
            used = min(block.shape[1], len(self.pods) - start)
            out = np.empty(block.shape, order="F")
            out[:, :used] = block[:, :used]
            wide.append(out)
        self._blocks = wide

    def _slot(self, key: str) -> int:
        """The pod's column, counted across the blocks; a new pod's is made, all NaN."""
        i = self.pods.get(key)
        if i is not None:
            return i
        i = self.pods[key] = len(self.pods)
        if not self._blocks or i >= self._widths[-1]:
            width = max(self.expected, 64) if not self._blocks else max(64, len(self.pods) // 4)
            self._blocks.append(np.empty((self.grid.n, width), dtype=self._dtype, order="F"))
            self._widths.append(i + width)
        self._column(key).fill(np.nan)
        return i

    def _column(self, key: str) -> np.ndarray:
        """The pod's array (a column of a block), all NaN when new."""
        i = self.pods.get(key)
        if i is None:
            i = self._slot(key)
        b = next(k for k, end in enumerate(self._widths) if i < end)
        return self._blocks[b][:, i - (self._widths[b - 1] if b else 0)]

    def frame(self) -> pd.DataFrame:
        """Wide frame: index = grid timestamps (UTC), one column per pod in key order; ±Inf kept as sent, for the
        data-quality stage to drop and count (NaN is a step without a sample). Empties the accumulator, so the data
        is held once."""
        if not self.pods:
            return pd.DataFrame(index=self.grid.index(), dtype="float64")
        keys = sorted(self.pods)
        blocks, ends, pods = self._blocks, self._widths, self.pods
        self._blocks, self._widths, self.pods = [], [], {}
        if len(blocks) == 1 and list(pods) == keys:
            data = blocks[0][:, : len(keys)]  # a view: the block is the frame's
        else:
            data = np.empty((self.grid.n, len(keys)), dtype=self._dtype, order="F")  # each pod's column contiguous
            starts = [0, *ends[:-1]]
            for j, k in enumerate(keys):
                i = pods[k]
                n = next(n for n, end in enumerate(ends) if i < end)
                data[:, j] = blocks[n][:, i - starts[n]]
            del blocks
        return pd.DataFrame(data, index=self.grid.index(), columns=pd.Index(keys), copy=False)


def _arrays(values: Any) -> tuple[np.ndarray, np.ndarray]:
    """A range series' times and values as float64 arrays, from :class:`Points` or (as an instant answer or a test
    writes them) ``[[ts, "v"], ...]``, whose value strings numpy parses ("NaN", "+Inf" too)."""
    if isinstance(values, Points):
        return values.times, values.values
    times, raw = zip(*values, strict=True)
    return np.array(times, dtype=np.float64), np.array(raw, dtype=np.float64)


def latest(result: Result, shared: dict[tuple[str, ...], dict[str, str]] | None = None) -> Latest:
    """Each series' labels with its last finite value and that value's time, oldest first, so that
    callers building a dict keep the newest value when chunks repeat a series.

    ``shared`` (a label set flattened as name, value, … in name order → its dict), when given, is filled
    and used so that a series that several chunks' answers repeat holds one label dict, not one per chunk;
    the labels are only read."""
    out = []
    for item in result:
        points = item.get("values") or ([item["value"]] if "value" in item else [])
        for ts, raw in reversed(points):
            value = float(raw)
            if math.isfinite(value):
                labels = dict(item.get("metric") or {})
                if shared is not None:
                    labels = shared.setdefault(tuple(chain.from_iterable(sorted(labels.items()))), labels)
                out.append((labels, value, float(ts)))
                break
    return sorted(out, key=lambda x: x[2])


def newest(found: Latest) -> Latest:
    """Each label set's newest entry, oldest first: what the callers of :func:`latest` keep, without the older
    ones (a loop that joins every cycle's answers would otherwise hold one entry per series per cycle)."""
    last = {frozenset(labels.items()): (labels, value, t) for labels, value, t in sorted(found, key=lambda x: x[2])}
    return sorted(last.values(), key=lambda x: x[2])


def _owner_map(found: Latest, child_label: str) -> dict[tuple[str, str], tuple[str, str]]:
    """(namespace, child) → (owner kind, owner name) from kube_replicaset_owner / kube_job_owner."""
    out = {}
    for labels, _, _ in found:
        ns, child, kind = labels.get("namespace"), labels.get(child_label), labels.get("owner_kind")
        if ns and child and kind and kind != "<none>":
            out[(ns, child)] = (kind, labels.get("owner_name", ""))
    return out


def owners(pod_owner: Latest, rs_owner: Latest, job_owner: Latest) -> tuple[PodOwner, ...]:
    """Each pod's top-level owner: ReplicaSet → Deployment, Job → CronJob, a LeaderWorkerSet's StatefulSets →
    it (:func:`~collectors.owners.leader_worker_sets`), none → the bare pod. Of a pod's several ownerReferences,
    its controller's (``owner_is_controller``); the newest where several say so, or none does."""
    rs, jobs = _owner_map(rs_owner, "replicaset"), _owner_map(job_owner, "job_name")
    found: dict[tuple[str, str], PodOwner] = {}
    controlled: set[tuple[str, str]] = set()
    for labels, _, _ in reversed(pod_owner):  # newest first
        ns, pod = labels.get("namespace"), labels.get("pod")
        if not ns or not pod or (ns, pod) in controlled:
            continue
        if labels.get("owner_is_controller") == "true":
            controlled.add((ns, pod))
        elif (ns, pod) in found:
            continue
        kind, name = labels.get("owner_kind", "<none>"), labels.get("owner_name", "")
        if kind in ("<none>", "") or not name:
            kind, name = "Pod", pod
        elif kind == "ReplicaSet":
            kind, name = rs.get((ns, name), (kind, name))
        elif kind == "Job":
            kind, name = jobs.get((ns, name), (kind, name))
        found[(ns, pod)] = PodOwner(ns, pod, kind, name)
    found = leader_worker_sets(found)
    return tuple(found[k] for k in sorted(found))


_MIG_RESOURCE = re.compile(r"^nvidia_com_mig_(\d+g)_(\d+gb)(_me)?$")
_PLAIN = {
    "nvidia_com_gpu": "nvidia.com/gpu",
    "nvidia_com_gpu_shared": "nvidia.com/gpu.shared",
    "nvidia_com_gpumem": "nvidia.com/gpumem",
    "nvidia_com_gpumem_percentage": "nvidia.com/gpumem-percentage",
    "nvidia_com_gpucores": "nvidia.com/gpucores",
}


def resource_name(label: str) -> str | None:
    """The pod-spec resource name behind kube-state-metrics' sanitised ``resource`` label, or None.

    KSM replaces '.', '/' and '-' with '_': ``nvidia_com_mig_1g_10gb_me`` → ``nvidia.com/mig-1g.10gb.me``.
    Names already in spec form pass through.
    """
    if label.startswith("nvidia.com/"):
        return label
    if label in _PLAIN:
        return _PLAIN[label]
    hit = _MIG_RESOURCE.match(label)
    if hit:
        return f"nvidia.com/mig-{hit.group(1)}.{hit.group(2)}{'.me' if hit.group(3) else ''}"
    return None


def requests(found: Latest) -> tuple[PodRequests, ...]:
    """GPU resources each pod requests (summed over its containers by the query)."""
    per_pod: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for labels, value, _ in found:
        ns, pod, name = labels.get("namespace"), labels.get("pod"), resource_name(labels.get("resource", ""))
        if ns and pod and name and value > 0:
            per_pod[(ns, pod)][name] = value
    return tuple(PodRequests(ns, pod, tuple(sorted(res.items()))) for (ns, pod), res in sorted(per_pod.items()))


def _number(labels: Mapping[str, str], name: str) -> float | None:
    try:
        value = float(labels.get(name, ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def vllm_info(cache_config: Latest, models: Latest, ns_label: str, pod_label: str) -> tuple[VllmInfo, ...]:
    """KV capacity (num_gpu_blocks x block_size) and memory fraction from vllm:cache_config_info."""
    names: dict[str, str] = {}
    for labels, _, _ in models:
        if labels.get(ns_label) and labels.get(pod_label) and labels.get("model_name"):
            names[pod_key(labels[ns_label], labels[pod_label])] = labels["model_name"]
    found: dict[str, VllmInfo] = {}
    for labels, _, _ in cache_config:
        ns, pod = labels.get(ns_label), labels.get(pod_label)
        if not ns or not pod:
            continue
        blocks, size = _number(labels, "num_gpu_blocks"), _number(labels, "block_size")
        tokens = blocks * size if blocks and size and blocks > 0 and size > 0 else None
        fraction = _number(labels, "gpu_memory_utilization")
        key = pod_key(ns, pod)  # the labels are the tenant's pod's: a figure no engine has is unknown
        found[key] = VllmInfo(ns, pod, names.get(key) or labels.get("model_name") or None,
                              tokens if tokens is not None and tokens <= MAX_TOKENS else None,
                              fraction if fraction is not None and 0 < fraction <= 1 else None)
    for key, model in names.items():
        if key not in found:
            ns, pod = key.split("/", 1)
            found[key] = VllmInfo(ns, pod, model, None, None)
    return tuple(found[k] for k in sorted(found))


def series_counts(result: Result) -> dict[str, int]:
    """``count by (__name__)`` answers → the most series each exported name had at once."""
    counts: dict[str, int] = {}
    for item in result:
        name = (item.get("metric") or {}).get("__name__")
        points = item.get("values") or ([item["value"]] if "value" in item else [])
        if name:
            counts[name] = max([counts.get(name, 0), *(int(float(v)) for _, v in points)])
    return counts


def keep_most(counts: dict[str, int], more: Mapping[str, int]) -> None:
    """Each name's count in ``counts`` raised to ``more``'s where that is higher (censuses of several chunks)."""
    for name, n in more.items():
        counts[name] = max(counts.get(name, 0), n)


def series_names(result: Result) -> dict[str, int]:
    """``/api/v1/series`` answers (``PromClient.series``) → how many series each exported name has."""
    counts: dict[str, int] = {}
    for item in result:
        name = (item.get("metric") or {}).get("__name__")
        if name:
            counts[name] = counts.get(name, 0) + 1
    return counts


def scraped_twice(result: Result, target_labels: Iterable[str]) -> int:
    """``/api/v1/series`` answers → how many of their series another one equals but for ``target_labels`` (the
    labels a scrape adds): one series scraped by more than one job."""
    drop = frozenset(target_labels)
    seen: set[frozenset[tuple[str, str]]] = set()
    twice = 0
    for item in result:
        key = frozenset((k, v) for k, v in (item.get("metric") or {}).items() if k not in drop)
        if key in seen:
            twice += 1
        else:
            seen.add(key)
    return twice


def pod_clusters(result: Result, ns_label: str, pod_label: str, cluster_labels: Iterable[str],
                 into: dict[str, dict[str, set[str]]] | None = None) -> dict[str, dict[str, set[str]]]:
    """``/api/v1/series`` answers → per pod (:func:`pod_key`), the values each of ``cluster_labels`` takes on its
    series (empty ones left out), added to ``into``."""
    out: dict[str, dict[str, set[str]]] = {} if into is None else into
    labels = tuple(cluster_labels)
    for item in result:
        metric = item.get("metric") or {}
        found = [(label, metric[label]) for label in labels if metric.get(label)]
        if found:
            values = out.setdefault(pod_key(metric.get(ns_label, ""), metric.get(pod_label, "")), {})
            for label, value in found:
                values.setdefault(label, set()).add(value)
    return out


def several_clusters(found: Mapping[str, Mapping[str, set[str]]]) -> dict[str, tuple[tuple[str, str], ...]]:
    """Per pod of :func:`pod_clusters`, its (cluster label, value) pairs, sorted, where some cluster label takes two
    values or more over all the pods; {} where none does (one cluster: no workload can span two)."""
    seen: dict[str, set[str]] = defaultdict(set)
    for values in found.values():
        for label, vs in values.items():
            seen[label] |= vs
    if all(len(vs) < 2 for vs in seen.values()):
        return {}
    return {pod: tuple(sorted((label, v) for label, vs in values.items() for v in vs)) for pod, values in found.items()}


def total(counts: Mapping[str, int], names: Iterable[str]) -> int:
    return sum(counts.get(n, 0) for n in names)
