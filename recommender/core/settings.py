"""One settings object, built from groups and passed explicitly (never a global).

Field descriptions double as CLI help and as the settings page in the README.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

DAY_S = 86_400.0
MECHANISMS = ("mig", "mps", "time-slicing", "exclusive", "hami", "kai")
FRACTION_BACKENDS = ("mps", "dra", "hami", "kai")


class PrometheusSettings(BaseModel):
    """How to reach a Prometheus-compatible API and how hard we may query it."""

    model_config = ConfigDict(frozen=True, extra="forbid")  # a misspelt key in a settings file is an error

    url: str | None = Field(None, description="Base URL of Prometheus, Thanos, Mimir or VictoriaMetrics.")
    bearer_token: str | None = Field(None, repr=False, description="Bearer token sent as Authorization header.")
    username: str | None = Field(None, description="Basic-auth user.")
    password: str | None = Field(None, repr=False, description="Basic-auth password (or user:pass@ in the URL).")
    ca_file: str | None = Field(None, description="CA bundle to verify the server's TLS certificate.")
    client_cert: str | None = Field(None, description="Client certificate (PEM) for mutual TLS.")
    client_key: str | None = Field(None, description="Client key (PEM) for mutual TLS.")
    insecure_skip_verify: bool = Field(False, description="Do not verify TLS (testing only).")
    headers: dict[str, str] = Field(default_factory=dict, description="Extra HTTP headers (e.g. X-Scope-OrgID).")
    timeout_s: float = Field(60.0, gt=0, description="Timeout of one HTTP request, seconds.")
    retries: int = Field(3, ge=0, description="Retries with exponential backoff on transient errors.")
    max_workers: int = Field(4, ge=1, le=32, description="Queries in flight at once (bounded pool).")
    max_points_per_series: int = Field(
        11_000, ge=100, le=11_000, description="Points per series per query; ranges are chunked below it."
    )
    max_samples_per_query: int = Field(
        20_000_000, ge=10_000, description="Samples one query may touch; kept well under query.max-samples."
    )
    max_points_per_query: int = Field(
        500_000, ge=1_000, description="Points one answer may hold in all; bounds memory while it is parsed."
    )
    target_points: int = Field(
        2_016, ge=50, le=100_000, description="Points per series over the whole history; sets the step (≥ 60 s)."
    )
    min_step_s: float = Field(60.0, gt=0, description="Smallest step: the usual scrape interval.")
    namespace_label: str = Field("namespace", description="Label that holds the pod's namespace.")

    @model_validator(mode="before")
    @classmethod
    def _credentials_out_of_the_url(cls, data: Any) -> Any:
        """``http://user:pass@host`` → ``url`` without them, ``username``/``password`` set (where not given): the
        URL is shown in errors, logs, reports and snapshots, the credentials never are."""
        if not isinstance(data, dict) or not isinstance(data.get("url"), str):
            return data
        parts = urlsplit(data["url"])
        if "@" not in parts.netloc:
            return data
        user, _, password = parts.netloc.rpartition("@")[0].partition(":")
        out = {**data, "url": urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))}
        if user and not data.get("username"):
            out["username"] = unquote(user)
        if password and not data.get("password"):
            out["password"] = unquote(password)
        return out
    pod_label: str = Field("pod", description="Label that holds the pod name.")
    node_labels: tuple[str, ...] = Field(
        ("Hostname", "hostname"),
        description="DCGM labels that may hold the GPU's node, first present wins: dcgm-exporter's Helm chart "
                    "and the GPU operator set it from NODE_NAME. Used for per-node MIG plans when the "
                    "Kubernetes API is not.",
    )
    extra_selector: str = Field("", description='Extra label matchers added to every query, e.g. cluster="a".')


class KubernetesSettings(BaseModel):
    """Where the workload inventory comes from when a cluster is reachable."""

    model_config = ConfigDict(frozen=True, extra="forbid")  # a misspelt key in a settings file is an error

    enabled: bool = Field(True, description="Read workloads from the Kubernetes API when reachable.")
    kubeconfig: str | None = Field(None, description="Path to a kubeconfig; default: in-cluster, then ~/.kube.")
    context: str | None = Field(None, description="kubeconfig context to use.")
    host: str | None = Field(None, description="API server URL (overrides kubeconfig; for tests).")
    timeout_s: float = Field(30.0, gt=0, description="Timeout of one API call, seconds.")


class PolicySettings(BaseModel):
    """Knobs of the sizing policies. Percentiles are of the per-step series over the history."""

    model_config = ConfigDict(frozen=True, extra="forbid")  # a misspelt key in a settings file is an error

    memory_percentile: float = Field(0.99, gt=0, le=1, description="Percentile of memory in use sized for.")
    memory_margin_frac: float = Field(0.15, ge=0, le=1, description="Safety margin added to memory need.")
    compute_percentile: float = Field(0.95, gt=0, le=1, description="Percentile of engine activity sized for.")
    compute_margin_frac: float = Field(0.20, ge=0, le=2, description="Safety margin added to compute need.")
    min_history_s: float = Field(
        DAY_S, ge=0, description="Usable history a firm recommendation needs. With less, down to "
        "provisional_min_history_s, the recommendation is provisional; the idle rule (scale to zero) needs all of it."
    )
    provisional_min_history_s: float = Field(
        6 * 3600, ge=0, description="Usable history below which there is no recommendation. From here to "
        "min_history_s one is made and marked provisional: upper bounds widened for the short history (x5 at 6 h, "
        "the widening of policies.estimators.confidence_multiplier), confidence low, never applied by the "
        "controller's Auto mode. Under a quarter of a day even that bound says little of a daily pattern."
    )
    full_confidence_history_s: float = Field(7 * DAY_S, gt=0, description="History that earns full confidence.")
    min_usable_frac: float = Field(
        0.5, ge=0, le=1, description="Less than this share of a sizing metric's samples within physical bounds "
        "(recommender/data/bounds.yaml): no recommendation."
    )
    vllm_max_gpu_memory_utilization: float = Field(
        0.95, gt=0, le=1, description="Never recommend a vLLM memory fraction above this."
    )
    vllm_min_gpu_memory_utilization: float = Field(
        0.10, gt=0, le=1, description="Never recommend a vLLM memory fraction below this."
    )
    idle_compute_frac: float = Field(0.01, ge=0, description="Engine activity at or below this counts as idle.")
    allow_mig: bool = Field(True, description="Recommend MIG slices where the GPU model supports them.")
    catalogue_override: str | None = Field(
        None, description="YAML file that overrides or extends the GPU catalogue (policies/data/gpus.yaml)."
    )
    models_override: str | None = Field(
        None, description="YAML file that overrides or extends the model catalogue (policies/data/models.yaml)."
    )


class ForecastSettings(BaseModel):
    """Demand forecasts per workload (request rate, token throughput, KV tokens in use)."""

    model_config = ConfigDict(frozen=True, extra="forbid")  # a misspelt key in a settings file is an error

    enabled: bool = Field(True, description="Forecast each workload's demand (off: classes only).")
    horizon_s: float = Field(DAY_S, gt=0, description="How far ahead to forecast, seconds.")
    levels: tuple[int, ...] = Field((80, 95), description="Prediction-interval levels, percent.")
    max_workloads: int = Field(
        100, ge=0, description="Forecast at most this many workloads, those holding the most GPUs first "
        "(about 50 ms a series: large fleets would otherwise wait minutes)."
    )

    @field_validator("levels")
    @classmethod
    def _levels(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if not v or any(not 0 < x < 100 for x in v):
            raise ValueError("levels are percentages between 0 and 100")
        return tuple(sorted(set(v)))


class ScalingSettings(BaseModel):
    """Replicas, scale-to-zero and the KEDA/HPA parameters derived from them."""

    model_config = ConfigDict(frozen=True, extra="forbid")  # a misspelt key in a settings file is an error

    headroom_frac: dict[str, float] = Field(
        default_factory=lambda: {"real-time": 0.30, "near-real-time": 0.15, "batch": 0.0},
        description="Capacity kept free per replica, by workload class.",
    )
    ttft_error_budget: float = Field(
        0.01, gt=0, lt=1, description="Share of recent steps with requests whose p95 TTFT may exceed the objective "
        "before a class's headroom rises (error_budget_window_s, headroom_step_frac, max_headroom_frac)."
    )
    error_budget_window_s: float = Field(
        86_400, gt=0, description="Recent history whose TTFT misses are set against the error budget."
    )
    fast_budget_window_s: float | None = Field(
        3_600, gt=0, description="A short window whose share of missed steps is also set against the error budget "
        "(the worst such window of the last fast_budget_hold_s), so headroom rises within a burst, not once its "
        "misses weigh in error_budget_window_s. Every miss counts there, those above a capacity read from history "
        "too: in a burst they are the jumps headroom absorbs. Widened to 10 steps where it holds fewer (a 14-day "
        "report's 600 s steps) (null: none)."
    )
    fast_budget_hold_s: float = Field(
        21_600, gt=0, description="How long the worst fast_budget_window_s keeps headroom raised: bursts come in "
        "episodes (a burst day) that outlast one window."
    )
    fast_budget_min_missed: int = Field(
        2, ge=1, description="Missed steps a fast_budget_window_s must hold to count: at 60 s steps one stray "
        "minute is 1.7% of an hour, over a 1% budget on its own, where a burst misses several."
    )
    headroom_step_frac: float = Field(
        0.1, ge=0, lt=1, description="Headroom added per doubling of the missed steps' share over the error budget."
    )
    max_headroom_frac: float = Field(
        0.6, ge=0, lt=1, description="Most headroom the error budget may raise a class to."
    )
    whole_gpu_over_budget: float | None = Field(
        2.0, gt=0, description="A real-time or near-real-time service whose requests over the TTFT objective in the "
        "last error_budget_window_s exceed this many times ttft_error_budget is given whole GPUs, not a slice or "
        "share: headroom has not kept it within the objective there (null: never)."
    )
    ttft_objective_s: float = Field(
        2.0, gt=0, description="TTFT objective when a workload has no rightsizer.io/ttft-slo-seconds annotation."
    )
    default_cold_start_s: float = Field(
        180.0, gt=0, description="Pod start → ready when not measured (image pull + weights load + warm-up)."
    )
    scale_to_zero_idle_multiple: float = Field(
        10.0, ge=1, description="Scale to zero only where typical idle gaps are this many cold starts long."
    )
    max_replicas: int = Field(100, ge=1, description="Never recommend more replicas than this.")
    no_forecast_floor_window_s: float = Field(
        6 * 3600, gt=0, description="Without a forecast, real-time's minReplicaCount covers the peak of this much "
        "recent history: an older peak holds idle replicas long after its burst, the quietest step lets bursts in "
        "(benchmarks/REPLAY.md § Measurements behind the defaults)."
    )
    min_forecast_history_s: float = Field(
        2 * 86_400, ge=0, description="Request-rate history a forecast must stand on before replicas follow it: "
        "on less, forecast_series widens its band (up to x5) for the daily season it cannot see yet, and replicas "
        "following that band hold more GPU-hours and start more pods than sizing on the observed rate "
        "(benchmarks/REPLAY.md § Measurements behind the defaults). Until then a plan sizes on the observed rate "
        "(no_forecast_floor_window_s) and the external scaler serves its recommended replicas; the report "
        "still shows the forecast."
    )
    polling_interval_s: int = Field(30, ge=1, description="KEDA pollingInterval the parameters assume.")
    keda_prometheus_url: str | None = Field(
        None, description="Prometheus URL the generated KEDA triggers read, as seen from inside the cluster "
        "(null: the URL the report read, prometheus.url). Credentials in it are dropped: KEDA takes them from a "
        "TriggerAuthentication."
    )
    rate_window_s: int = Field(
        120, ge=1, description="Window of rate() in the KEDA request-rate trigger. rate() needs two samples in it: "
        "at a 60 s scrape (prometheus.min_step_s) a [1m] window returns nothing and the trigger reads 0. "
        "Shorter with a faster scrape follows a jump sooner (the waiting trigger follows it at once)."
    )
    scale_to_zero_classes: tuple[str, ...] = Field(
        ("batch",), description="Classes that may scale to zero (a request arriving at zero waits a cold start)."
    )
    wake_budget_frac: float | None = Field(
        None, ge=0, le=1, description="Opt-in: the other classes may scale to zero too where, in the history, the "
        "requests that arrived within a wake (polling_interval_s + cold start) of the end of each idle gap longer "
        "than the cooldown were at most this share of ttft_error_budget (0.5: half of it): each of them would have "
        "waited a cold start; only once a request-rate forecast exists (the activation reads it) and over "
        "wake_min_history_s of history. Needs something that holds requests at zero and activates the workload "
        "(KEDA's HTTP add-on, a gateway's metric): null (the default) where nothing does."
    )
    wake_min_history_s: float = Field(
        2 * 86_400, ge=0, description="Request history needed before wake_budget_frac weighs a latency-bound "
        "class's wakes: a daily pattern of gaps seen twice, the history a forecast needs for its daily season "
        "unwidened. On a few hours one or two gaps would decide."
    )
    replica_capacity_rps: float | None = Field(
        None, gt=0, description="Requests/s one replica serves at the TTFT objective when neither measured "
        "nor annotated (rightsizer.io/replica-capacity)."
    )
    capacity_from_history: bool = Field(
        True, description="Measure per-replica capacity from history: the knee, the rate per replica from which "
        "the objective is more often missed than not (a configured figure within the knee's bracket is kept). "
        "Off where only the configured figure is to be trusted."
    )
    capacity_quantile: float = Field(
        0.95, gt=0, le=1, description="Quantile of the per-replica request rate, over steps that met the "
        "TTFT objective with nothing waiting, taken as a lower bound on capacity where history shows no knee."
    )
    min_capacity_steps: int = Field(
        30, ge=1, description="Steps that met the objective needed before capacity counts as measured."
    )
    min_knee_steps: int = Field(
        5, ge=1, description="Missed steps at or above the knee needed before history locates it (the rate "
        "per replica from which the objective is more often missed than not): one or two misses at the busiest "
        "steps locate nothing."
    )
    max_burst_frac: float = Field(
        2.0, ge=0, description="maxReplicaCount = replicas for the larger of forecast and observed peak x (1 + this). "
        "The ceiling only bounds a runaway (a metric gone wrong): the HPA never scales above demand, so a loose "
        "one costs nothing, while a tight one queues the first burst above last week's peak "
        "(benchmarks/REPLAY.md § Measurements behind the defaults)."
    )
    max_bound_history_s: float = Field(
        7 * 86_400, ge=0, description="History needed before maxReplicaCount is bounded by the peak; with less, "
        "it stays at max_replicas (a max from a short history turns the first larger burst into a queue)."
    )

    def cold_start_s(self, measured: float | None) -> float:
        """Pod start → ready: the workload's measured figure, else ``default_cold_start_s``."""
        return measured or self.default_cold_start_s

    def wake_s(self, cold_start_s: float | None) -> float:
        """How long a wake from zero keeps a request waiting at most: KEDA's poll, then the cold start
        (:meth:`cold_start_s`). The error budget and the whole-GPU bar leave these steps out; the wake budget
        charges them."""
        return self.polling_interval_s + self.cold_start_s(cold_start_s)


class MechanismSettings(BaseModel):
    """Which GPU sharing mechanisms may be recommended, cluster-wide and per namespace.

    Per workload, the annotations ``rightsizer.io/mechanisms`` (allowed, comma-separated) and
    ``rightsizer.io/mechanism`` (required) narrow this further.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")  # a misspelt key in a settings file is an error

    allowed: tuple[str, ...] = Field(
        ("mig", "mps", "time-slicing", "exclusive", "hami", "kai"), description="Mechanisms that may be recommended."
    )
    by_namespace: dict[str, tuple[str, ...]] = Field(
        default_factory=dict, description="Namespace → the mechanisms allowed there (narrows 'allowed')."
    )
    fraction_backend: str = Field(
        "mps", description="How the cluster hands out GPU fractions: mps (device plugin), dra, hami or kai."
    )
    memory_seen: dict[str, str] = Field(
        default_factory=lambda: {"mps": "limit", "dra": "limit", "hami": "limit", "kai": "device"},
        description="Per fraction backend, the memory a process sees: 'limit' (its share) or 'device' (the "
        "whole GPU). Sets what vLLM's --gpu-memory-utilization is a fraction of. Unverified for MPS/DRA "
        "(reference.md §9.2 marks it inferred); KAI enforces nothing, so the process sees the device.",
    )
    mps_max_clients: int = Field(48, ge=1, description="MPS clients per GPU (reference.md §4).")
    exclusive_node_selector: dict[str, str] = Field(
        default_factory=lambda: {"nvidia.com/gpu.sharing-strategy": "none"},
        description="Labels of the nodes whose device plugin shares no GPU (GPU feature discovery writes "
        "nvidia.com/gpu.sharing-strategy, reference.md §3): Auto moves a workload off MPS or time-slicing to whole "
        "GPUs by adding them to its node selector, once a node with them has the GPUs free. Empty: such moves "
        "are recommended, never applied.",
    )

    @field_validator("allowed")
    @classmethod
    def _known(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [x for x in v if x not in MECHANISMS]
        if bad:
            raise ValueError(f"unknown mechanism(s) {', '.join(bad)}; known: {', '.join(MECHANISMS)}")
        return v

    @field_validator("fraction_backend")
    @classmethod
    def _backend(cls, v: str) -> str:
        if v not in FRACTION_BACKENDS:
            raise ValueError(f"unknown fraction backend {v!r}; known: {', '.join(FRACTION_BACKENDS)}")
        return v


class PriceSettings(BaseModel):
    """Money: what one GPU-hour costs, by canonical GPU model."""

    model_config = ConfigDict(frozen=True, extra="forbid")  # a misspelt key in a settings file is an error

    usd_per_gpu_hour: dict[str, float] = Field(
        default_factory=lambda: {
            "default": 2.50,
            "A30": 0.90,
            "A100-40GB": 1.80,
            "A100-80GB": 2.20,
            "H100-80GB": 3.50,
            "H100-94GB": 3.80,
            "H100-96GB": 3.90,
            "H200-141GB": 4.50,
            "B200-180GB": 6.00,
        },
        description="USD per GPU-hour by GPU model; 'default' for the rest. Illustrative list prices.",
    )
    hours_per_month: float = Field(730.0, gt=0, description="Hours in a month for monthly figures.")

    @field_validator("usd_per_gpu_hour")
    @classmethod
    def _non_negative(cls, v: dict[str, float]) -> dict[str, float]:
        bad = [k for k, p in v.items() if not p >= 0]
        if bad:
            raise ValueError(f"prices must be >= 0: {', '.join(bad)}")
        if "default" not in v:  # a table replaces the built-in one whole: unlisted models would cost nothing
            raise ValueError("needs a 'default' price for the GPU models it does not list")
        return v

    def price(self, gpu_model: str | None) -> float:
        return self.usd_per_gpu_hour.get(gpu_model or "", self.usd_per_gpu_hour.get("default", 0.0))


class Settings(BaseModel):
    """All settings of one run."""

    model_config = ConfigDict(frozen=True, extra="forbid")  # a misspelt key in a settings file is an error

    namespaces: tuple[str, ...] = Field((), description="Namespaces to analyse; empty = all.")
    history_s: float = Field(14 * DAY_S, gt=0, le=366 * DAY_S,
                             description="How far back to read usage, seconds (at most a year).")
    prometheus: PrometheusSettings = Field(default_factory=PrometheusSettings)
    kubernetes: KubernetesSettings = Field(default_factory=KubernetesSettings)
    policy: PolicySettings = Field(default_factory=PolicySettings)
    forecast: ForecastSettings = Field(default_factory=ForecastSettings)
    scaling: ScalingSettings = Field(default_factory=ScalingSettings)
    mechanisms: MechanismSettings = Field(default_factory=MechanismSettings)
    prices: PriceSettings = Field(default_factory=PriceSettings)
