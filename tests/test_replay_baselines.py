"""The replay's baselines are honest: no reactive variant holds more replicas than static peak needs (its count
on the trace, in the variant's shape), and the right-sized reactive runs on the shape ours runs on."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import replay
import replay_sim
from replay_capacity import Capacity
from replay_sim import simulate
from replay_sizing import static_peak
from replay_trace import Trace

CAP = Capacity(prefill_tps=1000.0, decode_tps=1000.0, seq_tps=100.0, kv_tokens=100_000.0, max_seqs=8, cold_start_s=30.0)


def bursts() -> Trace:
    """Two-minute bursts of 30 requests/s (3,000 prefill tokens/s: three replicas' worth) every ten minutes, 1/s
    between: the waiting queue grows to hundreds while new pods start, and KEDA's waiting target of 5 per
    replica reads it as a need for tens of replicas."""
    t = np.concatenate([np.concatenate((np.arange(s, s + 120, 1 / 30.0), np.arange(s + 120, s + 600, 1.0)))
                        for s in range(0, 1800, 600)])
    return Trace(t, np.full(t.size, 100.0), np.full(t.size, 10.0))


def most_pods(trace: Trace, entry: replay.Contender, name: str) -> int:
    """The most pods the policy held (starting ones too) at any HPA sync, and the count it asked for last."""
    policy, held = entry.make(), [entry.start]

    def spy(obs: replay_sim.Observed) -> int:
        want = policy(obs)
        held.append(max(obs.pods, want))
        return want

    simulate(trace, entry.cap, spy, name, entry.start)
    return max(held)


@pytest.mark.parametrize("shape", ["whole", "half"])
def test_no_reactive_variant_holds_more_replicas_than_static_peak_needs(shape: str) -> None:
    trace = bursts()
    shaped = CAP if shape == "whole" else replace(CAP, prefill_tps=500.0, decode_tps=500.0, kv_tokens=50_000.0,
                                                  gpu_share=0.5)
    args = replay.parse_args(["--trace", "t.csv", "--format", "servegen"])
    warm = static_peak(trace, CAP, args.ttft_objective_s)
    table = replay.contenders(args, trace, CAP, shaped, warm)
    assert table["reactive-rightsized"].cap == table["ours"].cap == shaped  # right-sized as ours is
    assert table["reactive"].cap == table["reactive-zero"].cap == CAP  # on whole GPUs, as services run today
    reactive = [name for name in table if name.startswith("reactive")]
    assert {"reactive", "reactive-zero"} <= set(reactive) and len(reactive) >= 3
    for name in reactive:
        entry = table[name]
        bound = replay.same_capacity(warm, trace, CAP, entry.cap)
        most = most_pods(trace, entry, name)
        assert entry.start == bound and most <= bound, f"{name} held {most} pods, static peak needs {bound}"


@pytest.mark.parametrize("warm", [2, 150])
def test_ours_may_scale_to_static_peaks_capacity_where_the_default_cap_is_lower(warm: int) -> None:
    """A service whose peak needs more replicas than ``scaling.max_replicas`` (100, KEDA's default) would have
    the cap raised by its owner: ours is capped at the larger of the default and static peak's count in its
    shape, the reactive variants' bound; the default stands where it is the larger."""
    trace, shaped = bursts(), replace(CAP, prefill_tps=500.0, decode_tps=500.0, kv_tokens=50_000.0, gpu_share=0.5)
    args = replay.parse_args(["--trace", "t.csv", "--format", "servegen"])
    ours = replay.contenders(args, trace, CAP, shaped, warm)["ours"].make()
    default = replay.ScalingSettings().max_replicas
    assert ours.settings.max_replicas == max(default, replay.same_capacity(warm, trace, CAP, shaped))
    assert (ours.settings.max_replicas > default) is (warm == 150)


@pytest.mark.parametrize("warm", [2, 150])
def test_the_window_replay_caps_ours_as_the_full_replay_does(warm: int) -> None:
    """replay_window.py (the quick loop a client's misses are diagnosed with) gives ours replay.py's settings:
    its cap raised to static peak's count in ours' shape, not the product default that capped the half's
    largest clients (benchmarks/REPLAY.md, "The worst per-client misses of ours")."""
    import replay_window

    trace, shaped = bursts(), replace(CAP, prefill_tps=500.0, decode_tps=500.0, kv_tokens=50_000.0, gpu_share=0.5)
    args = replay.parse_args(["--trace", "t.csv", "--format", "servegen"])
    full = replay.contenders(args, trace, CAP, shaped, warm)["ours"].make()
    assert isinstance(full, replay.Ours)
    window = replay_window.ours_settings(trace, CAP, shaped, warm, None)
    assert window.max_replicas == full.settings.max_replicas
    # both keep the recurring-burst floor over ours' refit period, as the controller does over its interval
    assert window.recurring_floor_interval_s == full.settings.recurring_floor_interval_s == float(args.refit_s)
    assert replay_window.ours_settings(trace, CAP, shaped, warm, 0.5).burst_floor_budget_frac == 0.5


def test_the_window_replays_log_rolls_out_ours_move_to_whole_gpus() -> None:
    """``--plan-every`` wraps ours; the simulator reads the policy's ``cap`` to roll out a change of shape, so the
    wrapper must pass ours' on: a logged replay moves to whole GPUs where an unlogged one does."""
    import replay_window

    trace, shaped = bursts(), replace(CAP, prefill_tps=500.0, decode_tps=500.0, kv_tokens=50_000.0, gpu_share=0.5)
    args = replay.parse_args(["--trace", "t.csv", "--format", "servegen"])
    ours = replay.contenders(args, trace, CAP, shaped, 2)["ours"].make()
    assert isinstance(ours, replay.Ours)
    logged = replay_window.Logged(ours, 60)
    assert logged.cap is ours.cap == shaped
    ours.cap = CAP  # as Ours._escalate moves it
    assert logged.cap is CAP


def test_the_window_replay_names_why_each_request_missed() -> None:
    """``--misses`` counts every request over the objective once, under what the pool held when it arrived: a
    pool that never grows misses the bursts for want of replicas; one that follows the arrivals misses fewer
    that way and the rest while its new pods start or drain the queue left behind."""
    import replay_window

    trace = bursts()
    means = float(trace.input_tokens.mean()), float(trace.output_tokens.mean())

    def follows(obs: replay_sim.Observed) -> int:
        return 4 if obs.arrivals_per_s[-15:].sum() > 150 else 1

    counts = {}
    for name, policy in (("constant", lambda obs: 1), ("follows", follows)):
        recorded = replay_window.Recorded(policy, means, CAP)
        result = simulate(trace, CAP, recorded, name, 1)
        counts[name] = replay_window.misses(trace, result.ttft_s, recorded.rows, 2.0)
        assert sum(counts[name].values()) == int((result.ttft_s > 2.0).sum()) > 0
    assert set(counts["constant"]) == set(replay_window.CAUSES)
    # a pool that never grows has no pod starting: its misses lack replicas, then drain the burst's queue after it
    assert counts["constant"]["pods starting"] == 0
    assert counts["constant"]["asked too few"] > counts["constant"]["backlog"] > 0
    assert counts["follows"]["asked too few"] < counts["constant"]["asked too few"]
    assert counts["follows"]["pods starting"] + counts["follows"]["backlog"] > 0


def test_the_window_replay_puts_ours_gpu_hours_down_to_what_held_its_pods() -> None:
    """``--attribute`` puts every GPU-hour ours held down to what held it: the bursts' pods to the triggers that
    asked for them, the quiet minutes' to minReplicas, the first plan's 300 s to the replicas it found; the parts
    add up to the run's GPU-hours but for the last sync."""
    import replay_window

    trace = bursts()
    args = replay.parse_args(["--trace", "t.csv", "--format", "servegen"])
    entry = replay.contenders(args, trace, CAP, CAP, 2)["ours"]
    ours = entry.make()
    assert isinstance(ours, replay.Ours)
    attributed = replay_window.Attributed(replay_window.Logged(ours, 10**9))
    assert attributed.ours is ours and attributed.cap is ours.cap
    result = simulate(trace, CAP, attributed, "ours", entry.start)
    line = attributed.close(result.gpu_hours)
    held = attributed.held
    assert set(held) == set(replay_window.HELD_BY)
    assert 0 <= result.gpu_hours - sum(held.values()) < 0.01 * result.gpu_hours  # the pods after the last sync
    assert held["objective trigger, first plan"] > 0  # the first 300 s, before any plan: the replicas found
    assert held["rate trigger"] + held["waiting trigger"] > 0  # the bursts
    assert held["minReplicas"] > 0
    assert line.startswith("# GPU-hours by what held the pods: minReplicas ")
