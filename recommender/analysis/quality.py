"""The data-quality stage: values outside physical bounds are dropped and counted, before features.

Snapshot in, snapshot out: each canonical metric is checked against its row of the bounds table
(``recommender/data/bounds.yaml``); a value outside its bounds, or ±Inf, is impossible and becomes missing
(NaN). NaN is how a snapshot marks a step without a sample, so it is absence, never counted. Each workload gets
its counts as notes ("dropped 1,440 of 1,440 memory samples (100%): negative or above the device"), the usable
share of the metrics the sizing reads (for confidence), and, when too little is left, why no recommendation can
be made. Pure: the table comes in as data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from recommender.core import usage as m
from recommender.core.catalogue import Catalogue
from recommender.core.inventory import MAX_TOKENS, Workload
from recommender.core.usage import Snapshot

N = TypeVar("N", int, float)  # a figure kept as it came, int or float
DEVICE, GPU = "device", "gpu"  # memory maxima that depend on the workload's device


@dataclass(frozen=True)
class MetricBound:
    """One metric's physical bounds: numbers, None (unbounded) or ``device``/``gpu`` (memory, MiB)."""

    metric: str
    label: str
    why: str
    min: float | None
    max: float | str | None


@dataclass(frozen=True)
class BoundsTable:
    metrics: Mapping[str, MetricBound]
    sizing: tuple[str, ...]  # metrics whose usable share gates a recommendation
    tolerance_frac: float = 0.0  # slack on every max


@dataclass(frozen=True)
class Dropped:
    """Impossible samples of one metric of one workload, out of the samples it had (NaN steps excluded)."""

    metric: str
    label: str
    why: str
    dropped: int
    present: int

    @property
    def share(self) -> float:
        return self.dropped / self.present if self.present else 0.0

    def reason(self) -> str:
        return f"dropped {self.dropped:,} of {self.present:,} {self.label} samples ({_pct(self.share)}): {self.why}"


@dataclass(frozen=True)
class DataQuality:
    """What the stage found for one workload. ``usable_frac``: the lowest usable share among the sizing metrics
    it has (1 when nothing was dropped); ``unusable``: why no recommendation can be made, or None."""

    dropped: tuple[Dropped, ...] = ()
    usable_frac: float = 1.0
    unusable: str | None = None


def _pct(x: float) -> str:
    return "<1%" if 0 < x < 0.005 else f"{x:.0%}"


def parse_bounds(raw: Mapping[str, Any]) -> BoundsTable:
    """The table from its YAML form; a max that is neither a number, null, ``device`` nor ``gpu`` is an error."""
    rows = {}
    for metric, spec in raw["metrics"].items():
        hi = spec.get("max")
        if not (hi is None or hi in (DEVICE, GPU) or isinstance(hi, int | float)):
            raise ValueError(f"bounds of {metric}: max must be a number, null, {DEVICE!r} or {GPU!r}, not {hi!r}")
        lo = spec.get("min")
        rows[metric] = MetricBound(metric, spec["label"], spec["why"], None if lo is None else float(lo), hi)
    return BoundsTable(rows, tuple(raw.get("sizing", ())), float(raw.get("tolerance_frac", 0.0)))


def device_mib(workload: Workload, catalogue: Catalogue) -> float | None:
    """The catalogue's memory for the workload's device: its MIG profile's usable memory, else the GPU's."""
    gpu = catalogue.get(workload.allocation.gpu_model)
    if gpu is None:
        return None
    prof = gpu.profile(workload.allocation.mig_profile) if workload.allocation.mig_profile else None
    return float(prof.usable_mib if prof else gpu.memory_mib)


def _gpu_mib(workload: Workload, catalogue: Catalogue) -> float:
    gpu = catalogue.get(workload.allocation.gpu_model)
    return float(gpu.memory_mib) if gpu else math.inf


def _plausible_device(workload: Workload, catalogue: Catalogue, tol: float) -> Workload:
    """The workload with its device memory replaced by the catalogue's where the reported one is impossible
    (not positive, or above its GPU model's), and a note that says so."""
    seen = workload.allocation.device_memory_mib
    if seen is None or 0 < seen <= _gpu_mib(workload, catalogue) * (1 + tol):
        return workload
    known = device_mib(workload, catalogue)
    instead = f"using the catalogue's {known:,.0f} MiB" if known else "unknown GPU model: left unknown"
    shown = f"{seen:,.0f}" if abs(seen) < 1e12 else f"{seen:.3g}"  # not 300 digits of a broken exporter's 1e300
    note = f"device memory reported as {shown} MiB is impossible: {instead}"
    return replace(workload, allocation=replace(workload.allocation, device_memory_mib=known),
                   notes=(*workload.notes, note))


def _plausible_engine(workload: Workload) -> Workload:
    """The workload with the vLLM figures no engine has left unknown (a KV cache of no or more than
    ``MAX_TOKENS`` tokens, a memory fraction outside 0-1, a context or batch of more than ``MAX_TOKENS``), and a
    note for each: whatever the source (a snapshot file, a collector of another version), they are not sizes."""
    notes: list[str] = []

    def kept(name: str, value: N | None, ok: bool, unit: str = "") -> N | None:
        if value is None or ok:
            return value
        notes.append(f"{name} reported as {value:,.6g}{unit} is impossible: left unknown")
        return None

    kv = workload.kv_capacity_tokens
    kv = kept("KV cache capacity", kv, kv is not None and 0 < kv <= MAX_TOKENS, " tokens")
    vllm = workload.allocation.vllm
    if vllm is not None:
        frac, length, seqs = vllm.gpu_memory_utilization, vllm.max_model_len, vllm.max_num_seqs
        vllm = replace(vllm, gpu_memory_utilization=kept("--gpu-memory-utilization", frac,
                                                         frac is not None and 0 < frac <= 1),
                       max_model_len=kept("--max-model-len", length, length is not None and 1 <= length <= MAX_TOKENS),
                       max_num_seqs=kept("--max-num-seqs", seqs, seqs is not None and 1 <= seqs <= MAX_TOKENS))
    if not notes:
        return workload
    return replace(workload, kv_capacity_tokens=kv, allocation=replace(workload.allocation, vllm=vllm),
                   notes=(*workload.notes, *notes))


def _limits(bound: MetricBound, frame: pd.DataFrame, snapshot: Snapshot, total: pd.DataFrame | None,
            catalogue: Catalogue, tol: float) -> tuple[float, float | np.ndarray]:
    """(min, max) for ``frame``: numbers, or a max per column (a row) or per cell from each workload's device."""
    lo = -math.inf if bound.min is None else bound.min
    hi = bound.max
    if hi is None:
        return lo, math.inf
    if not isinstance(hi, str):
        return lo, hi * (1 + tol)
    by_key = {w.ref.key: w for w in snapshot.workloads}
    flat = np.array([_memory_limit(by_key.get(c), hi, catalogue) for c in frame.columns], dtype="float64")
    if hi == DEVICE and total is not None:  # the series' own total at that step, where it has one
        own = total.reindex(index=frame.index, columns=frame.columns).to_numpy(dtype="float64")  # no copy if aligned
        cells = np.where(np.isnan(own), flat, own)
        cells *= 1 + tol
        return lo, cells
    return lo, (flat * (1 + tol))[np.newaxis, :]  # one max per column, for every step


def _bad_cells(bound: MetricBound, frame: pd.DataFrame, snapshot: Snapshot, total: pd.DataFrame | None,
               catalogue: Catalogue, tol: float) -> np.ndarray:
    """Where ``frame``'s values are impossible (a bool array of its shape), ``_COLUMNS`` columns at a time: the
    per-cell maxima (:func:`_limits`) are made for one slice, not the whole frame."""
    values = frame.to_numpy()  # a view of a float64 or float32 block; compared at float64 a slice at a time
    bad = np.zeros(values.shape, dtype=bool, order="F")
    for at in range(0, values.shape[1], _COLUMNS):
        part = slice(at, at + _COLUMNS)
        lo, hi = _limits(bound, frame.iloc[:, part], snapshot, total, catalogue, tol)
        bad[:, part] = _impossible(np.asarray(values[:, part], dtype=np.float64), lo, hi)
    return bad


_COLUMNS = 512  # columns whose limits are made at a time


def _memory_limit(workload: Workload | None, kind: str, catalogue: Catalogue) -> float:
    """A workload's memory maximum when its series says none: its GPU model's (``gpu``), or what its device
    shows it (``device``); unbounded when unknown."""
    if workload is None:
        return math.inf
    if kind == GPU:
        return _gpu_mib(workload, catalogue)
    return workload.allocation.device_memory_mib or device_mib(workload, catalogue) or math.inf


def _impossible(values: np.ndarray, lo: float, hi: float | np.ndarray) -> np.ndarray:
    """±Inf, below ``lo`` or above ``hi``; NaN (no sample) never."""
    with np.errstate(invalid="ignore"):
        return np.isinf(values) | (values < lo) | (values > hi)


def clean(snapshot: Snapshot, catalogue: Catalogue, table: BoundsTable, min_usable_frac: float
          ) -> tuple[Snapshot, dict[str, DataQuality]]:
    """The snapshot without impossible values, each workload's drops in its notes, and its quality facts."""
    workloads = tuple(_plausible_engine(_plausible_device(w, catalogue, table.tolerance_frac))
                      for w in snapshot.workloads)
    snapshot = replace(snapshot, workloads=workloads)
    usage = dict(snapshot.usage)
    found: dict[str, list[Dropped]] = {w.ref.key: [] for w in workloads}
    order = sorted(table.metrics, key=lambda x: x != m.FB_TOTAL_MIB)  # the device's total bounds memory used
    for metric in order:
        frame = usage.get(metric)
        if frame is None or frame.empty:
            continue
        bound = table.metrics[metric]
        bad = _bad_cells(bound, frame, snapshot, usage.get(m.FB_TOTAL_MIB), catalogue, table.tolerance_frac)
        if not bad.any():
            continue
        usage[metric] = frame.mask(bad)
        present = frame.notna().sum().to_numpy()
        for col, n, total in zip(frame.columns, bad.sum(axis=0), present, strict=True):
            if n and col in found:
                found[col].append(Dropped(metric, bound.label, bound.why, int(n), int(total)))
    facts = {key: _quality(tuple(d), table.sizing, min_usable_frac) for key, d in found.items()}
    notes = {key: tuple(d.reason() for d in q.dropped) for key, q in facts.items()}
    workloads = tuple(replace(w, notes=(*w.notes, *notes[w.ref.key])) if notes[w.ref.key] else w for w in workloads)
    return replace(snapshot, workloads=workloads, usage=usage), facts


def fleet_warning(facts: Mapping[str, DataQuality]) -> tuple[str, ...]:
    """One plan-level line naming the workloads with impossible values dropped (their reasons say which)."""
    hit = sorted(key for key, q in facts.items() if q.dropped)
    if not hit:
        return ()
    more = f" and {len(hit) - 5} more" if len(hit) > 5 else ""
    return (f"impossible values (outside recommender/data/bounds.yaml) dropped in {len(hit)} workload(s), counted "
            f"in their reasons: {', '.join(hit[:5])}{more}",)


def _quality(dropped: tuple[Dropped, ...], sizing: tuple[str, ...], min_usable_frac: float) -> DataQuality:
    """Usable share of the sizing metrics, and why none can be made: a sizing metric below the minimum usable
    share, or any series with nothing possible in it."""
    gating = [d for d in dropped if d.metric in sizing]
    usable = min((1 - d.share for d in gating), default=1.0)
    worst = min(gating, key=lambda d: 1 - d.share, default=None)
    if worst is not None and 1 - worst.share < min_usable_frac:
        why = (f"no recommendation: only {_pct(1 - worst.share)} of its {worst.label} samples are possible "
               f"(need {min_usable_frac:.0%}): {worst.why}")
        return DataQuality(dropped, usable, why)
    empty = next((d for d in dropped if d.dropped == d.present), None)
    if empty is not None:
        why = f"no recommendation: every {empty.label} sample is impossible ({empty.why})"
        return DataQuality(dropped, usable, why)
    return DataQuality(dropped, usable)
