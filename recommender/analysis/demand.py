"""The demand series a workload is forecast on: request rate, token throughput and KV tokens in use.

Two of them are derived (tokens/s = prompt + generation; KV tokens = KV usage x the KV pool), so the
pipeline, the report's charts and the notebook read them through this one module. Pure.
"""

from __future__ import annotations

import pandas as pd

from recommender.core import usage as m
from recommender.core.inventory import Workload
from recommender.core.usage import Snapshot

DEMAND_METRICS: tuple[str, ...] = (m.REQUEST_RATE, m.TOKENS_RATE, m.KV_TOKENS)
LABELS = {m.REQUEST_RATE: "requests/s", m.TOKENS_RATE: "tokens/s", m.KV_TOKENS: "KV tokens in use"}


def demand_series(snapshot: Snapshot, workload: Workload, metric: str) -> pd.Series | None:
    """One demand series of a workload, or None when its inputs are absent."""
    ref = workload.ref
    if metric == m.TOKENS_RATE:
        parts = [snapshot.series(x, ref) for x in (m.PROMPT_TOKENS_RATE, m.GENERATION_TOKENS_RATE)]
        present = [p for p in parts if p is not None]
        if not present:
            return None
        total = present[0] if len(present) == 1 else present[0].add(present[1], fill_value=0.0)
        return total.rename(metric)
    if metric == m.KV_TOKENS:
        usage = snapshot.series(m.KV_USAGE_FRAC, ref)
        if usage is None or not workload.kv_capacity_tokens:
            return None
        return (usage * workload.kv_capacity_tokens).rename(metric)
    series = snapshot.series(metric, ref)
    return None if series is None else series.rename(metric)

