"""The series the replica policy reads (request rate, p95 TTFT, requests waiting, ready replicas per step) and
the views every estimator shares: the steps since the replicas took their current shape, the rate per replica,
idle runs, how much history there is. Rates in requests/s, times in seconds. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from recommender.analysis.features import split_at
from recommender.core import usage as m
from recommender.core.inventory import Workload
from recommender.core.settings_scaling import ScalingSettings
from recommender.core.usage import Snapshot


@dataclass(frozen=True)
class ReplicaHistory:
    """The series the replica policy reads, one value per step (whole workload, pods summed).

    ``replicas`` is the ready replica count per step; None means the allocation's count throughout.
    """

    step_s: float
    request_rate_per_s: pd.Series | None = None
    ttft_p95_s: pd.Series | None = None
    requests_waiting: pd.Series | None = None
    replicas: pd.Series | None = None


def history_from_snapshot(snapshot: Snapshot, workload: Workload) -> ReplicaHistory:
    """The replica policy's inputs from a snapshot; the replica count is the pods that served at each step
    (a snapshot without it: the allocation's, held constant)."""
    ref = workload.ref
    return ReplicaHistory(snapshot.step_s, snapshot.series(m.REQUEST_RATE, ref), snapshot.series(m.TTFT_P95_S, ref),
                          snapshot.series(m.REQUESTS_WAITING, ref), snapshot.series(m.SERVING_REPLICAS, ref))


def this_shape(frame: pd.DataFrame, workload: Workload) -> pd.DataFrame:
    """The steps of a time-indexed frame since the replicas took their current shape (``Workload.shape_since``;
    all of them where it is unknown): per replica, the steps before were another shape's, so the capacity and
    the error budget read only these."""
    return split_at(frame, workload.shape_since)[1]


def changed_within(workload: Workload, history: ReplicaHistory) -> bool:
    """Whether the history holds steps from before the replicas took their current shape."""
    rate = history.request_rate_per_s
    return rate is not None and len(this_shape(rate.to_frame(), workload)) < len(rate)


def shape_note(workload: Workload, history: ReplicaHistory, min_steps: int) -> list[str]:
    """Why the capacity and error budget read part of the history, where they do."""
    since = workload.shape_since
    if since is None or not changed_within(workload, history):
        return []
    return [f"capacity and error budget read from {since:%Y-%m-%d %H:%M} UTC on, when the replicas took their "
            f"current GPU shape (per replica, the steps before were another shape's), once {min_steps} steps "
            "there tell; across the change until then"]


def history_span_s(history: ReplicaHistory) -> float:
    """Seconds of request-rate history with a value (gaps in the series do not count)."""
    rate = history.request_rate_per_s
    return 0.0 if rate is None else float(np.isfinite(rate.to_numpy(dtype="float64")).sum() * history.step_s)


def per_replica_rate(workload: Workload, history: ReplicaHistory) -> pd.Series | None:
    """Request rate per replica at each step: the history's ready replicas, else the allocation's count."""
    rate = history.request_rate_per_s
    if rate is None:
        return None
    return rate / (history.replicas if history.replicas is not None else max(1, workload.allocation.replicas))


def step_outcomes(workload: Workload, history: ReplicaHistory, objective_s: float, rescue_s: float = 0.0
                  ) -> pd.DataFrame | None:
    """Per step with a request rate: the rate per replica (``per``) and whether the step missed the objective
    or queued (``missed``), less the steps :func:`rescued_steps` finds within ``rescue_s`` of a miss (they met
    the objective on replicas added for the miss: no evidence of what the replicas the plan sized serve) and the
    misses :func:`carried_misses` finds (a heavier step's backlog, drained); None without rate or TTFT history."""
    rate, ttft = history.request_rate_per_s, history.ttft_p95_s
    if rate is None or ttft is None:
        return None
    frame = pd.DataFrame({"rate": rate, "ttft": ttft})
    waiting = history.requests_waiting
    frame["waiting"] = 0.0 if waiting is None else waiting
    frame["per"] = per_replica_rate(workload, history)
    frame["missed"] = (frame["ttft"] > objective_s) | (frame["waiting"].fillna(0) >= 1)
    if rescue_s > 0 and history.replicas is not None:
        frame["rescued"] = rescued_steps(frame["missed"].where(np.isfinite(frame["ttft"])), history.replicas,
                                         rate, int(rescue_s // history.step_s))
    else:
        frame["rescued"] = False
    frame["carried"] = carried_misses(frame["missed"], frame["per"])
    frame = this_shape(frame, workload)
    frame = frame[np.isfinite(frame["rate"]) & np.isfinite(frame["ttft"]) & np.isfinite(frame["per"])
                  & (frame["rate"] > 0) & ~frame["rescued"].astype(bool) & ~frame["carried"]]
    return frame[["per", "missed"]]


def carried_misses(missed: pd.Series, per: pd.Series) -> pd.Series:
    """Missed steps whose queue an earlier step of the same run of missed steps left at a higher rate per replica:
    replicas added for that step drain its backlog at a lower rate, and miss while they do. Such a miss says what
    the heavier step could not serve, not what its own rate costs, so the knee does not read it. Booleans on
    ``missed``'s index (booleans too); a step with no rate per replica is not judged and does not end the run."""
    flags = missed.to_numpy(dtype=bool)
    rates = per.reindex(missed.index).to_numpy(dtype="float64")
    out = np.zeros(flags.size, dtype=bool)
    heaviest, last = -np.inf, -2  # the highest rate per replica in the current run of missed steps, its last step
    for i in np.flatnonzero(flags).tolist():  # the missed steps only: a history of weeks holds few
        if i != last + 1:
            heaviest = -np.inf
        last = i
        if np.isfinite(rates[i]):
            out[i] = rates[i] < heaviest
            heaviest = max(heaviest, rates[i])
    return pd.Series(out, index=missed.index)


def rescue_s(settings: ScalingSettings, cold_start_s: float | None) -> float:
    """How long after a miss replicas added for it serve (s): the trigger's rate window to see the miss, a cold
    start to add them, and the scale-down window they are held for (one cold start)."""
    return settings.rate_window_s + 2 * settings.cold_start_s(cold_start_s)


def rescued_steps(missed: pd.Series, replicas: pd.Series, rate: pd.Series, span_steps: int) -> pd.Series:
    """Steps the fast loop rescued, as collected history shows them: steps that met the objective (``missed``
    0; 1 missed, NaN unknown) within ``span_steps`` after a missed step, with more serving ``replicas`` than that
    step had and at least its request ``rate``: the replicas that missed would have served them at the rate
    per replica they missed at. The objective trigger adds replicas on a miss (so does any trigger a burst
    fires); the steps they then serve within the objective are the fast loop's work, not the plan's: the slow
    loop counts them as its misses and reads no capacity from them. Booleans on ``missed``'s index."""
    flags = missed.to_numpy(dtype="float64")
    count = replicas.reindex(missed.index).to_numpy(dtype="float64")
    load = rate.reindex(missed.index).to_numpy(dtype="float64")
    out = np.zeros(flags.size, dtype=bool)
    for i in np.flatnonzero((flags == 1) & np.isfinite(count) & np.isfinite(load)) if span_steps >= 1 else ():
        after = slice(i + 1, min(flags.size, i + 1 + span_steps))
        with np.errstate(invalid="ignore"):
            out[after] |= (flags[after] == 0) & (count[after] > count[i]) & (load[after] >= load[i])
    return pd.Series(out, index=missed.index)


def idle_runs(history: ReplicaHistory) -> tuple[np.ndarray, np.ndarray]:
    """First and one-past-last step index of each run of steps with no requests and nothing waiting."""
    rate = history.request_rate_per_s
    if rate is None:
        return np.array([], dtype=np.int64), np.array([], dtype=np.int64)
    values = rate.to_numpy(dtype="float64")
    idle = np.isfinite(values) & (values <= 0)
    if history.requests_waiting is not None:
        idle &= ~(history.requests_waiting.reindex(rate.index).fillna(0).to_numpy() > 0)
    edges = np.flatnonzero(np.diff(np.concatenate(([0], idle.astype(np.int8), [0]))))
    return edges[::2], edges[1::2]


def idle_gaps_s(history: ReplicaHistory) -> np.ndarray:
    """Lengths (s) of runs of steps with no requests and nothing waiting; unknown steps break a run."""
    starts, ends = idle_runs(history)
    return (ends - starts) * history.step_s


def clean_rate(rate: np.ndarray) -> np.ndarray:
    """Requests/s with NaN, infinite and negative steps read as none."""
    return np.where(np.isfinite(rate), np.maximum(rate, 0.0), 0.0)
