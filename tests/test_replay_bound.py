"""The replay's past-peak reference: it keeps the most replicas any past minute needed, so only rises above every
earlier minute leave requests over the objective, and it reads only the past."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import replay
import replay_sim
from replay_bound import PastPeak
from replay_capacity import Capacity
from replay_sim import simulate
from replay_trace import Trace

CAP = Capacity(prefill_tps=1000.0, decode_tps=1000.0, seq_tps=100.0, kv_tokens=100_000.0, max_seqs=8, cold_start_s=30.0)
BURST_S = (600, 1800)  # two-minute bursts of 30 requests/s, nothing between: the second no higher than the first


def two_bursts() -> Trace:
    t = np.concatenate([np.arange(s, s + 120, 1 / 30.0) for s in BURST_S])
    return Trace(t, np.full(t.size, 100.0), np.full(t.size, 10.0))


def asks(trace: Trace, policy: PastPeak) -> tuple[dict[int, int], np.ndarray]:
    """What ``policy`` asked at each HPA sync, and each request's TTFT, starting from one ready replica."""
    asked: dict[int, int] = {}

    def spy(obs: replay_sim.Observed) -> int:
        asked[obs.k] = policy(obs)
        return asked[obs.k]

    return asked, simulate(trace, CAP, spy, "past-peak", 1).ttft_s


def test_past_peak_misses_only_the_rise_above_every_earlier_minute() -> None:
    trace = two_bursts()
    asked, ttft = asks(trace, PastPeak(CAP, 0.3, burst=20))
    first = trace.arrival_s < BURST_S[1]
    assert (ttft[first] > 2.0).sum() > 0  # the first burst waits a cold start behind a queue
    assert (ttft[~first] > 2.0).sum() == 0  # the second finds what the first needed still held
    # 30 requests/s x 0.11 replica-seconds each = 3.3 replicas of work at 70% utilisation: 5, held through the gap
    gap = [n for k, n in asked.items() if BURST_S[0] + 300 <= k < BURST_S[1]]
    assert gap and min(gap) == 5
    assert max(asked.values()) == 20  # the burst count while requests wait


def test_past_peak_reads_only_the_past() -> None:
    """Its asks up to the second burst are the same whether or not the trace holds that burst."""
    full = two_bursts()
    cut = full.arrival_s < BURST_S[1]
    early = Trace(full.arrival_s[cut], full.input_tokens[cut], full.output_tokens[cut])
    with_second, _ = asks(full, PastPeak(CAP, 0.3, burst=20))
    without, _ = asks(early, PastPeak(CAP, 0.3, burst=20))
    shared = [k for k in without if k <= BURST_S[1]]
    assert max(shared) >= BURST_S[0] + 120  # the first burst and what followed it, as far as the cut trace ran
    assert [with_second[k] for k in shared] == [without[k] for k in shared]


def test_the_replay_offers_past_peak_at_ours_cap_on_ours_shape() -> None:
    trace = two_bursts()
    args = replay.parse_args(["--trace", "t.csv", "--format", "servegen", "--policies", "ours,past-peak"])
    table = replay.contenders(args, trace, CAP, CAP, 3)
    bound, ours = table["past-peak"].make(), table["ours"].make()
    assert isinstance(bound, PastPeak) and isinstance(ours, replay.Ours)
    assert bound.burst == ours.settings.max_replicas and table["past-peak"].cap == table["ours"].cap
    default = replay.parse_args(["--trace", "t.csv", "--format", "servegen"]).policies.split(",")
    assert "past-peak" not in default  # a bound, not a contender


def test_past_peak_holds_what_it_started_with_and_each_burst_through_a_scale_down_window() -> None:
    def seen(k: int, pods: int, waiting: int = 0) -> replay_sim.Observed:
        none = np.zeros(0)
        return replay_sim.Observed(k, pods, pods, pods, waiting, np.zeros(k), none, none, none, none)

    bound = PastPeak(CAP, 0.3, burst=20)
    assert bound.hold_s == 300  # the HPA's default window: longer than this capacity's 30 s cold start
    assert [bound(seen(0, 12)), bound(seen(285, 12)), bound(seen(300, 12))] == [12, 12, 1]
    assert [bound(seen(315, 1, waiting=3)), bound(seen(600, 20)), bound(seen(615, 20))] == [20, 20, 1]
