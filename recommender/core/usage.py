"""What workloads use: the canonical usage metric names and the :class:`Snapshot` (inventory plus usage
series over one window) that every pure stage reads. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from recommender.core.inventory import GpuNode, Workload, WorkloadRef

if TYPE_CHECKING:  # pandas and numpy only where a series is read: the settings import this module (metric names)
    import pandas as pd

# Canonical usage metric names. Collectors fill these; features and policies read them.
# Values are per workload (pods already aggregated by the rule in collectors.snapshot).
FB_USED_MIB = "fb_used_mib"  # framebuffer used, per device, MiB (max over step)


FB_TOTAL_MIB = "fb_total_mib"  # framebuffer used + free, per device, MiB


GR_ENGINE_ACTIVE_FRAC = "gr_engine_active_frac"  # 0-1 of the device/slice it runs on (avg over step)


SM_ACTIVE_FRAC = "sm_active_frac"  # 0-1, when the DCP field is enabled


POWER_W = "power_w"


KV_USAGE_FRAC = "kv_usage_frac"  # vLLM kv_cache_usage_perc (0-1), max over step


REQUESTS_WAITING = "requests_waiting"  # vLLM num_requests_waiting, summed over pods


REQUESTS_RUNNING = "requests_running"


REQUEST_RATE = "request_rate_per_s"  # requests arriving per second: finished + growth of running and waiting


PROMPT_TOKENS_RATE = "prompt_tokens_per_s"


GENERATION_TOKENS_RATE = "generation_tokens_per_s"


TTFT_P95_S = "ttft_p95_s"


# requests/s whose first token came after the fleet's TTFT objective (scaling.ttft_objective_s), from the TTFT
# histogram's buckets around it, interpolated as histogram_quantile does
TTFT_OVER_OBJECTIVE_RATE = "ttft_over_objective_per_s"


PREEMPTIONS_RATE = "preemptions_per_s"


SERVING_REPLICAS = "serving_replicas"  # pods reporting vLLM metrics at the step (derived in collectors.snapshot)


USAGE_METRICS: tuple[str, ...] = (
    FB_USED_MIB,
    FB_TOTAL_MIB,
    GR_ENGINE_ACTIVE_FRAC,
    SM_ACTIVE_FRAC,
    POWER_W,
    KV_USAGE_FRAC,
    REQUESTS_WAITING,
    REQUESTS_RUNNING,
    REQUEST_RATE,
    PROMPT_TOKENS_RATE,
    GENERATION_TOKENS_RATE,
    TTFT_P95_S,
    TTFT_OVER_OBJECTIVE_RATE,
    PREEMPTIONS_RATE,
    SERVING_REPLICAS,
)


@dataclass(frozen=True)
class Snapshot:
    """Everything the pure pipeline needs: inventory plus usage series over one window.

    ``usage`` maps a canonical metric name to a wide frame: index = UTC timestamps (DatetimeIndex,
    one per step), columns = ``WorkloadRef.key``. A metric no collector found is simply absent; a
    workload with no series for a metric has no column (or an all-NaN one).
    """

    workloads: tuple[Workload, ...]
    usage: Mapping[str, pd.DataFrame]
    start: datetime
    end: datetime
    step_s: float
    warnings: tuple[str, ...] = ()
    source: str = "unknown"
    nodes: tuple[GpuNode, ...] = ()

    def series(self, metric: str, ref: WorkloadRef) -> pd.Series | None:
        """One workload's series for one metric, or None when absent or all-NaN."""
        import numpy as np
        import pandas as pd

        frame = self.usage.get(metric)
        if frame is None or ref.key not in frame.columns:
            return None
        s = frame[ref.key]
        values = s.to_numpy()  # numpy's tests, not pandas': a report asks this ~30 times a workload
        if np.isnan(values).all() if values.dtype.kind == "f" else s.isna().all():
            return None
        if values.dtype in (np.float32, np.float16):  # a frame held compactly (exact): float64 for readers
            return pd.Series(values.astype(np.float64), index=s.index, name=s.name, copy=False)
        return s


KV_TOKENS = "kv_tokens"  # KV cache tokens in use: kv_usage_frac x the KV pool (a derived series)


TOKENS_RATE = "tokens_per_s"  # prompt + generation tokens per second (a derived series)


# vLLM's TTFT histogram bounds (reference §9.1): the share over an objective between two of them is interpolated
VLLM_TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                       20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)


def within_objective(objective_s: float) -> tuple[tuple[float, float], ...]:
    """(bucket bound, weight) pairs whose weighted cumulative counts are the observations up to the objective:
    the bound itself where it is one; else the bounds around it, read linearly as ``histogram_quantile`` reads a
    bucket (below the first bound, from 0); past the last finite bound, that bound. The collector's query and the
    replay's histogram both read misses through it."""
    bounds = VLLM_TTFT_BUCKETS_S
    hi = next((i for i, b in enumerate(bounds) if b >= objective_s), None)
    if hi is None:
        return ((bounds[-1], 1.0),)
    if bounds[hi] == objective_s:
        return ((bounds[hi], 1.0),)
    lo = bounds[hi - 1] if hi else 0.0
    f = (objective_s - lo) / (bounds[hi] - lo)
    return ((bounds[hi], f),) if not hi else ((lo, 1 - f), (bounds[hi], f))
