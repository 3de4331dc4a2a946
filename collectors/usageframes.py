"""Pod usage columns to workload usage columns: demand summed across replicas, per-device figures by their
max, serving replicas counted, and demand read as 0 at the steps a workload had no pod.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
from pandas.api.typing import DataFrameGroupBy

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


def aggregate_usage(series: Mapping[str, pd.DataFrame], mapping: Mapping[str, WorkloadRef]
                    ) -> dict[str, pd.DataFrame]:
    """Pod columns → workload columns, summing demand metrics and taking the max of the rest, plus
    ``SERVING_REPLICAS``: how many of a workload's pods reported vLLM metrics at each step (NaN where none
    did). A workload the HPA scales has a different count at each step; its capacity per replica is read
    against this count, not today's."""
    out: dict[str, pd.DataFrame] = {}
    for metric, frame in series.items():
        grouped = _by_workload(frame, mapping)
        if grouped is None:
            continue
        agg = grouped.sum(min_count=1) if metric in SUM_METRICS else grouped.max()
        out[metric] = agg.T.astype("float64")
    source = next((series[x] for x in SERVING_FROM if x in series), None)
    present = None if source is None else _by_workload(source.notna(), mapping)
    if present is not None:
        out[m.SERVING_REPLICAS] = present.sum().T.astype("float64").replace(0.0, np.nan)
    return out


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


def _by_workload(frame: pd.DataFrame, mapping: Mapping[str, WorkloadRef]) -> DataFrameGroupBy | None:
    """The frame's pod columns grouped by workload key (transposed: one row per pod), or None without any."""
    cols = [c for c in frame.columns if c in mapping]
    if not cols:
        return None
    return frame[cols].T.groupby(pd.Index([mapping[c].key for c in cols]))
