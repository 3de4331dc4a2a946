"""The replay simulator on tiny synthetic traces: capacity, cold starts, the policies' mechanics."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import replay
import replay_hpa
import replay_ours
import replay_results
import replay_sim
import replay_sizing
from replay_capacity import Capacity
from replay_hpa import Reactive
from replay_sim import simulate
from replay_trace import Trace

from recommender.analysis.features import after_zero
from recommender.core.catalogue import load_catalogue
from recommender.core.plan import WorkloadClass
from recommender.core.settings_scaling import ScalingSettings

CAP = Capacity(prefill_tps=1000.0, decode_tps=1000.0, seq_tps=100.0, kv_tokens=100_000.0, max_seqs=8, cold_start_s=30.0)


def steady(rate_per_s: float, seconds: int, tin: float = 100.0, tout: float = 10.0) -> Trace:
    t = np.arange(0, seconds, 1.0 / rate_per_s)
    return Trace(t, np.full(t.size, tin), np.full(t.size, tout))


def test_one_replica_under_capacity_meets_the_objective_and_counts_gpu_time() -> None:
    # 2 req/s x 100 prompt tokens = 200 of 1,000 prefill tokens/s: no queue; TTFT = 100 / 1000 = 0.1 s
    r = simulate(steady(2.0, 600), CAP, lambda obs: 1, "t", warm=1)
    assert np.all(np.isfinite(r.ttft_s)) and r.ttft_s.max() <= 1.0
    assert r.ttft_s.min() == pytest.approx(0.1)
    assert 600 / 3600 <= r.gpu_hours <= 620 / 3600  # one replica for the trace (+ a few seconds of drain)
    assert r.cold_starts == 0 and r.pod_starts == 0


def test_the_gpus_held_each_minute_add_up_to_the_gpu_hours() -> None:
    """What --chart draws is what gpu_hours counts: one pod for the first 120 s, then three (0.5 GPU each)."""
    half = replace(CAP, gpu_share=0.5)
    r = simulate(steady(1.0, 300), half, lambda obs: 1 if obs.k < 120 else 3, "steps", warm=1)
    assert r.gpus_per_min.sum() / 60 == pytest.approx(r.gpu_hours)
    assert r.gpus_per_min[:2].tolist() == pytest.approx([0.5, 0.5])  # one pod of half a GPU
    assert r.gpus_per_min[2:5].tolist() == pytest.approx([1.5, 1.5, 1.5])  # three from 120 s (starting ones too)


def test_a_jump_marks_the_requests_of_its_first_cold_start() -> None:
    """A minute with over 3x the arrivals of the 10 before it is a jump; the requests of the next cold start
    (120 s here) after it are the ones the replay says no causal policy's new replicas could serve."""
    calm, burst = np.arange(0, 1200, 1.0), np.arange(1200, 1800, 0.1)  # 1/s for 20 min, then 10/s
    idle_then = np.arange(2700, 3000, 0.5)  # 15 minutes of nothing, then 2/s: waking from idle jumps too
    t = np.concatenate((calm, burst, idle_then))
    marked = replay_results.after_jumps(t, 120.0)
    assert not marked[t < 1200].any()  # steady: no jump
    assert marked[(t >= 1200) & (t < 1320)].all() and not marked[(t >= 1320) & (t < 2700)].any()
    assert marked[(t >= 2700) & (t < 2820)].all() and not marked[t >= 2820].any()
    assert not replay_results.after_jumps(calm, 120.0).any()
    assert replay_results.after_jumps(np.array([]), 120.0).size == 0
    ttft = np.where(marked, 5.0, 0.1)
    ttft[-10:] = 5.0  # ten misses long after the last jump
    line = replay_results.summary("p", replay_sim.Result(1.0, ttft, 0, 0, 0, 1.0), 2.0, 0.0, marked)
    assert f"misses_after_jumps_pct={100 * marked.sum() / (marked.sum() + 10):.1f}" in line


def test_overload_queues_and_more_replicas_fix_it() -> None:
    # 12 req/s x 100 tokens = 1,200 tokens/s > 1,000 on one replica: the queue grows ~200 tokens each second
    trace = steady(12.0, 300)
    one = simulate(trace, CAP, lambda obs: 1, "one", warm=1)
    two = simulate(trace, CAP, lambda obs: 2, "two", warm=2)
    assert (one.ttft_s > 2.0).mean() > 0.5
    assert (two.ttft_s > 2.0).mean() == 0.0


def test_scale_from_zero_waits_a_cold_start() -> None:
    # nothing ready; the policy asks for one pod at t=0: ready at 30 s, so the first requests wait ~30 s
    trace = steady(1.0, 120)
    r = simulate(trace, CAP, lambda obs: 1, "cold", warm=0)
    assert r.cold_starts == 1 and r.pod_starts == 1
    assert r.waited_on_cold_start == 30  # arrivals at 0..29 s found no ready replica
    assert r.ttft_s[0] == pytest.approx(31 - 0 - 0.9, abs=0.2)  # admitted in second 30, prefill 0.1 s


def test_a_policy_sees_a_request_only_once_it_has_arrived() -> None:
    # a request at 15.5 s: the sync at 15 s must not count it (waiting, token history); the one at 30 s does
    trace = Trace(np.array([0.0, 15.5, 40.0]), np.full(3, 100.0), np.full(3, 10.0))
    seen: dict[int, tuple[int, int]] = {}

    def spy(obs: replay_sim.Observed) -> int:
        seen[obs.k] = (obs.waiting, obs.tokens_in.size)
        return 1

    simulate(trace, CAP, spy, "spy", warm=1)
    assert seen[15] == (0, 1)
    assert seen[30] == (0, 2)  # arrived and served within its second: nothing waits


@pytest.mark.parametrize(("cur", "usage", "want"), [
    (4, 4.3, 4), (4, 3.7, 4),  # within the HPA's 0.1 tolerance: no change either way
    (4, 4.5, 5), (4, 3.0, 3), (0, 0.5, 1), (1, 0.0, 0),
])
def test_a_metric_proposes_replicas_as_the_hpa_does(cur: int, usage: float, want: int) -> None:
    assert replay_hpa.hpa_proposal(cur, usage, 1.0) == want


def test_reactive_scales_on_waiting_and_back_down_after_the_window() -> None:
    # a 60 s overload burst (30 req/s) then quiet: the waiting metric scales up, stabilisation 300 s brings it down
    burst = np.arange(0, 60, 1 / 30.0)
    quiet = np.arange(60, 1200, 2.0)
    t = np.concatenate([burst, quiet])
    trace = Trace(t, np.full(t.size, 100.0), np.full(t.size, 10.0))
    seen: list[int] = []
    policy = Reactive(min_replicas=1, max_replicas=100)

    def spy(obs: replay_sim.Observed) -> int:
        seen.append(obs.pods)
        return policy(obs)

    r = simulate(trace, CAP, spy, "reactive", warm=1)
    assert max(seen) > 1 and seen[-1] == 1
    assert r.pod_starts >= 1


def test_reactive_bounded_scales_on_the_queue_up_to_its_ceiling_only(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    burst = np.arange(0, 120, 1 / 30.0)  # 3,000 prefill tokens/s for two minutes: a queue of hundreds
    trace = Trace(burst, np.full(burst.size, 100.0), np.full(burst.size, 10.0))
    asked: dict[str, list[int]] = {"free": [], "bounded": []}
    for name, policy in (("free", Reactive(min_replicas=1, max_replicas=100)),
                         ("bounded", Reactive(min_replicas=1, max_replicas=3))):
        def spy(obs: replay_sim.Observed, policy: Reactive = policy, name: str = name) -> int:
            asked[name].append(policy(obs))
            return asked[name][-1]
        simulate(trace, CAP, spy, name, warm=1)
    assert max(asked["free"]) > 3 and max(asked["bounded"]) == 3
    path = tmp_path / "chunk-trace.csv"
    path.write_text("0,0.5,1.0,Gamma,1.0,2.0\n600,0.2,1.0,,0,0\n")
    args = ["--trace", str(path), "--format", "servegen", "--policies", "static-peak,reactive"]
    assert replay.main(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert [x.split()[0] for x in out if x.startswith("policy=")] == ["policy=static-peak", "policy=reactive"]
    assert any(x.startswith("# static peak: ") and "every reactive one scales up to it at most" in x for x in out)


def test_reactive_zero_deactivates_after_the_cooldown() -> None:
    t = np.array([0.0, 1.0, 2.0, 1000.0])
    trace = Trace(t, np.full(4, 100.0), np.full(4, 10.0))
    r = simulate(trace, CAP, Reactive(min_replicas=0, max_replicas=100), "rz", warm=1)
    assert r.cold_starts == 1  # scaled to zero after 300 s without waiting, woke for the request at 1,000 s
    assert r.waited_on_cold_start >= 1 and r.ttft_s[-1] > CAP.cold_start_s


def test_ours_runs_the_product_policy_without_peeking(tmp_path: Path) -> None:
    trace = steady(3.0, 1800)
    ours = replay_ours.Ours(CAP, WorkloadClass.REAL_TIME, 300, ScalingSettings())
    r = simulate(trace, CAP, ours, "ours", warm=1)
    assert ours.refits >= 5 and ours.plan is not None
    assert ours.plan.min_replicas >= 1 and not ours.plan.scale_to_zero  # no idle gap: never to zero
    assert (r.ttft_s > 2.0).mean() < 0.01


def test_ours_takes_a_real_time_service_to_zero_where_its_wakes_fit_the_budget() -> None:
    """Busy 4 h, idle 15 min, twice, then 10 busy minutes: a gap counts once it is 10 cold starts (300 s) long,
    the one in progress too, and the wakes cost 60 s (poll and cold start) in 4 h of requests (0.42%): both
    gaps go to zero, and KEDA wakes the service at a poll for the first request after each."""
    busy, idle = 4 * 3600, 900
    t = np.concatenate([np.arange(0, busy, 1.0), np.arange(busy + idle, 2 * busy + idle, 1.0),
                        np.arange(2 * (busy + idle), 2 * (busy + idle) + 600, 1.0)])
    trace = Trace(t, np.full(t.size, 100.0), np.full(t.size, 10.0))
    runs = {}
    for frac in (0.5, None):  # hours, not the two days of history the wake budget waits for by default
        settings_ = ScalingSettings(wake_budget_frac=frac, wake_min_history_s=0.0,
                                           min_forecast_history_s=3600.0)  # and a widened forecast after an hour
        ours = replay_ours.Ours(CAP, WorkloadClass.REAL_TIME, 300, settings_)
        runs[frac] = (simulate(trace, CAP, ours, "ours", warm=1), ours)
    r, ours = runs[0.5]
    assert ours.plan is not None and ours.plan.scale_to_zero
    assert r.cold_starts == 2 and 0 < r.waited_on_cold_start <= 2 * (30 + 30)  # at most a poll and a cold start
    for start in (busy, 2 * busy + idle):
        assert (r.gpus_per_min[start // 60: (start + idle) // 60] == 0).any()
    off, _ = runs[None]
    assert off.cold_starts == 0 and off.gpu_hours > r.gpu_hours  # off: the gap holds its replica


def test_ours_reads_serving_replicas_as_the_collector_does() -> None:
    """Per step: ready pods averaged over its syncs; 0 only where no pod existed (kube-state-metrics' count);
    NaN where a pod was starting and none served (vLLM reports nothing in a cold start) or no sync ran."""
    ours = replay_ours.Ours(CAP, WorkloadClass.REAL_TIME, 300, ScalingSettings())
    ours.ready_sum = np.array([0.0, 0.0, 2.0, 8.0, 0.0])  # at zero, cold start, half the step ready, 2 ready, none
    ours.ready_n = np.array([4.0, 4.0, 4.0, 4.0, 0.0])
    ours.pods_sum = np.array([0.0, 4.0, 4.0, 8.0, 0.0])
    got = ours._serving(0, 5)
    np.testing.assert_array_equal(got[[0, 2, 3]], [0.0, 0.5, 2.0])
    assert np.isnan(got[1]) and np.isnan(got[4])
    woke = after_zero(pd.Series(got), 60.0, 60)
    assert woke.tolist() == [False, True, True, False, False]  # from the pod's creation, a wake and a step


def test_ours_reads_each_steps_p95_ttft_once_the_step_is_over() -> None:
    """The error budget's input: p95 TTFT per minute by first-token time, as vLLM's histogram gives it, from
    the requests served so far, filled in only for minutes already over at the sync."""
    trace = steady(12.0, 400)  # one replica overloaded: TTFT grows through the trace
    truth = simulate(trace, CAP, lambda obs: 1, "truth", warm=1).ttft_s
    ours = replay_ours.Ours(CAP, WorkloadClass.REAL_TIME, 60, ScalingSettings())
    filled: dict[int, int] = {}

    def spy(obs: replay_sim.Observed) -> int:
        if obs.k % 60 == 0:
            ours._observe_ttft(obs, obs.k // 60)
            filled[obs.k] = int(np.isfinite(ours.ttft_p95).sum())
        return 1

    simulate(trace, CAP, spy, "spy", warm=1)
    first = (trace.arrival_s + truth) // 60
    for step in range(int(first[np.isfinite(first)].max())):
        want = np.quantile(truth[first == step], 0.95)
        assert ours.ttft_p95[step] == pytest.approx(want), step
    assert filled[60] == 1 and filled[120] == 2  # at each sync only the minutes already over
    assert ours.ttft_p95[0] < ours.ttft_p95[3]  # the queue shows up as the steps go


def oracle_on_a_jump(rate: float, until_s: int, headroom: float, field: str
                     ) -> tuple[Trace, replay_sim.Result, dict[int, int]]:
    """1 req/s until 600 s, then ``rate`` until ``until_s``, under the oracle; ``field`` of each sync's view."""
    t = np.concatenate([np.arange(0, 600, 1.0), np.arange(600, until_s, 1 / rate)])
    trace = Trace(t, np.full(t.size, 100.0), np.full(t.size, 10.0))
    seen: dict[int, int] = {}
    oracle = replay_hpa.Oracle(trace, CAP, headroom=headroom)

    def spy(obs: replay_sim.Observed) -> int:
        seen[obs.k] = getattr(obs, field)
        return oracle(obs)

    return trace, simulate(trace, CAP, spy, "oracle", warm=1), seen


def test_oracle_scales_up_before_a_burst_it_reads_ahead() -> None:
    """Quiet (1 req/s) until 600 s, then 12 req/s (1,200 prefill tokens/s: two replicas): the oracle has the
    second replica ready when the burst starts; a policy that only sees the past cannot."""
    trace, r, seen = oracle_on_a_jump(12.0, 900, 0.0, "pods")
    t = trace.arrival_s
    assert seen[300] == 1  # no earlier than it needs: the burst is more than a cold start away
    assert seen[600] >= 2  # asked for a cold start (30 s) + two syncs ahead of the burst
    assert (r.ttft_s[t >= 600] > 2.0).mean() == 0.0
    late = simulate(trace, CAP, Reactive(min_replicas=1, max_replicas=100), "reactive", warm=1)
    assert (late.ttft_s[t >= 600] > 2.0).mean() > 0.0


@pytest.mark.parametrize(("pods", "need", "syncs"), [(1, 1, 0), (0, 40, 1), (1, 5, 1), (1, 6, 2), (2, 60, 5),
                                                    (10, 11, 1)])
def test_the_hpa_ramp_takes_max_plus_4_or_double_per_sync(pods: int, need: int, syncs: int) -> None:
    assert replay_hpa.ramp_syncs(pods, need) == syncs


def test_the_oracle_starts_a_large_jump_early_enough_for_the_hpa_ramp() -> None:
    """1 req/s until 600 s, then 250 (27.5 replica-seconds of work a second: 40 replicas at 30% headroom). From
    one pod the HPA needs four syncs (1, 5, 10, 20, 40): a lead of a cold start and two syncs would leave the
    last pods starting after the burst; the oracle reads far enough ahead to have them ready."""
    trace, r, seen = oracle_on_a_jump(250.0, 660, 0.3, "ready")
    t = trace.arrival_s
    assert seen[450] == 1  # nothing early: the ramp starts one cold start + 2 + 4 syncs ahead (480 s)
    assert seen[600] >= 40  # all ready when the burst arrives
    assert (r.ttft_s[t >= 600] > 2.0).mean() == 0.0


def _result(gpu_hours: float, over: int, n: int = 1000) -> replay_sim.Result:
    ttft = np.where(np.arange(n) < over, 9.0, 0.1)
    return replay_sim.Result(gpu_hours, ttft, 0, 0, 0, gpu_hours)


@pytest.mark.parametrize(("ours", "over", "floor", "met"), [
    (4.9, 10, 0.0, True),    # 51% under static, 18.3% under reactive, 1.0 point over
    (5.1, 10, 0.0, False),   # 49% under static
    (4.9, 11, 0.0, False),   # 1.1 points over
    (4.9, 30, 2.0, True),    # 3% over, 2 of them unavoidable (prefill alone over the objective)
])
def test_verdict_needs_all_three_parts_of_the_goal(ours: float, over: int, floor: float, met: bool) -> None:
    results = {"static-peak": _result(10.0, 0), "reactive": _result(6.0, 0), "ours": _result(ours, over)}
    line = replay_results.verdict("ours", results, 2.0, floor)
    assert line.endswith(f"goal {'met' if met else 'NOT met'} (>= 50%, >= 15%, <= 1 point)")


def test_cli_skips_a_missing_trace_and_rejects_a_bad_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert replay.main(["--trace", str(tmp_path / "absent.csv"), "--format", "azure"]) == 0
    assert "not found: skipped" in capsys.readouterr().out
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    assert replay.main(["--trace", str(bad), "--format", "azure"]) == 2
    assert capsys.readouterr().err.startswith("error:")
    with pytest.raises(SystemExit):
        replay.main(["--trace", str(bad), "--format", "azure", "--refit-s", "0"])
    assert "refit period must be positive" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        replay.main(["--trace", str(bad), "--format", "azure", "--wake-budget-frac", "2"])
    assert "--wake-budget-frac must lie in [0, 1]" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        replay.main(["--trace", str(bad), "--format", "azure", "--burst-floor-budget-frac", "-1"])
    assert "--burst-floor-budget-frac must lie in [0, 1]" in capsys.readouterr().err


def test_cli_prints_one_line_per_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = ["0,0.5,1.0,Gamma,1.0,2.0", "600,0,0,,0,0", "1200,0.2,1.0,,0,0"]
    path = tmp_path / "chunk-trace.csv"
    path.write_text("\n".join(rows) + "\n")
    assert replay.main(["--trace", str(path), "--format", "servegen", "--servegen-mean-input", "200"]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("policy=")]
    assert [x.split()[0] for x in lines] == ["policy=static-peak", "policy=reactive", "policy=reactive-zero",
                                             "policy=reactive-rightsized", "policy=ours", "policy=oracle"]
    for line in lines:
        fields = dict(kv.split("=") for kv in line.split())
        assert float(fields["gpu_hours"]) > 0 and 0 <= float(fields["ttft_violation_pct"]) <= 100


def test_cli_draws_the_chart_it_is_asked_for(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "chunk-trace.csv"
    path.write_text("0,0.5,1.0,Gamma,1.0,2.0\n600,0,0,,0,0\n1200,0.2,1.0,,0,0\n")
    argv = ["--trace", str(path), "--format", "servegen", "--policies", "static-peak,reactive,ours"]
    assert replay.main([*argv, "--chart", str(tmp_path / "replay.svg")]) == 0
    assert f"# chart: {tmp_path / 'replay.svg'}" in capsys.readouterr().out
    svg = (tmp_path / "replay.svg").read_text()
    assert svg.startswith("<svg") and all(f">{name}<" in svg for name in ("static-peak", "reactive", "ours"))
    assert ">oracle<" not in svg  # only the policies that ran
    for bad, why in (("absent/replay.svg", "no folder"), ("replay.txt", "give a .svg, .png, .pdf file")):
        with pytest.raises(SystemExit):  # before the replay, not after minutes of it
            replay.main([*argv, "--chart", str(tmp_path / bad)])
        err = capsys.readouterr().err
        assert why in err and "static-peak search" not in err


def test_the_replay_chart_marks_a_change_of_shape() -> None:
    from replay_charts import replay_figure

    arrivals = np.arange(0.0, 7200.0, 10.0)
    label = "ours: 3g.40gb → whole GPUs"
    fig = replay_figure(arrivals, {"ours": (np.ones(121), np.full(arrivals.size, 0.5))}, 2.0, "t", {label: 3600.0})
    for ax in fig.axes:  # one dashed line through each panel, at the move
        (line,) = [ln for ln in ax.lines if ln.get_linestyle() == "--"]
        assert pd.Timestamp(line.get_xdata()[0]) == pd.Timestamp(3600, unit="s")
    assert [t.get_text() for t in fig.axes[1].texts] == [label]
    assert fig.axes[1].get_ylim()[0] == 0  # GPUs held never read below zero
    assert not any(ln.get_linestyle() == "--" for ln in replay_figure(
        arrivals, {"ours": (np.ones(121), np.full(arrivals.size, 0.5))}, 2.0, "t").axes[1].lines)


def test_the_sweep_chart_places_each_client_against_the_goal() -> None:
    from replay_charts import ClientPoint, sweep_figure, sweep_points

    clients = [ClientPoint("chunk-2", {"static-peak": (672.0, 0.0), "ours": (221.0, 0.31), "reactive": (341.0, 0.09)}),
               ClientPoint("chunk-7", {"ours": (10.0, 0.0)}),  # no static peak: nothing to compare with
               ClientPoint("mooncake", {"static-peak": (8.86, 8.79), "ours": (9.77, 8.66)}, unavoidable_pct=8.24)]
    pts = sweep_points(clients, "ours")
    assert [p[0] for p in pts] == ["chunk-2", "mooncake"]
    assert pts[0][1:] == pytest.approx((100 * 221 / 672, 0.31))
    assert pts[1][1:] == pytest.approx((100 * 9.77 / 8.86, 8.66 - 8.24))  # beyond the unavoidable
    ax = sweep_figure(clients, ("ours",)).axes[0]
    (dots,) = ax.collections[1:]  # the goal's box, then ours
    assert np.asarray(dots.get_offsets()) == pytest.approx(np.array([p[1:] for p in pts]))


@pytest.mark.parametrize(("ours", "met"), [(4.9, True), (5.1, False)])
def test_the_sweep_reads_the_goal_line_not_a_move_before_it(ours: float, met: bool) -> None:
    """A policy that changed shape prints "# ours moved ..." before its goal line: the sweep once read that
    line, and counted every client that moved as missing the goal."""
    from replay_sweep import goal_met

    results = {"static-peak": _result(10.0, 0), "reactive": _result(6.0, 0), "ours": _result(ours, 10),
               "oracle": _result(1.0, 0)}
    moved = "# ours moved from 3g.40gb to whole GPUs at 1.00 d: over 2x its TTFT error budget"
    verdict = replay_results.verdict
    stdout = "\n".join([moved, verdict("ours", results, 2.0, 0.0), verdict("oracle", results, 2.0, 0.0)])
    assert goal_met(stdout, "ours") is met
    assert goal_met(stdout, "oracle") is True
    assert goal_met("# ours moved from 3g.40gb to whole GPUs", "ours") is False  # no goal line: not met


H100 = load_catalogue().get("H100-80GB")


def test_a_slice_scales_prefill_by_sms_decode_by_memory_and_counts_its_share() -> None:
    assert H100 is not None
    whole = Capacity()
    half = whole.on_slice(H100, H100.profile("3g.40gb"))  # type: ignore[arg-type]
    assert half.prefill_tps == pytest.approx(15_000 * 3 / 7) and half.decode_tps == pytest.approx(4_000 * 4 / 8)
    assert half.gpu_share == 0.5
    # what the whole GPU keeps for weights and activations is kept on the slice too: KV = the rest
    overhead_gib = (0.9 * H100.memory_mib * 1024 - 400_000 * 128) / 2**20
    assert half.kv_tokens == pytest.approx((0.9 * 40448 / 1024 - overhead_gib) * 2**20 / 128)
    assert 0 < half.kv_tokens < whole.kv_tokens
    trace = steady(0.5, 600, tin=500.0, tout=20.0)
    a, b = (simulate(trace, c, lambda obs: 2, "t", warm=2) for c in (whole, half))
    assert b.gpu_hours == pytest.approx(a.gpu_hours / 2) and b.mean_pods == pytest.approx(a.mean_pods)


def test_the_slice_is_the_smallest_that_fits_unless_prompts_or_throughput_suffer() -> None:
    assert H100 is not None
    cap = Capacity()
    chat = steady(1.0, 3600, tin=1000.0, tout=250.0)
    on, name = replay_sizing.choose_slice(chat, cap, H100, 2.0, 32_768, 3600, 0.25, 0.9)
    assert name == "3g.40gb" and on.gpu_share == 0.5  # 1g/2g cannot hold the weights
    # prompts of 20,000 tokens: 1.3 s on the whole GPU, 3.1 s on 3g and 2.3 s on 4g: no slice keeps them
    long = steady(1.0, 600, tin=20_000.0, tout=10.0)
    assert replay_sizing.choose_slice(long, cap, H100, 2.0, 32_768, 3600, 0.25, 0.9)[1] == "whole GPU"
    # prefill-heavy: 3g serves 86% of the whole GPU's requests per GPU share (3 SM slices of 7 for half
    # the GPU), 4g 99%: 4g.40gb
    heavy = steady(1.0, 600, tin=2_000.0, tout=30.0)
    assert replay_sizing.choose_slice(heavy, cap, H100, 2.0, 32_768, 3600, 0.25, 0.9)[1] == "4g.40gb"
    assert replay_sizing.choose_slice(chat, cap, H100, 2.0, 200_000, 3600, 0.25, 0.9)[1] == "whole GPU"  # KV too small


def test_the_clump_check_refuses_a_slice_a_whole_gpu_clears_clumps_on_in_time() -> None:
    assert H100 is not None
    cap = Capacity()
    # 20 requests of 1,000 prompt tokens at once each minute: one whole GPU clears a clump in 1.7 s, within the
    # 2 s objective, but 40% of it after 2 s x 3/7 (the 3g slice's SM share): one slice would miss them
    t = np.repeat(np.arange(0.0, 3600.0, 60.0), 20)
    clumps = Trace(t, np.full(t.size, 1000.0), np.full(t.size, 250.0))
    smooth = steady(20 / 60, 3600, tin=1000.0, tout=250.0)  # the same requests/s, one at a time
    assert replay_sizing.choose_slice(clumps, cap, H100, 2.0, 32_768, 3600, 0.25, 0.9)[1] == "3g.40gb"
    assert replay_sizing.choose_slice(clumps, cap, H100, 2.0, 32_768, 3600, 0.25, 0.9, clump_bar=0.02)[1] \
        == "whole GPU"
    assert replay_sizing.choose_slice(smooth, cap, H100, 2.0, 32_768, 3600, 0.25, 0.9, clump_bar=0.02)[1] \
        == "3g.40gb"
    # clumps of 15 clear in 1.0 s, within 2 s x 4/7: the next profile, 4g.40gb, passes the check
    t15 = np.repeat(np.arange(0.0, 3600.0, 60.0), 15)
    fifteen = Trace(t15, np.full(t15.size, 1000.0), np.full(t15.size, 250.0))
    assert replay_sizing.choose_slice(fifteen, cap, H100, 2.0, 32_768, 3600, 0.25, 0.9, clump_bar=0.02)[1] \
        == "4g.40gb"


def test_cli_rejects_an_unknown_slice_and_runs_whole_gpus_with_none(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "chunk-trace.csv"
    path.write_text("0,0.5,1.0,Gamma,1.0,2.0\n")
    assert replay.main(["--trace", str(path), "--format", "servegen", "--slice", "5g.50gb"]) == 2
    assert capsys.readouterr().err.startswith("error: --slice 5g.50gb: H100-80GB has profiles 1g.10gb")
    assert replay.main(["--trace", str(path), "--format", "servegen", "--slice", "2g.20gb"]) == 2
    assert "the model does not fit" in capsys.readouterr().err
    assert replay.main(["--trace", str(path), "--format", "servegen", "--slice", "none",
                        "--policies", "reactive,reactive-rightsized"]) == 0
    out = capsys.readouterr().out
    assert "run on whole GPU" in out
    rows = [line.split()[1] for line in out.splitlines() if line.startswith("policy=")]
    assert rows[0] == rows[1]  # the same shape: the same GPU-hours


class ShapeChange:
    """Two pods of ``first``, then from ``at_s`` the pods of ``then`` a rollout leaves it with."""

    def __init__(self, first: Capacity, then: Capacity, at_s: int) -> None:
        self.cap, self.then, self.at_s = first, then, at_s
        self.seen: list[tuple[int, int]] = []

    def __call__(self, obs: replay_sim.Observed) -> int:
        self.seen.append((obs.k, obs.pods))
        if obs.k >= self.at_s:
            self.cap = self.then
            return obs.pods
        return 2


def test_a_shape_change_rolls_out_new_pods_while_the_old_ones_serve() -> None:
    half, whole = replace(CAP, gpu_share=0.5, prefill_tps=500.0, decode_tps=500.0), CAP
    policy = ShapeChange(half, whole, at_s=120)
    r = simulate(steady(2.0, 600), half, policy, "rollout", warm=2)
    # two half pods (1 GPU) until 120 s; then one whole pod (the same requests/s) starts and, for its 30 s cold
    # start, both shapes are held (2 GPUs); from 150 s the whole pod alone (1 GPU)
    assert r.gpus_per_min[0] == pytest.approx(1.0)
    assert r.gpus_per_min[2] == pytest.approx((30 * 2.0 + 30 * 1.0) / 60)
    assert r.gpus_per_min[3] == pytest.approx(1.0)
    assert dict(policy.seen)[135] == 1  # the policy counts pods of the new shape
    assert np.all(np.isfinite(r.ttft_s)) and r.ttft_s.max() < 1.0  # the old pods served through the rollout
    assert r.pod_starts == 1 and r.cold_starts == 0


def test_the_histogram_reads_misses_as_the_collector_query_does() -> None:
    ttft = np.array([0.5, 1.5, 3.0])
    # objective 2 s between vLLM's 1.0 and 2.5 bounds, 2/3 of the way: within = 1 x 1/3 + 2 x 2/3 = 5/3
    assert replay_ours.histogram_over(ttft, 2.0) == pytest.approx(3 - 5 / 3)
    assert replay_ours.histogram_over(ttft, 2.5) == 1.0  # a bound: what lies above it
    assert replay_ours.histogram_over(np.array([3000.0]), 5000.0) == 1.0  # past the last bound: above it


@pytest.mark.parametrize("at_zero", [True, False], ids=["after-zero", "always-up"])
def test_ours_leaves_a_wakes_misses_out_of_the_whole_gpu_bar(at_zero: bool) -> None:
    """Every request arrives in the first 30 s after a run at zero and misses (it waited the cold start): they
    are the wake budget's to weigh, not the shape's, so the slice stays; the same misses with replicas up
    throughout move it to whole GPUs."""
    k = 86_400 + 600  # past the day of history the bar needs
    ours = replay_ours.Ours(replace(CAP, gpu_share=0.5), WorkloadClass.REAL_TIME, 3600, ScalingSettings(),
                       whole=CAP)
    steps = np.arange(k // 60 + 2)
    ours.ready_n = np.ones(steps.size)
    ours.ready_sum = np.where((steps % 10 < 5) & at_zero, 0.0, 1.0)  # 5 steps at zero, then 5 up, every 10 min
    ours.pods_sum = ours.ready_sum.copy()  # no pod while at zero
    arrival = np.array([t for t in range(k) if t % 600 in range(300, 330)], dtype=float)  # at each wake's start
    arrivals = np.bincount(arrival.astype(np.int64), minlength=k).astype(float)
    ttft = np.full(arrival.size, 20.0)  # first token within the wake's steps, far over the 2 s objective
    obs = replay_sim.Observed(k, 1, 1, 1, 0, arrivals, np.full(arrival.size, 100.0), np.full(arrival.size, 10.0),
                          ttft, arrival)
    ours._escalate(obs)
    assert (ours.escalated_s is None) == at_zero
    assert (ours.whole is None) != at_zero


def test_ours_moves_a_slice_that_misses_its_objective_to_whole_gpus_after_a_day() -> None:
    """A service whose every request misses: ours on a half-GPU slice escalates once a day of history exists."""
    slow = replace(CAP, gpu_share=0.5, prefill_tps=40.0)  # 100-token prompts: 2.5 s of prefill, over 2 s
    ours = replay_ours.Ours(slow, WorkloadClass.REAL_TIME, 3600, ScalingSettings(), whole=CAP)
    trace = steady(0.02, 26 * 3600)
    r = simulate(trace, slow, ours, "ours", warm=1)
    assert ours.escalated_s is not None and 86_400 <= ours.escalated_s < 86_400 + 3600
    assert ours.cap == CAP and ours.whole is None
    assert ours.shape_since == pd.Timestamp(ours.escalated_s, unit="s", tz="UTC")  # its knee reads from here on
    assert ours.plan is not None and any(r.startswith("capacity and error budget read from") for r in ours.plan.reasons)
    day2 = trace.arrival_s > ours.escalated_s + CAP.cold_start_s
    assert (r.ttft_s[~day2][:100] > 2.0).all() and (r.ttft_s[day2] <= 2.0).all()


@pytest.mark.parametrize("whole_max", [None, 3])
def test_ours_cap_becomes_static_peaks_whole_gpus_once_it_moves(whole_max: int | None) -> None:
    """Capped at 8 slices, ours moves to whole GPUs after a day; with ``whole_max`` its cap, the plan in force and
    every later plan hold at most that many whole GPUs; without, the slice's cap stays."""
    slow = replace(CAP, gpu_share=0.5, prefill_tps=40.0)
    ours = replay_ours.Ours(slow, WorkloadClass.REAL_TIME, 3600, ScalingSettings(max_replicas=8), whole=CAP,
                            whole_max=whole_max)
    simulate(steady(0.02, 26 * 3600), slow, ours, "ours", warm=1)
    assert ours.escalated_s is not None and ours.plan is not None
    assert ours.settings.max_replicas == (whole_max or 8)
    assert ours.plan.max_replicas <= (whole_max or 8)


def _boxes(fig: Any, texts: list[Any]) -> list[Any]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw_without_rendering()
    return [t.get_window_extent(renderer) for t in texts if t.get_visible()]


def test_the_sweep_chart_keeps_client_names_off_each_other() -> None:
    """Eight clients within a point of each other: the names that show do not overlap (each other or the
    legend); where one cannot fit beside its dot it is left out, and names far apart all show."""
    from replay_charts import ClientPoint, sweep_figure

    crowd = [ClientPoint(f"chunk-{i}", {"static-peak": (100.0, 0.0), "ours": (30.0 + 0.2 * i, 0.1 + 0.01 * i)})
             for i in range(8)]
    fig = sweep_figure(crowd, ("ours",))
    ax = fig.axes[0]
    names = list(ax.texts)
    shown = _boxes(fig, names)
    assert 2 <= len(shown) < len(names)
    legend = _boxes(fig, [ax.get_legend()])[0]
    assert not any(a.overlaps(b) for i, a in enumerate(shown) for b in [*shown[i + 1:], legend])
    apart = [ClientPoint(f"chunk-{i}", {"static-peak": (100.0, 0.0), "ours": (10.0 + 20 * i, 0.1)}) for i in range(4)]
    assert all(t.get_visible() for t in sweep_figure(apart, ("ours",)).axes[0].texts)


def test_the_replay_chart_stacks_labels_of_moves_close_together() -> None:
    from replay_charts import replay_figure

    arrivals = np.arange(0.0, 7200.0, 10.0)
    moves = {"ours: 3g.40gb → whole GPUs": 3600.0, "ours: whole GPUs → 3g.40gb": 3660.0}
    fig = replay_figure(arrivals, {"ours": (np.ones(121), np.full(arrivals.size, 0.5))}, 2.0, "t", moves)
    labels = list(fig.axes[1].texts)
    first, second = _boxes(fig, labels)
    assert not first.overlaps(second)


def test_the_sweep_legend_covers_no_client_and_no_tick_label_is_clipped() -> None:
    """Clients in every corner of the plot and at its right middle, where the legend used to sit over them;
    and every drawn tick label inside its figure (keep_ticks_inside aligns one that would stick out)."""
    from replay_charts import ClientPoint, replay_figure, sweep_figure

    from recommender.outputs.charts import drawn_xticklabels

    corners = [ClientPoint(f"chunk-{i}", {"static-peak": (100.0, 0.0), "ours": (x, y)})
               for i, (x, y) in enumerate([(2, 0.01), (2, 20), (98, 0.01), (98, 20), (50, 1), (95, 2), (97, 1.7)])]
    fig = sweep_figure(corners, ("ours",))  # (97, 1.7) sat under the old legend, at the plot's right middle
    ax = fig.axes[0]
    legend = _boxes(fig, [ax.get_legend()])[0]
    points = [xy for c in ax.collections if hasattr(c, "get_offsets") and len(c.get_offsets())
              for xy in ax.transData.transform(c.get_offsets())]
    assert points and not any(legend.x0 <= x <= legend.x1 and legend.y0 <= y <= legend.y1 for x, y in points)
    arrivals = np.arange(0.0, 3 * 86_400.0 + 60, 60.0)  # to d3 00:00: a tick at the very end
    minutes = arrivals.size // 60 + 1
    for figure in (fig, replay_figure(arrivals, {"ours": (np.ones(minutes), np.full(arrivals.size, 0.5))}, 2.0,
                                      "three days")):
        ticks = [t for a in figure.axes for t in drawn_xticklabels(a)]
        assert ticks and all(figure.bbox.x0 <= b.x0 and b.x1 <= figure.bbox.x1 for b in _boxes(figure, ticks))


def test_a_tick_label_at_the_figures_edge_is_aligned_inside_it() -> None:
    from matplotlib.figure import Figure

    from recommender.outputs.charts import drawn_xticklabels, keep_ticks_inside

    fig = Figure(figsize=(4, 2))
    ax = fig.subplots()
    ax.set_xlim(0, 10)
    ax.set_xticks([0, 5, 10], ["start", "middle", "the very last tick"])
    fig.subplots_adjust(left=0.2, right=0.99)

    def outside() -> int:
        return sum(b.x1 > fig.bbox.x1 or b.x0 < fig.bbox.x0 for b in _boxes(fig, drawn_xticklabels(ax)))

    assert outside() == 1  # centred on its tick at the right edge, half of it is cut off
    assert keep_ticks_inside(fig) == 1 and outside() == 0
