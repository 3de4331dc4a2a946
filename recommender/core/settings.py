"""One settings object, built from groups and passed explicitly (never a global).

Field descriptions double as CLI help and as the settings page in the README.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from recommender.core.settings_scaling import ScalingSettings
from recommender.core.settings_sources import KubernetesSettings, PrometheusSettings
from recommender.core.settings_tenancy import TenancySettings

DAY_S = 86_400.0
MECHANISMS = ("mig", "mps", "time-slicing", "exclusive", "hami", "kai", "volcano-vgpu", "runai")
FRACTION_BACKENDS = ("mps", "dra", "hami", "kai", "volcano-vgpu", "runai")


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
    reselect_s: float = Field(
        3600.0, ge=0, description="A caller that carries the model choice from one forecast of a series to the "
        "next (forecast_with_choice) chooses the model by backtest at most this often, seconds, and only refits "
        "the chosen one in between (0: every time). The controller carries each workload's choices from one cycle "
        "to the next; a one-shot report has no earlier choice and always chooses."
    )
    fork_within_mib: float | None = Field(
        1024.0, gt=0, description="A one-shot report makes its forecasts beside a forked copy of itself only where "
        "twice its resident memory at the fork fits within this, MiB (the copy may come to own every page it "
        "shares); null: wherever there is a second core. The report's client memory budget."
    )

    @field_validator("levels")
    @classmethod
    def _levels(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if not v or any(not 0 < x < 100 for x in v):
            raise ValueError("levels are percentages between 0 and 100")
        return tuple(sorted(set(v)))


class MechanismSettings(BaseModel):
    """Which GPU sharing mechanisms may be recommended, cluster-wide and per namespace.

    Per workload, the annotations ``rightsizer.io/mechanisms`` (allowed, comma-separated) and
    ``rightsizer.io/mechanism`` (required) narrow this further.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")  # a misspelt key in a settings file is an error

    allowed: tuple[str, ...] = Field(
        ("mig", "mps", "time-slicing", "exclusive", "hami", "kai", "volcano-vgpu", "runai"),
        description="Mechanisms that may be recommended (runai: recommended only, never applied)."
    )
    by_namespace: dict[str, tuple[str, ...]] = Field(
        default_factory=dict, description="Namespace → the mechanisms allowed there (narrows 'allowed')."
    )
    fraction_backend: str = Field(
        "mps", description="How the cluster hands out GPU fractions: mps (device plugin), dra, hami, kai, "
        "volcano-vgpu or runai. A workload on Volcano vGPU or Run:ai fractions keeps its own scheduler."
    )
    memory_seen: dict[str, str] = Field(
        default_factory=lambda: {"mps": "limit", "dra": "limit", "hami": "limit", "kai": "device",
                                 "volcano-vgpu": "limit", "runai": "device"},
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
    tenancy: TenancySettings = Field(
        default_factory=TenancySettings, description="Which workloads may share one GPU through a mechanism that "
        "isolates neither memory nor faults (MPS, time-slicing, HAMi, KAI): by default, those of one namespace."
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
