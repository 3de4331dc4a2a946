"""KEDA's ``cooldownPeriod`` (seconds without requests before scaling to zero) as a ski-rental threshold: at
least one cold start, long enough to ride out the short idle gaps. Pure: no I/O.
"""

from __future__ import annotations

import math

import numpy as np

from policies.replicas.estimates import Cooldown
from recommender.core.settings import ScalingSettings

KEDA_DEFAULT_COOLDOWN_S = 300  # reference.md §10; only used when scaling to zero


def cooldown_s(gaps_s: np.ndarray, cold_start_s: float, to_zero: bool, settings: ScalingSettings) -> Cooldown:
    """KEDA cooldownPeriod: p90 of the short gaps, clamped to [one cold start, the long-gap length].

    Ski rental: holding an idle replica for one cold start costs what bringing it back costs, so never
    less; gaps shorter than the cooldown keep the replica and avoid a cold start.
    """
    if not to_zero:
        return Cooldown(KEDA_DEFAULT_COOLDOWN_S,
                        f"cooldownPeriod {KEDA_DEFAULT_COOLDOWN_S} s (KEDA default; unused: min >= 1)")
    long_s = settings.scale_to_zero_idle_multiple * cold_start_s
    short = gaps_s[gaps_s < long_s]
    raw = float(np.quantile(short, 0.9)) if short.size else cold_start_s
    poll = settings.polling_interval_s
    value = int(math.ceil(min(max(raw, cold_start_s), long_s) / poll) * poll)
    return Cooldown(value, f"cooldownPeriod {value} s: p90 of idle gaps under {long_s:g} s is {raw:g} s, kept "
                           f"within [{cold_start_s:g} s cold start, {long_s:g} s], rounded up to the {poll} s "
                           "polling interval")
