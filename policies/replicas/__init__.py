"""The replica policy: how many replicas a workload needs over time and the autoscaler parameters that get them.

Small estimators, each returning a typed estimate or a typed absence with its reason (``estimates``):
per-replica capacity (``capacity``), demand to size for (``demand``), error-budget headroom (``headroom``),
scale to zero (``zero``) and KEDA's cooldown (``cooldown``), replica counts (``counts``); ``plan.scaling_plan``
composes them. ``simulate`` replays a plan over the history; ``recorded`` reads the controller's record back.
The KEDA/HPA objects a plan renders to are in policies/autoscalerobjects.py. The names below are the stable
ones other layers import. Pure: no I/O.
"""

from policies.autoscalerobjects import (
    RATE_TRIGGER_METRIC,
    WAITING_TRIGGER_METRIC,
    arrival_rate_query,
    hpa_behavior,
    keda_parameters,
    scale_down_window_s,
    trigger_thresholds,
)
from policies.replicas.capacity import Knee, keep_lower_bound, locate_knee, per_replica_capacity
from policies.replicas.cooldown import KEDA_DEFAULT_COOLDOWN_S, cooldown_s
from policies.replicas.counts import replica_bounds, replicas_for, significant
from policies.replicas.demand import BAND_BY_CLASS, OBSERVED_BY_CLASS, demand_to_size, forecasts_to_act_on
from policies.replicas.estimates import (
    Absent,
    Capacity,
    CapacitySource,
    Carried,
    Cooldown,
    Demand,
    Headroom,
    NoScalingPlan,
    ReplicaBounds,
    ScaleToZero,
)
from policies.replicas.headroom import error_budget_headroom, wake_steps
from policies.replicas.history import (
    ReplicaHistory,
    carried_misses,
    history_from_snapshot,
    history_span_s,
    idle_gaps_s,
    rescue_s,
    rescued_steps,
    this_shape,
)
from policies.replicas.plan import scaling_plan, ttft_objective
from policies.replicas.recorded import positive_number, recorded_capacity
from policies.replicas.simulate import autoscaled_replicas, autoscaled_series, with_means
from policies.replicas.zero import scale_to_zero, wake_cost

__all__ = [
    "BAND_BY_CLASS", "KEDA_DEFAULT_COOLDOWN_S", "OBSERVED_BY_CLASS", "RATE_TRIGGER_METRIC", "WAITING_TRIGGER_METRIC",
    "Absent", "Capacity", "CapacitySource", "Carried", "Cooldown", "Demand", "Headroom", "Knee", "NoScalingPlan",
    "ReplicaBounds", "ReplicaHistory", "ScaleToZero", "arrival_rate_query", "autoscaled_replicas",
    "autoscaled_series", "carried_misses", "cooldown_s", "demand_to_size", "error_budget_headroom",
    "forecasts_to_act_on",
    "history_from_snapshot", "history_span_s", "hpa_behavior", "idle_gaps_s", "keda_parameters", "keep_lower_bound",
    "locate_knee", "per_replica_capacity", "positive_number", "recorded_capacity", "replica_bounds", "replicas_for",
    "rescue_s", "rescued_steps", "scale_down_window_s", "scale_to_zero", "scaling_plan", "significant", "this_shape",
    "trigger_thresholds",
    "ttft_objective", "wake_cost", "wake_steps", "with_means",
]
