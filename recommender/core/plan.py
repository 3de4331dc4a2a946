"""What workloads should get: classes, forecasts, scaling plans, recommendations and the :class:`Plan`
that outputs, the controller and the scaler render. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from recommender.core.advice import Advice
from recommender.core.inventory import Allocation, Workload, WorkloadRef

if TYPE_CHECKING:  # pandas only where a frame is made: ``-o`` is checked before it loads
    import pandas as pd


@dataclass(frozen=True)
class Bound:
    """A recommended amount with its uncertainty, VPA style: lower <= target <= upper."""

    lower: float
    target: float
    upper: float


class WorkloadClass(StrEnum):
    """How a workload's demand tolerates waiting: decides mechanisms, headroom and scale-to-zero."""

    REAL_TIME = "real-time"  # interactive, a latency objective: MIG slice or whole GPU, headroom
    NEAR_REAL_TIME = "near-real-time"  # tolerates seconds of queueing: MIG or MPS, less headroom
    BATCH = "batch"  # throughput only: MPS/time-slicing, off-peak, scale to zero


@dataclass(frozen=True)
class Classification:
    """A workload's class with how sure we are and why, in words.

    ``source`` is ``policy`` (a GPURightsizingPolicy's ``classOverride``: wins over everything),
    ``annotation`` (the user said so on the workload), ``rule`` (strong evidence such as a Job or CronJob
    owner) or ``model`` (the scikit-learn classifier over the demand shape).
    """

    workload_class: WorkloadClass
    confidence: float  # 0-1
    evidence: tuple[str, ...]
    source: str


@dataclass(frozen=True)
class WorkloadConstraints:
    """What a policy object fixes for one workload before it is sized: its class, the MIG profiles it
    may get (names as the policy wrote them, possibly another GPU model's), its TTFT objective (p95,
    seconds) and the replica counts its scaling advice stays within. ``source`` names the policy
    (``policy ns/name``) in every reason the constraint produces. The report has none.
    """

    class_override: WorkloadClass | None = None
    smallest_profile: str | None = None
    largest_profile: str | None = None
    ttft_objective_s: float | None = None
    min_replicas: int | None = None
    max_replicas: int | None = None
    source: str = "policy"

    @property
    def empty(self) -> bool:
        return self.same_as(WorkloadConstraints())

    def same_as(self, other: WorkloadConstraints) -> bool:
        """Equal constraints, whoever set them."""
        return replace(self, source="") == replace(other, source="")


@dataclass(frozen=True)
class Forecast:
    """A demand forecast for one metric of one workload: a mean and prediction intervals per step.

    ``frame`` has a future UTC DatetimeIndex and columns ``mean``, ``lo_80``, ``hi_80``, ``lo_95``,
    ``hi_95`` (one pair per level asked for). ``model`` is what the backtest chose; ``reasons`` say why,
    and what was wrong with the history (gaps, too short) when the band had to be widened.
    """

    metric: str  # canonical metric name (recommender.core.usage), or KV_TOKENS
    model: str
    frame: pd.DataFrame
    reasons: tuple[str, ...] = ()
    backtest_smape: float | None = None  # of the chosen model, on the held-out origins
    backtest_mase: float | None = None


@dataclass(frozen=True)
class ScalingPlan:
    """Replica bounds and the autoscaler parameters derived from forecast demand and replica capacity.

    ``metric`` is the demand the trigger scales on (a canonical name such as ``request_rate_per_s`` or
    ``requests_waiting``), in that metric's units. ``target_per_replica`` is the HPA/KEDA
    ``AverageValue`` threshold: capacity at the latency objective less the class's headroom.
    ``activation_threshold`` wakes a scaled-to-zero workload (KEDA: active iff value > threshold).
    ``waiting_per_replica`` is the second trigger's ``AverageValue`` on requests waiting: the finished-request
    rate stops at the capacity being served, so on it alone an overloaded service grows by only
    1 / (1 - headroom) per sync (not at all with no headroom).
    """

    metric: str
    per_replica_capacity: float
    target_per_replica: float
    min_replicas: int
    max_replicas: int
    # for the forecast peak over the horizon (or observed peak without one): the reports' peak_replicas, what the
    # controller sets spec.replicas to where no autoscaler owns them (the allocation's replicas stay today's)
    recommended_replicas: int
    activation_threshold: float
    cooldown_s: int
    scale_to_zero: bool
    headroom_frac: float
    cold_start_s: float | None
    reasons: tuple[str, ...] = ()
    capacity_source: str = "measured"  # measured | configured | lower bound | model card
    mean_replicas: float | None = None  # what the autoscaler would have held on average over the window
    # the same on the recommended shape, its capacity per replica scaled by the compute it holds (an estimate)
    mean_replicas_right_sized: float | None = None
    waiting_per_replica: float | None = None  # requests waiting per replica: target x the TTFT objective
    rate_window_s: int = 120  # rate() window of the request-rate trigger's query (ScalingSettings.rate_window_s)
    # what the bounds were sized on: "forecast" (its band, which the external scaler serves ahead) or "observed"
    # (no forecast, or one on too little history to act on: the scaler then serves the recommended replicas)
    demand_source: str = "forecast"
    # requests/s per replica on the shape the capacity was read on (today's; what carries to the next cycle);
    # per_replica_capacity = basis_capacity x capacity_scale, the compute one replica holds on the recommended
    # shape over today's (1: the same shape or compute, or no recommendation; under 1: an estimate, not measured)
    basis_capacity: float | None = None
    capacity_scale: float = 1.0
    shape: str | None = None  # the shape the bounds and thresholds are for ("mig 4g.40gb"), None: today's
    # the TTFT objective (s) and the share of requests that may exceed it: the objective trigger steps up on misses
    ttft_objective_s: float | None = None
    ttft_error_budget: float | None = None
    # the HPA's scale-down stabilisation window (s) the request rate asks for (policies/replicas/hold.py); None:
    # the default one (policies.autoscalerobjects.scale_down_window_s)
    scale_down_window_s: int | None = None
    # the same plan on today's shape where this one is estimated for another: what an autoscaler should follow
    # while the replicas keep today's shape (a policy that allows replicas but not the shape change)
    on_today: ScalingPlan | None = field(default=None, repr=False)

    @property
    def measured_capacity(self) -> float:
        """Requests/s per replica on today's shape: what a later cycle or a restart may carry forward."""
        return self.per_replica_capacity if self.basis_capacity is None else self.basis_capacity

    @property
    def mean_on_shape(self) -> float | None:
        """Mean replicas under this plan on the shape it is for (the recommended one where it has a figure)."""
        return self.mean_replicas if self.mean_replicas_right_sized is None else self.mean_replicas_right_sized

    @property
    def capacity_estimated(self) -> bool:
        """Whether the capacity is scaled from another shape's rather than read on the one it is for."""
        return self.capacity_scale != 1.0


@dataclass(frozen=True)
class PrometheusAddress:
    """The Prometheus URL the generated autoscaler triggers read, credentials stripped, and where it came from."""

    url: str
    source: str
    needs_auth: bool = False  # credentials were given to the report: KEDA needs a TriggerAuthentication


PLACEHOLDER_PROMETHEUS = PrometheusAddress(
    "http://prometheus.invalid:9090", "placeholder: no Prometheus URL given (set scaling.keda_prometheus_url)")


@dataclass(frozen=True)
class NodeMigPlan:
    """One node's MIG layout after the change: per-GPU devices, the mig-parted config and label."""

    node: str
    gpu_model: str
    gpus_total: int  # GPUs on the node (or needed, for a node not yet known)
    layouts: tuple[Mapping[str, int], ...]  # {profile: count} per GPU index, in index order
    workloads: tuple[str, ...]  # WorkloadRef keys whose slices sit here
    config_name: str  # mig-parted config name, value of the nvidia.com/mig.config label
    reconfigured_gpus: int  # GPUs whose layout changes (each evicts its pods: a maintenance step)
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeDevicePluginPlan:
    """One node's device-plugin sharing after the change: the named config its label should select, and why.

    ``current`` describes the node's config today (``unknown`` where it cannot be read); ``changed`` says the
    label must change (the config's content differs from today's or the node's label names another config).
    """

    node: str
    gpu_model: str
    gpus_total: int
    current_config: str | None  # nvidia.com/device-plugin.config today (None: unset, the default config)
    current: str  # what today's config shares, in words ("time-slicing ×4", "no sharing", "unknown")
    config_name: str  # the config to select: the label's new value
    strategy: str  # none | time-slicing | mps
    replicas: int  # nvidia.com/gpu replicas per GPU (1: not shared)
    workloads: tuple[str, ...]  # WorkloadRef keys that share this node's GPUs
    changed: bool
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class DevicePluginPlan:
    """The NVIDIA device plugin's ConfigMap of named configs (one key per node pool: GPU model and sharing) and
    the node label that selects each (reference.md §3)."""

    namespace: str
    configmap: str
    configs: Mapping[str, Mapping[str, Any]]  # config name → its version: v1 document
    nodes: tuple[NodeDevicePluginPlan, ...]
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Recommendation:
    """What one workload should get instead, why, and what that saves.

    ``recommended`` is None when no recommendation can be made; ``reasons`` then says why.
    """

    workload: Workload
    recommended: Allocation | None
    reasons: tuple[str, ...]
    confidence: float  # 0-1: history length x coverage x usable data x memory band (policies.estimators.confidence)
    memory_need_mib: Bound | None = None  # per device
    compute_need_frac: Bound | None = None  # share of one whole GPU's SMs
    gpus_held: float = 0.0  # gpu-equivalents held today (all replicas)
    gpus_needed: float = 0.0  # gpu-equivalents needed after the change (all replicas)
    monthly_savings_usd: float | None = None
    risk: str = "low"  # low | medium | high: what could go wrong if applied
    history_s: float = 0.0  # how much usable history backed it
    classification: Classification | None = None
    forecasts: tuple[Forecast, ...] = ()
    scaling: ScalingPlan | None = None
    mechanism: str | None = None  # chosen sharing mechanism (a Sharing value), with why in reasons
    # made on less history than policy.min_history_s (down to provisional_min_history_s): shown, never applied by Auto
    provisional: bool = False
    risk_reasons: tuple[str, ...] = ()  # why ``risk`` is what it is, in words (set where risk is decided)
    advice: Advice = field(default_factory=Advice)  # shown beyond the numbers (recommender.pipeline.advice)

    @property
    def ref(self) -> WorkloadRef:
        return self.workload.ref

    @property
    def actionable(self) -> bool:
        return self.recommended is not None

    @property
    def gpus_right_sized_autoscaled(self) -> float | None:
        """GPU-equivalents the recommended shape's replicas would hold on average under the scaling plan, None
        without a mean there."""
        mean = self.scaling.mean_replicas_right_sized if self.scaling is not None else None
        if mean is None or self.recommended is None:
            return None
        return self.recommended.gpu_equivalents * mean

    @property
    def gpus_right_sized_autoscaled_or_needed(self) -> float:
        """What the workload counts in the fleet's right-sized and autoscaled figure: its mean on the recommended
        shape, else its GPUs needed (held where there is no recommendation)."""
        gpus = self.gpus_right_sized_autoscaled
        return self.gpus_needed if gpus is None else gpus


@dataclass(frozen=True)
class Summary:
    workloads: int
    with_recommendation: int
    gpus_held: float
    gpus_needed: float  # sum of recommended gpu-equivalents
    gpus_needed_packed: int | None  # whole GPUs after packing recommended slices, when computed
    monthly_savings_usd: float
    gpu_hours_held: float  # over the analysed window
    gpu_hours_needed: float
    gpu_hours_autoscaled: float | None = None  # held, with today's replicas autoscaled by their scaling plans
    autoscaled_workloads: int = 0  # workloads whose scaling plan has a mean replica count
    # needed, with the recommended shape's replicas autoscaled where a plan estimates them (the rest as needed)
    gpu_hours_right_sized_autoscaled: float | None = None
    right_sized_autoscaled_workloads: int = 0  # workloads whose plan has a mean on the recommended shape


@dataclass(frozen=True)
class Plan:
    """The pipeline's output: every workload's recommendation plus a fleet summary."""

    generated_at: datetime
    window_start: datetime
    window_end: datetime
    step_s: float
    recommendations: tuple[Recommendation, ...]
    summary: Summary
    warnings: tuple[str, ...] = ()
    timings_s: Mapping[str, float] = field(default_factory=dict)
    source: str = "unknown"
    mig_nodes: tuple[NodeMigPlan, ...] = ()
    mig_parted_config: Mapping[str, Any] = field(default_factory=dict)  # version: v1 document
    autoscaler_prometheus: PrometheusAddress = PLACEHOLDER_PROMETHEUS  # what KEDA triggers read
    device_plugin: DevicePluginPlan | None = None  # None: no node shares, or could share, its GPUs through the plugin
