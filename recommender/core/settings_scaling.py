"""Settings of the replica policy: headroom by class and the TTFT error budget that raises it, measured
capacity per replica, when a forecast is trusted, scale to zero and the KEDA/HPA parameters derived from them.
A group of ``recommender.core.settings.Settings``; the measurements behind its defaults are in
``benchmarks/REPLAY.md`` (Measurements behind the defaults).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from recommender.core.usage import VLLM_TTFT_BUCKETS_S


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
    count_rescued_steps: bool = Field(
        False, description="Opt-in: steps the fast loop rescued (within rate_window_s and two cold starts of a missed "
        "step, the objective met on more serving replicas than it had, at no lower request rate) count as missed in "
        "the error budget and are left out of the capacity at the knee, so the slow loop does not relax while the "
        "objective trigger does its work. Off by default; the replay figures behind that are in benchmarks/REPLAY.md "
        "(Closed loop)."
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
        2.0, ge=VLLM_TTFT_BUCKETS_S[0],  # under vLLM's first TTFT bucket every request would count as over it
        description="TTFT objective when a workload has no rightsizer.io/ttft-slo-seconds annotation."
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
    burst_floor_budget_frac: float | None = Field(
        None, ge=0, le=1, description="Opt-in: keep at least the replicas that would have left at most this share "
        "of ttft_error_budget's requests (0.5: half of it) in steps the autoscaler, sized on the rate one wake "
        "(polling_interval_s + cold start) earlier, could not serve at the objective: bursts from idle that no "
        "replica started after them serves in time. Read from the request rate, not the misses, so the floor it "
        "keeps does not take itself away. Latency-bound classes that do not scale to zero; null: off."
    )
    scale_down_hold_budget_frac: float | None = Field(
        0.5, ge=0, le=1, description="Hold the replicas through a scale-down window (the HPA's scaleDown "
        "stabilizationWindowSeconds) longer than one cold start, up to 3600 s, where the request rate shows load "
        "returning after short gaps: the shortest window whose steps an autoscaler holding that long, sized on the "
        "rate one wake (polling_interval_s + cold start) earlier, could not serve at the objective are within this "
        "share of ttft_error_budget's requests (0.5: half of it) of the longest window's. Read from the request "
        "rate, not the misses, so the hold does not take itself away. Latency-bound classes; null: one cold start."
    )
    scale_down_hold_reads_band: bool = Field(
        False, description="Read the scale-down hold against the forecast band the plan acts on: each step's ask on "
        "the rate plus the least the band lies above its mean over the horizon, so the hold covers only the misses "
        "that band would leave; not read while the history shows the objective missed after a scale-in on more than "
        "scale_down_hold_budget_frac x ttft_error_budget of its requests (opt-in; off: the rate alone)."
    )
    recurring_floor_interval_s: float | None = Field(
        None, gt=0, description="Keep, until the next plan (this many seconds) and a wake (polling_interval_s + cold "
        "start) after it, the replicas for the request rate seen over that stretch at this time of day on at least "
        "two of the last seven days: a rise from idle that recurs daily, which no causal step serves and a forecast "
        "may smooth away. Latency-bound classes that do not scale to zero. The controller, which plans again each "
        "interval, sets its interval here unless this is given (null: off); a report makes one plan and keeps none."
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
        "The ceiling bounds a runaway (a metric gone wrong) and what a queue asks for while new pods start: the "
        "waiting trigger asks for more as the backlog grows through a cold start, so a loose ceiling can hold more "
        "replicas than the burst needs until the scale-down window ends; a tight one queues the first burst above "
        "last week's peak (benchmarks/REPLAY.md § Measurements behind the defaults)."
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
