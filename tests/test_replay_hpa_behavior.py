"""The replay's HPA honours the ``behavior`` the product emits (policies/autoscalerobjects.hpa_behavior) as
the HPA controller does: stabilisation windows both ways, each direction's policies counted from the replicas
at the start of their period, selectPolicy; and the objective trigger's feedback in ``ours``."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import replay_ours
from replay_capacity import Capacity
from replay_hpa import HpaMemory, default_behavior, hpa_behave, hpa_step
from replay_sim import Observed

from policies.autoscalerobjects import hpa_behavior
from recommender.core import usage as m
from recommender.core.plan import ScalingPlan, WorkloadClass
from recommender.core.settings_scaling import ScalingSettings

PLAN = ScalingPlan(metric=m.REQUEST_RATE, per_replica_capacity=10.0, target_per_replica=7.0, min_replicas=1,
                   max_replicas=100, recommended_replicas=2, activation_threshold=0.0, cooldown_s=300,
                   scale_to_zero=False, headroom_frac=0.3, cold_start_s=120.0, waiting_per_replica=14.0,
                   ttft_objective_s=2.0, ttft_error_budget=0.01)


def run(behavior: dict[str, Any], cur: int, recs: list[int], new: bool = True) -> list[int]:
    """Replicas after each 15 s sync that recommends ``recs`` in turn, the HPA's result applied each time; by a
    ``new`` HPA (its first sync records the replicas it found) or one that has synced before."""
    mem, out = HpaMemory(started=not new), []
    for i, rec in enumerate(recs):
        cur = hpa_behave(mem, 15 * i, cur, rec, behavior)
        out.append(cur)
    return out


def test_the_default_behavior_is_the_replays_earlier_hpa_step() -> None:
    recs = [10, 40, 40, 40, 40] + [2] * 22
    mem, cur_a, cur_b = HpaMemory(), 10, 10
    legacy: list[tuple[int, int]] = []
    a, b = [], []
    for i, rec in enumerate(recs):
        cur_a = hpa_behave(mem, 15 * i, cur_a, rec, default_behavior(300))
        cur_b = hpa_step(legacy, 15 * i, cur_b, rec, 300)
        a.append(cur_a)
        b.append(cur_b)
    assert a == b
    assert a[:5] == [10, 20, 40, 40, 40]  # x2 a sync up to the recommendation
    assert a[5:25] == [40] * 20 and a[25] == 2  # the 300 s window holds 40, then down at once (100% a sync)


def test_the_emitted_behavior_is_what_the_replay_runs() -> None:
    behavior: dict[str, Any] = hpa_behavior(PLAN)
    # cold start 120 s: the HPA's 300 s default window is the longer; scale-up: the plan's max replicas a sync
    assert behavior["scaleDown"] == default_behavior(300)["scaleDown"]
    assert behavior["scaleUp"]["policies"][0] == {"type": "Pods", "value": PLAN.max_replicas, "periodSeconds": 15}
    assert hpa_behavior(replace(PLAN, cold_start_s=900.0))["scaleDown"]["stabilizationWindowSeconds"] == 900  # type: ignore[index]


def test_a_scale_in_rate_limit_counts_from_the_start_of_its_period_after_the_window() -> None:
    behavior = default_behavior(300)
    behavior["scaleDown"]["policies"] = [{"type": "Percent", "value": 30, "periodSeconds": 120}]
    out = run(behavior, 40, [40] + [1] * 80)
    drop = next(i for i, n in enumerate(out) if n < 40)
    assert drop == 21  # the 300 s stabilisation window first (the recommendation of 40 at 0 s)
    assert out[drop] == 28  # int(40 x 0.7): one step
    # no second step within the 120 s period: 8 syncs later the period has passed
    assert out[drop:drop + 8] == [28] * 8 and out[drop + 8] == int(28 * 0.7)
    assert out[-1] == 1 and out == sorted(out, reverse=True)


def test_a_new_hpa_holds_the_replicas_it_found_for_its_scale_down_window() -> None:
    """The HPA controller records the replicas it finds as its first recommendation (kubernetes
    pkg/controller/podautoscaler/horizontal.go, ``recordInitialRecommendation``), so a new HPA that recommends
    fewer scales in only once its scale-down window has passed; a 0 s scale-up window does not count that
    record (it is older than the first sync), so a new HPA scales up at its first sync."""
    out = run(default_behavior(300), 11, [4] * 30)
    assert out[:20] == [11] * 20  # 0..285 s: the 11 it found are within the 300 s window
    assert out[20] == 4 and out[-1] == 4  # 300 s: the record has left the window
    window = run(hpa_behavior(replace(PLAN, cold_start_s=900.0)), 11, [4] * 70)
    assert window.index(4) == 60  # the emitted 900 s window holds them as long
    assert run(hpa_behavior(PLAN), 1, [90, 90]) == [90, 90]
    behavior = default_behavior(300)
    behavior["scaleUp"]["stabilizationWindowSeconds"] = 60
    assert run(behavior, 2, [8] * 6) == [2, 2, 2, 2, 6, 8]  # a 60 s up window counts the record; then +4, x2


def test_the_emitted_scale_up_reaches_what_a_burst_asks_for_in_one_sync() -> None:
    """From 1 replica a burst that asks for 90 gets them at the first sync under the emitted behavior; the
    HPA's default (+4 or x2 a sync) takes six more syncs (90 s) to ask for the last of them, while the burst
    queues behind the replicas it has."""
    burst = [90] * 8
    assert run(hpa_behavior(PLAN), 1, burst) == burst
    default = run(default_behavior(300), 1, burst)
    assert default[:7] == [5, 10, 20, 40, 80, 90, 90]
    assert run(hpa_behavior(replace(PLAN, max_replicas=2)), 1, [90])[0] == 5  # at least the default's +4


def test_scale_up_policies_count_from_the_start_of_their_period() -> None:
    slow_up = {"scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                           "policies": [{"type": "Pods", "value": 2, "periodSeconds": 60}]},
               "scaleDown": default_behavior()["scaleDown"]}
    # +2 in any 60 s: at 0 s 4 -> 6, then held until the event is 60 s old (strictly: at 60 s it is not)
    assert run(slow_up, 4, [20] * 6) == [6, 6, 6, 6, 8, 8]
    assert run({**slow_up, "scaleUp": {**slow_up["scaleUp"], "selectPolicy": "Disabled"}}, 4, [20] * 3) == [4, 4, 4]


def test_select_policy_min_takes_the_smaller_change_and_the_up_window_the_lowest_recommendation() -> None:
    up = {"stabilizationWindowSeconds": 30, "selectPolicy": "Min",
          "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15},
                       {"type": "Percent", "value": 100, "periodSeconds": 15}]}
    behavior = {"scaleUp": up, "scaleDown": default_behavior()["scaleDown"]}
    # Min: +4 a sync where x2 would give more
    assert run(behavior, 10, [30, 30, 30], new=False) == [14, 18, 22]
    # a recommendation of 12 at 15 s holds the count while it is in the 30 s window (the lowest counts)
    assert run(behavior, 10, [30, 12, 30, 30, 30], new=False) == [14, 14, 14, 14, 18]
    assert run(behavior, 10, [30, 30, 30]) == [10, 10, 14]  # a new HPA: the 10 it found, 30 s


def observed(k: int, serving: int, ttft: np.ndarray, first_s: np.ndarray) -> Observed:
    return Observed(k=k, pods=serving + 2, ready=serving, serving=serving, waiting=0,
                    arrivals_per_s=np.ones(k), tokens_in=np.ones(ttft.size), tokens_out=np.ones(ttft.size),
                    served_ttft_s=ttft, served_arrival_s=first_s - ttft)


def test_ours_objective_trigger_reads_the_misses_of_the_last_window_of_the_replicas_serving_through_it() -> None:
    # 100 requests whose first token came at 0..99 s; the 20 of 60..79 s took 5 s (over the 2 s objective)
    first = np.arange(100.0)
    ttft = np.where((first >= 60) & (first < 80), 5.0, 0.5)

    def syncs(serving: dict[int, int], plan: ScalingPlan = PLAN) -> dict[int, float]:
        ours = replay_ours.Ours(Capacity(), WorkloadClass.REAL_TIME, 300, ScalingSettings())
        return {k: ours._objective_missed(observed(k, serving.get(k, 4), ttft, first), plan) for k in range(0, 226, 15)}

    got = syncs({})
    assert got[105] == 0.0  # no sync a window (120 s) before: no replica served through it
    # at 120 s the window (0 s, 120 s] holds 99 requests, 20 over: 4 serving through it -> 4 x (1 + 20/99)
    assert got[120] == pytest.approx(4 * (1 + 20 / 99))
    assert got[195] == pytest.approx(4 * (1 + 4 / 24))  # (75 s, 195 s]: 76..99 s, of which 76..79 s over
    assert got[210] == 0.0  # (90 s, 210 s]: none over -> nothing (the other triggers decide)
    # replicas added since the window began do not count: the misses were the replicas' that served it
    assert syncs({0: 1})[120] == pytest.approx(1 * (1 + 20 / 99))
    # within the budget, or with no objective in the plan, nothing either
    assert syncs({}, replace(PLAN, ttft_error_budget=0.5))[120] == 0.0
    assert syncs({}, replace(PLAN, ttft_objective_s=None))[120] == 0.0


def test_ours_does_not_add_replicas_for_misses_no_replica_would_serve_in_time() -> None:
    """Requests whose own prompt takes longer than the objective to prefill miss it on an idle replica: the
    objective trigger must not answer them with replicas. It did: serving x (1 + their share) each window, so a
    steady load's pool grew by that share per cold start for as long as it ran (Mooncake: 9 -> 54 replicas in an
    hour, waiting 0 throughout)."""
    import replay
    from replay_sim import simulate
    from replay_trace import Trace

    cap = Capacity(prefill_tps=1000.0, decode_tps=1000.0, seq_tps=100.0, kv_tokens=100_000.0, max_seqs=8,
                   cold_start_s=30.0)
    rng = np.random.default_rng(0)
    arrivals = np.sort(rng.uniform(0, 7200, 7200))  # a request a second for two hours
    long = rng.random(arrivals.size) < 0.2  # 20%: 5,000-token prompts, 5 s of prefill at 1,000 tokens/s
    trace = Trace(arrivals, np.where(long, 5000.0, 100.0), np.full(arrivals.size, 10.0))
    args = replay.parse_args(["--trace", "t.csv", "--format", "servegen"])
    ours = replay.contenders(args, trace, cap, cap, 3)["ours"].make()
    pods: list[int] = []

    def spy(obs: Observed) -> int:
        pods.append(obs.pods)
        return ours(obs)

    result = simulate(trace, cap, spy, "ours", 3)
    # ~1.1 replica-seconds of work a second: a few replicas serve it; every long prompt misses whatever the count
    assert (result.ttft_s[long] > 2.0).all() and (result.ttft_s[~long] > 2.0).mean() < 0.01
    last_hour = pods[len(pods) // 2:]
    assert max(last_hour) <= 6, f"ours grew to {max(last_hour)} replicas for misses no replica fixes"
