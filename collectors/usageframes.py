"""Pod usage columns to workload usage columns: demand summed across replicas, per-device figures by their
max, serving replicas counted, and demand read as 0 at the steps a workload had no pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from recommender.core import usage as m
from recommender.core.inventory import WorkloadRef

# How a workload's value is formed from its pods' values at one step.
SUM_METRICS = frozenset(
    {m.REQUESTS_WAITING, m.REQUESTS_RUNNING, m.REQUEST_RATE, m.PROMPT_TOKENS_RATE,
     m.GENERATION_TOKENS_RATE, m.PREEMPTIONS_RATE, m.TTFT_OVER_OBJECTIVE_RATE, m.POWER_W}
)  # demand adds up across replicas; everything else is per replica/device: max


# Demand a workload has none of while it has no pod: at zero it reads 0, not unknown (fill_at_zero).
AT_ZERO_METRICS = frozenset(
    {m.REQUESTS_WAITING, m.REQUESTS_RUNNING, m.REQUEST_RATE, m.PROMPT_TOKENS_RATE, m.GENERATION_TOKENS_RATE,
     m.PREEMPTIONS_RATE, m.TTFT_OVER_OBJECTIVE_RATE, m.SERVING_REPLICAS}
)


# Whose pods count as serving replicas at a step: vLLM's running gauge, else its request counter's rate.
SERVING_FROM = (m.REQUESTS_RUNNING, m.REQUEST_RATE)


WHOLE_IN_FLOAT16 = 2048  # float16 holds every whole number up to 2**11 exactly (a count of pods, with NaN)


def aggregate_usage(series: Mapping[str, pd.DataFrame], mapping: Mapping[str, WorkloadRef]
                    ) -> dict[str, pd.DataFrame]:
    """Pod columns → workload columns, summing demand metrics and taking the max of the rest, plus
    ``SERVING_REPLICAS``: how many of a workload's pods reported vLLM metrics at each step (NaN where none
    did). A workload the HPA scales has a different count at each step; its capacity per replica is read
    against this count, not today's.

    A workload of one pod takes its pod's column as it is (a view where the columns keep their order: with
    pandas' copy-on-write nothing is held twice); only workloads of several pods are grouped."""
    out: dict[str, pd.DataFrame] = {}
    for metric, frame in series.items():
        agg = _aggregate(frame, mapping, "sum" if metric in SUM_METRICS else "max")
        if agg is not None:
            out[metric] = agg
    source = next((series[x] for x in SERVING_FROM if x in series), None)
    present = None if source is None else _aggregate(source, mapping, "count")
    if present is not None:
        out[m.SERVING_REPLICAS] = present
    return out


def _aggregate(frame: pd.DataFrame, mapping: Mapping[str, WorkloadRef], how: str) -> pd.DataFrame | None:
    """One metric's workload columns (sorted by key; float64, or float32 for a float32 frame's sum or max):
    ``how`` is "sum" (NaN where no pod had a value), "max", or "count" (pods with a value; NaN where none had one;
    whole numbers, held at float16 where no workload has more than ``WHOLE_IN_FLOAT16`` pods, else float32: exact
    either way, and ``Snapshot.series`` reads them at float64). None without any mapped pod."""
    groups: dict[str, list[int]] = {}
    for i, c in enumerate(frame.columns):
        if c in mapping:
            groups.setdefault(mapping[c].key, []).append(i)
    if not groups:
        return None
    keys = sorted(groups)
    f32 = how != "count" and len(frame.columns) > 0 and all(dt == np.float32 for dt in frame.dtypes)
    dtype: type[np.floating[Any]] = np.float32 if f32 else np.float64
    if how == "count":
        dtype = np.float16 if max(len(g) for g in groups.values()) <= WHOLE_IN_FLOAT16 else np.float32
    values = frame.to_numpy(dtype=None if how == "count" else dtype)  # one block: a view, not a copy
    single = [k for k in keys if len(groups[k]) == 1]
    at = [groups[k][0] for k in single]
    parts: list[pd.DataFrame] = []
    if single:
        data = values if at == list(range(values.shape[1])) else values[:, at]
        if how == "count":
            data = np.where(np.isnan(data), dtype(np.nan), dtype(1.0))
        elif how == "sum" and bool(((data == 0) & np.signbit(data)).any()):
            data = data + 0.0  # a sum starts at +0.0: -0.0 reads 0.0, as grouped
        parts.append(pd.DataFrame(data, index=frame.index, columns=pd.Index(single), copy=False))
    several = [i for k in keys if len(groups[k]) > 1 for i in groups[k]]
    if several:
        sub = frame.iloc[:, several]
        grouped = (sub.notna() if how == "count" else sub).T.groupby(
            pd.Index([mapping[c].key for c in sub.columns]))
        agg = grouped.sum(min_count=1) if how == "sum" else grouped.sum() if how == "count" else grouped.max()
        agg = agg.T.astype(dtype)
        parts.append(agg.replace(0.0, np.nan) if how == "count" else agg)
    return parts[0] if len(parts) == 1 else pd.concat(parts, axis=1)[keys]


def fill_at_zero(usage: Mapping[str, pd.DataFrame], replicas: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Workload usage with 0 for its demand (``AT_ZERO_METRICS``) at the steps where it had no pod throughout
    (``replicas`` 0: kube-state-metrics' count, columns ``WorkloadRef.key``) and no pod reported one (NaN).

    A step at zero has no vLLM metric, so without this it reads as a step without metrics: an idle gap spent at
    zero is unknown, not idle, the next cycle sees shorter gaps, and the scale-to-zero verdict can flip. Only
    the columns a metric already has are filled (workloads whose pods reported it in the window); per-device
    metrics stay NaN (no device), and so does a step kube-state-metrics has no count for."""
    out = dict(usage)
    for metric in sorted(AT_ZERO_METRICS & usage.keys()):
        frame = usage[metric]
        cols = [c for c in frame.columns if c in replicas.columns]
        if not cols:
            continue
        zero = replicas[cols].reindex(frame.index).eq(0) & frame[cols].isna()
        if zero.to_numpy().any():
            frame = frame.copy()
            frame[cols] = frame[cols].mask(zero, 0.0)
            out[metric] = frame
    return out
