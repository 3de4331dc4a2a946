"""``ours`` in the replay: the product's replica policy (``policies.replicas.scaling_plan``) refitted on the
history so far every refit period and applied at every HPA sync through the triggers the plan publishes
(forecast band, arrival rate, waiting requests, and the objective being missed: the replicas that served
through the last rate window x (1 + the share of its requests over the TTFT objective), while over the error
budget), the HPA honouring the ``behavior`` the product emits (``policies.autoscalerobjects.hpa_behavior``,
through ``replay_hpa.hpa_behave``), with scale to zero where the plan allows it and the move from a MIG slice
to whole GPUs where the right-size policy would make it.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import replace

import numpy as np
import pandas as pd
from replay_capacity import Capacity
from replay_hpa import KEDA_POLL_S, KEDA_WAITING_TARGET, HpaMemory, hpa_behave, hpa_proposal
from replay_sim import Observed

from policies.autoscalerobjects import QUEUED_S
from policies.mig import missed_too_often
from policies.replicas import (
    BAND_BY_CLASS,
    NoScalingPlan,
    ReplicaHistory,
    hpa_behavior,
    scaling_plan,
)
from recommender.analysis.features import after_zero
from recommender.analysis.forecast import ModelChoice, NotEnoughHistory, forecast_with_choice
from recommender.core.annotations import CAPACITY_ANNOTATION
from recommender.core.inventory import Allocation, Sharing, Workload, WorkloadRef
from recommender.core.plan import Classification, ScalingPlan, WorkloadClass
from recommender.core.settings import ForecastSettings, PolicySettings
from recommender.core.settings_scaling import ScalingSettings
from recommender.core.usage import within_objective


class Ours:
    """The product's replica policy, refitted on the past every ``refit_s`` and applied every 15 s; its forecast
    model chosen by backtest at most every ``reselect_s`` (``forecast.reselect_s``; 0: at every refit). Once it
    moves to ``whole`` GPUs, its cap (``scaling.max_replicas``) becomes ``whole_max`` where given: the cap in
    the slice's count would let it hold more whole GPUs than static peak does."""

    def __init__(self, cap: Capacity, cls: WorkloadClass, refit_s: int, settings: ScalingSettings,
                 bin_s: int = 60, history_s: int = 7 * 86_400, whole: Capacity | None = None,
                 reselect_s: float = ForecastSettings().reselect_s, whole_max: int | None = None) -> None:
        self.cap, self.cls, self.refit_s, self.settings = cap, cls, refit_s, settings
        self.reselect_s = reselect_s
        self.choice: ModelChoice | None = None  # the forecast model last chosen by backtest
        self.whole = whole  # the whole GPU a slice gives way to (policies.mig.missed_too_often); None: no change
        self.whole_max = whole_max  # scaling.max_replicas once on whole GPUs; None: the slice's stays
        self.escalated_s: float | None = None
        self.bin_s, self.history_s = bin_s, history_s
        self.plan: ScalingPlan | None = None
        self.band = np.array([0.0])
        self.band_start = 0
        self.next_refit = 0
        self.hpa = HpaMemory()  # the HPA controller's recommendations and scale events
        self.window_lo = 0  # the first served request whose first token came within the objective trigger's window
        self.serving_at: dict[int, int] = {}  # serving replicas at each recent sync (second -> count)
        self.last_arrival = -10**9
        self.refits = 0
        self.pending_served = 0
        self.max_ttft_s, self.max_ttft_n = 0.0, 0  # longest TTFT of the first n served (_served_from)
        self.token_n = 0  # tokens in and out of the first token_n arrived, summed (_token_means); None: not whole
        self.token_sums: tuple[float, float] | None = (0.0, 0.0)
        self.ttft_p95 = np.array([])  # per step, by first-token time: what the TTFT histogram gives
        self.pending = pd.DataFrame({"step": np.array([], dtype=np.int64), "ttft": np.array([])})
        self.ready_sum = np.zeros(0)  # ready replicas summed over the syncs of each step, and their count
        self.ready_n = np.zeros(0)
        self.pods_sum = np.zeros(0)  # pods (starting or ready) summed likewise: kube-state-metrics' count
        self.asks: dict[str, int] = {}  # the last sync's proposal of each trigger but the objective's (replay_window)

    @property
    def shape_since(self) -> pd.Timestamp | None:
        """When the pool took its current shape (the move's start, as its ReplicaSet's creation): the knee and
        the error budget read from here on (``Workload.shape_since``)."""
        return None if self.escalated_s is None else pd.Timestamp(self.escalated_s, unit="s", tz="UTC")

    def __call__(self, obs: Observed) -> int:
        step = obs.k // self.bin_s
        if step >= self.ready_sum.size:
            grow = step + 1 - self.ready_sum.size + 1440
            self.ready_sum, self.ready_n = np.pad(self.ready_sum, (0, grow)), np.pad(self.ready_n, (0, grow))
            self.pods_sum = np.pad(self.pods_sum, (0, grow))
        self.ready_sum[step] += obs.ready
        self.ready_n[step] += 1
        self.pods_sum[step] += obs.pods
        if obs.k >= self.next_refit:
            self._refit(obs)
        recent = obs.arrivals_per_s[-self.bin_s:]
        if recent.any():
            self.last_arrival = obs.k - (recent.size - 1 - int(np.flatnonzero(recent)[-1]))
        plan = self.plan
        self.asks = {}
        if plan is None:  # no plan yet: KEDA's usual 5 waiting per replica
            return max(1, math.ceil(obs.waiting / KEDA_WAITING_TARGET), obs.pods)
        ahead = self._band_ahead(obs.k)  # the external scaler's metric
        # the rate trigger: arrivals, as policies.replicas.arrival_rate_query reads them (finished + growth); both
        # it and the waiting trigger read vLLM, whose metrics come from serving replicas: while none serves (a
        # wake from zero) they read nothing, 0 for KEDA, and the requests held at zero only activate the service
        observed = float(obs.arrivals_per_s[-plan.rate_window_s:].sum()) / plan.rate_window_s if obs.serving else 0.0
        waiting = obs.waiting if obs.serving else 0
        self.asks = {"forecast band": hpa_proposal(obs.pods, ahead, plan.target_per_replica),
                     "rate trigger": hpa_proposal(obs.pods, observed, plan.target_per_replica),
                     "waiting trigger": hpa_proposal(obs.pods, waiting,
                                                     plan.waiting_per_replica or KEDA_WAITING_TARGET)}
        want = max(*self.asks.values(), hpa_proposal(obs.pods, self._objective_missed(obs, plan), 1.0))
        if plan.scale_to_zero:
            if obs.pods == 0:  # KEDA activates 0 -> 1 at its polling interval: forecast ahead, or a request held
                active = ahead > plan.activation_threshold or obs.waiting > 0
                return 1 if active and obs.k % KEDA_POLL_S == 0 else 0
            idle = ahead <= plan.activation_threshold and obs.waiting == 0
            if idle and obs.k - self.last_arrival >= plan.cooldown_s:
                return 0
            want = max(want, 1)
        want = min(max(want, plan.min_replicas), plan.max_replicas)
        if obs.pods == 0:
            return want
        return hpa_behave(self.hpa, obs.k, obs.pods, want, hpa_behavior(plan, self.cap.cold_start_s))

    def _objective_missed(self, obs: Observed, plan: ScalingPlan) -> float:
        """The objective trigger's value (``policies.autoscalerobjects.objective_missed_query``): the replicas
        serving now and a window ago (the fewer of the two counts: pods go newest first) x (1 + the share of
        requests over the objective among those whose first token came in the last ``rate_window_s``, read as
        vLLM's histogram gives it, and no more than the share that waited over ``QUEUED_S`` in the queue: a miss
        on a request's own prefill is no replica's to serve), 0 while that share is within the error budget or no
        replica served through."""
        window = plan.rate_window_s
        self.serving_at[obs.k] = obs.serving
        for old in [t for t in self.serving_at if t < obs.k - window]:
            del self.serving_at[old]
        then = self.serving_at.get(obs.k - window, 0)  # no sync a window ago (the replay's start): none counted
        lo = self.window_lo
        first = obs.served_arrival_s[lo:] + obs.served_ttft_s[lo:]  # served FIFO: first tokens come (nearly) in order
        self.window_lo += int(np.searchsorted(first, obs.k - window, side="right"))
        serving = min(obs.serving, then)
        if not serving or plan.ttft_objective_s is None or plan.ttft_error_budget is None:
            return 0.0
        recent = obs.served_ttft_s[self.window_lo:]
        if not recent.size:
            return 0.0
        # queue time as vLLM's histogram counts it: the TTFT less the request's own prefill on a replica
        own_s = obs.tokens_in[self.window_lo:self.window_lo + recent.size] / self.cap.prefill_tps
        queued = float(np.count_nonzero(recent - own_s > QUEUED_S))
        share = min(histogram_over(recent, plan.ttft_objective_s), queued) / recent.size
        return serving * (1.0 + share) if share > plan.ttft_error_budget else 0.0

    def _band_ahead(self, k: int) -> float:
        """Largest forecast band value over the next cold start (the horizon's last value beyond it)."""
        lo = max(0, (k - self.band_start) // self.bin_s)
        hi = max(lo + 1, (k + int(self.cap.cold_start_s) - self.band_start) // self.bin_s + 1)
        part = self.band[min(lo, self.band.size - 1): hi]
        return float(part.max()) if part.size else float(self.band[-1])

    def _refit(self, obs: Observed) -> None:
        self.next_refit = obs.k + self.refit_s
        full = obs.k // self.bin_s
        if full < 1 or obs.tokens_in.size == 0:
            return
        start = max(0, full - self.history_s // self.bin_s)
        counts = obs.arrivals_per_s[start * self.bin_s: full * self.bin_s].reshape(-1, self.bin_s).sum(axis=1)
        index = pd.to_datetime((np.arange(start, full) * self.bin_s), unit="s", utc=True)
        rate = pd.Series(counts / self.bin_s, index=index)
        self._observe_ttft(obs, full)
        history = ReplicaHistory(float(self.bin_s), rate, pd.Series(self.ttft_p95[start:full], index=index),
                                 replicas=pd.Series(self._serving(start, full), index=index))
        capacity = self.cap.requests_per_s(*self._token_means(obs))
        workload = Workload(WorkloadRef("replay", "Deployment", "vllm"), Allocation(Sharing.EXCLUSIVE, gpus=1),
                            annotations={CAPACITY_ANNOTATION: f"{capacity:.6g}"}, cold_start_s=self.cap.cold_start_s,
                            shape_since=self.shape_since)
        horizon = (self.refit_s + int(self.cap.cold_start_s)) // self.bin_s + 2
        forecasts = []
        self.band, self.band_start = np.array([0.0]), full * self.bin_s
        with contextlib.suppress(NotEnoughHistory):  # as the pipeline: on any history, its band widened while short
            forecast, self.choice = forecast_with_choice(rate, horizon, metric="request_rate_per_s",
                                                         previous=self.choice, reselect_s=self.reselect_s)
            forecasts.append(forecast)
        cls = Classification(self.cls, 1.0, ("--class",), "annotation")
        plan = scaling_plan(workload, history, cls, forecasts, self.settings, self.plan)
        self.plan = None if isinstance(plan, NoScalingPlan) else plan
        if forecasts and self.plan is not None and self.plan.demand_source == "forecast":  # as serve.targets
            self.band = forecasts[0].frame[BAND_BY_CLASS[self.cls]].clip(lower=0).to_numpy(dtype="float64")
        self.refits += 1
        self._escalate(obs)

    def _serving(self, lo: int, hi: int) -> np.ndarray:
        """Serving replicas of steps ``lo:hi`` as the product collects them (``m.SERVING_REPLICAS``): the pods that
        report vLLM metrics (ready ones, averaged over the step's syncs), 0 only where no pod existed at all
        (``snapshot.fill_at_zero`` on kube-state-metrics' count), NaN where pods were starting and none served
        (a cold start) or no sync has run yet. So a wake's run at zero ends when its pod is created."""
        with np.errstate(invalid="ignore", divide="ignore"):
            ready = self.ready_sum[lo:hi] / self.ready_n[lo:hi]
        return np.where((ready == 0) & (self.pods_sum[lo:hi] > 0), np.nan, ready)

    def _escalate(self, obs: Observed) -> None:
        """Whole GPUs instead of the slice where the right-size policy would give them (``policies.mig``): over
        the error-budget window, once a day of history exists (``policy.min_history_s``), the requests over the
        objective, as the collector reads them from vLLM's TTFT histogram, against the requests that arrived;
        the steps of a wake from zero left out of both, as ``over_objective_share`` leaves them out."""
        s = self.settings
        if self.whole is None or self.cls is WorkloadClass.BATCH or obs.k < PolicySettings().min_history_s:
            return
        window = int(s.error_budget_window_s)
        start = max(0, obs.k - window)
        since = self._served_from(obs, start)
        served_arrival_s, served_ttft_s = obs.served_arrival_s[since:], obs.served_ttft_s[since:]
        first = served_arrival_s + served_ttft_s
        done = first >= start
        lo, hi = start // self.bin_s, (obs.k + 1) // self.bin_s + 1  # a first token comes within k + 1
        woke = after_zero(pd.Series(self._serving(lo, hi)), s.wake_s(self.cap.cold_start_s),
                          self.bin_s).to_numpy(dtype=bool)
        arrived = float(obs.arrivals_per_s[start:obs.k][~woke[np.arange(start, obs.k) // self.bin_s - lo]].sum())
        at = np.minimum((first[done] // self.bin_s).astype(np.int64) - lo, woke.size - 1)
        recent = served_ttft_s[done][~woke[at]]
        share = histogram_over(recent, s.ttft_objective_s) / arrived if arrived else None
        if missed_too_often(share, s.ttft_error_budget, s.whole_gpu_over_budget):
            self.cap, self.whole, self.escalated_s = self.whole, None, float(obs.k)
            # the HPA carries on (the same ScaledObject), but its recommendations were counts of the old shape:
            # forgotten here rather than held as whole GPUs (as before the first sync's record was modelled)
            self.hpa = HpaMemory(started=True)
            if self.whole_max is not None:  # the owner's cap in the new shape's count, as replay.ours_max_replicas
                self.settings = self.settings.model_copy(update={"max_replicas": self.whole_max})
                if self.plan is not None:  # the plan in force until the next refit: capped the same way
                    self.plan = _capped(self.plan, self.whole_max)

    def _token_means(self, obs: Observed) -> tuple[float, float]:
        """Mean input and output tokens of the requests arrived so far, as ``obs.tokens_in.mean()`` gives them,
        from running sums: token counts are whole numbers, so every partial sum below 2**53 is exact in any order
        and the mean is numpy's to the bit. Lengths that are not whole fall back to numpy's mean."""
        new_in, new_out = obs.tokens_in[self.token_n:], obs.tokens_out[self.token_n:]
        if self.token_sums is not None and new_in.size:
            sums = self.token_sums[0] + float(new_in.sum()), self.token_sums[1] + float(new_out.sum())
            whole = (new_in == np.floor(new_in)).all() and (new_out == np.floor(new_out)).all()
            self.token_sums = sums if whole and max(sums) < 2.0**53 else None
        self.token_n = obs.tokens_in.size
        if self.token_sums is None:
            return float(obs.tokens_in.mean()), float(obs.tokens_out.mean())
        return self.token_sums[0] / self.token_n, self.token_sums[1] / self.token_n

    def _served_from(self, obs: Observed, start: int) -> int:
        """The first served request whose first token can come at or after ``start`` (s): arrivals are sorted,
        so none before one arriving over the longest TTFT so far (and a second) earlier. Only a speed-up:
        the requests it leaves out have their first token before ``start``."""
        new = obs.served_ttft_s[self.max_ttft_n:]
        if new.size:
            self.max_ttft_s, self.max_ttft_n = max(self.max_ttft_s, float(new.max())), obs.served_ttft_s.size
        return int(np.searchsorted(obs.served_arrival_s, start - self.max_ttft_s - 1.0, side="left"))

    def _observe_ttft(self, obs: Observed, full: int) -> None:
        """p95 TTFT of each step before ``full``, by first-token time, from the requests served since the last
        refit (a step is complete once the sync is past it: a request admitted in second k has its first
        token within k + 1)."""
        done = self.pending_served
        first = obs.served_arrival_s[done:] + obs.served_ttft_s[done:]
        self.pending_served = obs.served_ttft_s.size
        new = pd.DataFrame({"step": (first // self.bin_s).astype(np.int64), "ttft": obs.served_ttft_s[done:]})
        frame = pd.concat([self.pending, new], ignore_index=True) if len(self.pending) else new
        complete = frame["step"] < full
        if self.ttft_p95.size < full:
            self.ttft_p95 = np.pad(self.ttft_p95, (0, full - self.ttft_p95.size), constant_values=np.nan)
        if complete.any():
            p95 = frame[complete].groupby("step")["ttft"].quantile(0.95)
            self.ttft_p95[p95.index.to_numpy()] = p95.to_numpy()
        self.pending = frame[~complete]


def _capped(plan: ScalingPlan, cap: int) -> ScalingPlan:
    """``plan`` with max replicas (and min and the recommendation with it) at most ``cap``."""
    return replace(plan, max_replicas=min(plan.max_replicas, cap), min_replicas=min(plan.min_replicas, cap),
                   recommended_replicas=min(plan.recommended_replicas, cap))


def histogram_over(ttft_s: np.ndarray, objective_s: float) -> float:
    """How many of these TTFTs exceed the objective as vLLM's histogram tells it: all of them less those its
    buckets put within the objective (``recommender.core.usage.within_objective``, as the collector's
    query reads them)."""
    within = sum(float((ttft_s <= bound).sum()) * weight for bound, weight in within_objective(objective_s))
    return float(ttft_s.size - within)
