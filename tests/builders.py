"""Small builders for hand-made snapshots: the pure stages test on these, without servers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd

from recommender.core.inventory import Allocation, Sharing, VllmArgs, Workload, WorkloadRef
from recommender.core.usage import Snapshot

END = datetime(2026, 11, 1, tzinfo=UTC)
STEP_S = 600.0


def index(days: float, step_s: float = STEP_S, end: datetime = END) -> pd.DatetimeIndex:
    n = int(days * 86_400 / step_s)
    return pd.date_range(end=end, periods=n, freq=pd.Timedelta(seconds=step_s), tz=UTC)


def whole_gpu(product: str = "NVIDIA A100-SXM4-80GB", model: str | None = "A100-80GB", gpus: int = 1,
              vllm: VllmArgs | None = None, replicas: int = 1, memory_mib: float | None = 81920) -> Allocation:
    return Allocation(Sharing.EXCLUSIVE, gpus=gpus, gpu_model=model, gpu_product=product,
                      device_memory_mib=memory_mib, gpu_equivalents=float(gpus), vllm=vllm, replicas=replicas)


def workload(name: str, alloc: Allocation, ns: str = "ml", kind: str = "Deployment", **kw: object) -> Workload:
    return Workload(WorkloadRef(ns, kind, name), alloc, pods=(f"{name}-7d9f8b6c5d-x2k4p",), **kw)  # type: ignore[arg-type]


def snapshot(workloads: Sequence[Workload], series: Mapping[str, Mapping[str, np.ndarray | float]],
             days: float = 14, step_s: float = STEP_S) -> Snapshot:
    """``series[metric][workload name] = values`` (array of the index's length, or a constant)."""
    idx = index(days, step_s)
    by_name = {w.ref.name: w.ref.key for w in workloads}
    usage = {}
    for metric, cols in series.items():
        data = {by_name[n]: (np.full(len(idx), v, dtype=float) if np.isscalar(v) else np.asarray(v, dtype=float))
                for n, v in cols.items()}
        usage[metric] = pd.DataFrame(data, index=idx)
    start = idx[0].to_pydatetime() - timedelta(seconds=step_s)
    return Snapshot(tuple(workloads), usage, start, idx[-1].to_pydatetime(), step_s, (), "test")
