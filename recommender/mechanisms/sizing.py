"""Sizing a fractional share (MPS, HAMi, KAI): compute percent and memory MiB rounded up to steps.

One share is sized once (margins already in the need) and then written in each mechanism's own terms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

THREAD_STEP_PCT = 5  # thread percentages are rounded up to this step: finer is noise
MEMORY_STEP_MIB = 256  # memory limits are rounded up to this step


@dataclass(frozen=True)
class FractionalShare:
    """A sized fraction of one GPU."""

    thread_pct: int  # 1-100: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE / HAMi gpucores
    memory_mib: int  # pinned memory limit / HAMi gpumem
    device_memory_mib: float

    @property
    def memory_frac(self) -> float:
        return self.memory_mib / self.device_memory_mib

    @property
    def gpu_equivalents(self) -> float:
        """The larger of the compute and memory fractions: what the share takes of the GPU."""
        return max(self.thread_pct / 100, self.memory_frac)


def size_share(compute_frac: float, memory_mib: float, device_memory_mib: float) -> FractionalShare | None:
    """Round a need up to a share; None when it is a whole GPU (or more) anyway."""
    pct = max(THREAD_STEP_PCT, math.ceil(compute_frac * 100 / THREAD_STEP_PCT - 1e-9) * THREAD_STEP_PCT)
    mem = max(MEMORY_STEP_MIB, math.ceil(memory_mib / MEMORY_STEP_MIB - 1e-9) * MEMORY_STEP_MIB)
    share = FractionalShare(min(pct, 100), int(mem), device_memory_mib)
    return share if pct < 100 and mem < device_memory_mib else None
