"""The replay's shortcuts for speed and memory give the plain loop's results to the bit: the simulator's idle skip,
the trace read a chunk at a time, whole-trace sums taken a span at a time, and the window ``ours`` reads its recent
TTFTs from."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import replay_ours
import replay_sim
import replay_trace
from replay_capacity import Capacity, floor_pct
from replay_hpa import Oracle, Reactive
from replay_results import after_jumps
from replay_sim import Observed, Policy, Result, simulate
from replay_sizing import static_peak, work_per_minute
from replay_trace import Trace, make_trace, minute_spans

from recommender.core.plan import WorkloadClass
from recommender.core.settings_scaling import ScalingSettings

CAP = Capacity(prefill_tps=1000.0, decode_tps=1000.0, seq_tps=100.0, kv_tokens=100_000.0, max_seqs=8, cold_start_s=30.0)
HALF = replace(CAP, gpu_share=0.5, prefill_tps=500.0, decode_tps=500.0)
THIRD = replace(CAP, gpu_share=1 / 3)  # a share whose sums round: the skip must add it as the loop does


def bursty(seed: int, seconds: int = 4 * 3600) -> Trace:
    """Bursts of a few minutes (up to 20 req/s, over one replica's capacity) between idle gaps of up to 40 minutes,
    and single requests in the gaps."""
    rng = np.random.default_rng(seed)
    times, t = [], 0.0
    while t < seconds:
        t += rng.uniform(0, 2400)
        length, rate = rng.uniform(30, 300), rng.uniform(0.2, 20.0)
        times.append(t + np.sort(rng.uniform(0, length, int(length * rate))))
        times.append(t + length + rng.uniform(0, 900, 3))
        t += length
    at = np.sort(np.concatenate(times))
    at -= at[0]
    return Trace(at, rng.integers(10, 400, at.size).astype(float), rng.integers(1, 200, at.size).astype(float))


class Recorder:
    """Wraps a policy and keeps what it saw at each sync; its ``cap`` (a change of shape) is the policy's."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.seen: list[tuple[float, ...]] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self.policy, name)

    def __call__(self, obs: Observed) -> int:
        want = self.policy(obs)
        self.seen.append((obs.k, obs.pods, obs.ready, obs.serving, obs.waiting, obs.served_ttft_s.size,
                          float(obs.served_ttft_s.sum()), float(obs.arrivals_per_s.sum()), want))
        return want


class Script:
    """Counts that change with time: up, to zero through an idle stretch, and a change of shape at ``move_s``."""

    def __init__(self, cap: Capacity, then: Capacity, move_s: int) -> None:
        self.cap, self.then, self.move_s = cap, then, move_s

    def __call__(self, obs: Observed) -> int:
        if obs.k >= self.move_s:
            self.cap = self.then
        phase = (obs.k // 600) % 4
        return [2, 0, 3, 1][phase] if obs.k < self.move_s else [1, 2, 0, 1][phase]


POOLS = {"reactive-zero": (CAP, 1), "reactive": (THIRD, 2), "oracle": (CAP, 1), "script": (HALF, 2), "ours": (CAP, 1)}


def make(name: str, trace: Trace) -> Policy:
    if name == "reactive-zero":
        return Reactive(min_replicas=0, max_replicas=100)
    if name == "reactive":
        return Reactive(min_replicas=1, max_replicas=100)
    if name == "oracle":
        return Oracle(trace, CAP, 0.3)
    if name == "script":
        return Script(HALF, THIRD, 7200)
    return replay_ours.Ours(CAP, WorkloadClass.REAL_TIME, 900, ScalingSettings())


def same(a: Result, b: Result) -> None:
    assert a.gpu_hours == b.gpu_hours and a.mean_pods == b.mean_pods
    assert (a.cold_starts, a.pod_starts, a.waited_on_cold_start) == (b.cold_starts, b.pod_starts,
                                                                      b.waited_on_cold_start)
    assert np.array_equal(a.ttft_s, b.ttft_s) and np.array_equal(a.gpus_per_min, b.gpus_per_min)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", list(POOLS))
def test_skipping_idle_stretches_changes_no_figure(name: str, seed: int) -> None:
    trace = bursty(seed)
    cap, warm = POOLS[name]
    runs = []
    for skip in (False, True):
        policy = Recorder(make(name, trace))
        runs.append((simulate(trace, cap, policy, name, warm, skip_idle=skip), policy.seen))
    (plain, seen_plain), (fast, seen_fast) = runs
    same(plain, fast)
    assert seen_plain == seen_fast  # the policy saw the same at every sync
    assert np.isinf(plain.ttft_s).sum() < plain.ttft_s.size  # something was served
    if name in ("reactive-zero", "script"):
        assert plain.cold_starts > 0  # the pool went to zero and back: idle stretches at zero pods


@pytest.mark.parametrize("chunk", [1, 7, 1000])
@pytest.mark.parametrize("name", list(POOLS))
def test_reading_the_trace_a_chunk_at_a_time_changes_no_figure(name: str, chunk: int,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    trace = bursty(2)
    cap, warm = POOLS[name]
    runs = []
    for size in (trace.arrival_s.size, chunk):  # the whole trace in one chunk, then in small ones
        monkeypatch.setattr(replay_sim, "CHUNK", size)
        policy = Recorder(make(name, trace))
        runs.append((simulate(trace, cap, policy, name, warm), policy.seen))
    (whole, seen_whole), (chunked, seen_chunked) = runs
    assert trace.arrival_s.size > 3 * chunk  # several chunks were read
    same(whole, chunked)
    assert seen_whole == seen_chunked
    assert np.isfinite(whole.ttft_s).sum() > 3 * chunk  # served past the first chunks


@pytest.mark.parametrize("size", [1, 50, 997])
def test_spans_cover_the_trace_in_order_and_end_at_whole_minutes(size: int) -> None:
    t = bursty(3).arrival_s
    spans = list(minute_spans(t, size))
    assert len(spans) > 3
    assert np.array_equal(np.concatenate([np.arange(t.size)[s] for s in spans]), np.arange(t.size))
    for s in spans[:-1]:
        assert s.stop - s.start >= size and t[s.stop - 1] // 60 < t[s.stop] // 60  # no minute in two spans


def test_whole_trace_sums_taken_a_span_at_a_time_are_the_same_to_the_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Per-minute work (static peak's), the jumps, the unavoidable share, the simulator's arrivals per second and
    the oracle's work per second, with spans of 97 requests as with one span: floating sums whose order a span
    split inside a minute would change. The references are the whole-trace bincounts that spans replace."""
    rng = np.random.default_rng(5)
    at = bursty(4).arrival_s
    trace = Trace(at, np.round(rng.lognormal(6, 1, at.size)), np.round(rng.lognormal(5, 1, at.size)) + 1)
    cap = Capacity(cold_start_s=30.0)  # prefill 15,000 and decode 4,000 tokens/s: work that sums inexactly
    minute = (trace.arrival_s // 60).astype(np.int64)
    one = np.bincount(minute, weights=cap.work_s(trace.input_tokens, trace.output_tokens))
    figures = []
    for span in (trace.arrival_s.size, 97):
        monkeypatch.setattr(replay_trace, "SPAN", span)
        assert np.array_equal(work_per_minute(trace, cap), one)
        policy = Recorder(Reactive(min_replicas=1, max_replicas=8))
        oracle = Oracle(trace, cap, 0.3)
        figures.append((after_jumps(trace.arrival_s, 120.0), floor_pct(trace, cap, 0.05),
                        static_peak(trace, cap, 2.0), simulate(trace, cap, policy, "reactive", 1), policy.seen,
                        (oracle.cum, oracle.mean_work)))
    (jumps, floor, peak, result, seen, (cum, mean)), (jumps_s, floor_s, peak_s, result_s, seen_s, (cum_s, mean_s)) = \
        figures
    assert np.array_equal(jumps, jumps_s) and jumps.any() and not jumps.all()
    assert floor == floor_s and 0 < floor < 100 and peak == peak_s
    same(result, result_s)
    assert seen == seen_s
    assert mean == mean_s and np.array_equal(cum, cum_s)  # the oracle's work per second, summed
    second = trace.arrival_s.astype(np.int64)
    assert np.array_equal(cum[1:], np.cumsum(np.bincount(second, weights=cap.work_s(trace.input_tokens,
                                                                                    trace.output_tokens))))


def test_a_trace_is_sorted_stably_by_arrival_only_where_it_is_not_already() -> None:
    rng = np.random.default_rng(4)
    t = np.round(rng.uniform(5, 100, 2_000))  # ties: the stable order must hold among them
    tin, tout = np.arange(t.size, dtype=float), rng.integers(0, 3, t.size).astype(float)
    unsorted = make_trace(t, tin, tout)
    order = np.argsort(t, kind="stable")
    assert np.array_equal(unsorted.arrival_s, t[order] - t[order][0])
    assert np.array_equal(unsorted.input_tokens, tin[order])
    assert np.array_equal(unsorted.output_tokens, np.maximum(tout[order], 1))
    again = make_trace(t[order], tin[order], tout[order])  # already in order: no sort, the same trace
    for a, b in zip((unsorted.arrival_s, unsorted.input_tokens, unsorted.output_tokens),
                    (again.arrival_s, again.input_tokens, again.output_tokens), strict=True):
        assert a.dtype == b.dtype == np.float64 and np.array_equal(a, b)


def test_ours_reads_every_recent_ttft_from_the_window_it_slices() -> None:
    """``_served_from`` leaves out only requests whose first token came before ``start``, for any TTFTs (long
    waits included) and any start."""
    rng = np.random.default_rng(3)
    ours = replay_ours.Ours(CAP, WorkloadClass.REAL_TIME, 300, ScalingSettings())
    arrival = np.sort(rng.uniform(0, 50_000, 5_000))
    long = rng.random(arrival.size) < 0.01  # a few waited long
    ttft = np.where(long, rng.uniform(0, 5_000, arrival.size), rng.uniform(0, 2, arrival.size))
    left_out = 0
    for served in (100, 2_000, 5_000):  # more served at each call, as the replay's refits see them
        obs = Observed(int(arrival[served - 1]) + 1, 1, 1, 1, 0, np.zeros(1), arrival, arrival, ttft[:served],
                       arrival[:served])
        first = arrival[:served] + ttft[:served]
        for start in rng.integers(0, obs.k, 20):
            since = ours._served_from(obs, int(start))
            assert (first[:since] < start).all()
            left_out += since
    assert left_out > 0  # the window does leave requests out


@pytest.mark.parametrize("whole", [True, False], ids=["whole-tokens", "fractional"])
def test_ours_token_means_from_running_sums_are_numpys_to_the_bit(whole: bool) -> None:
    rng = np.random.default_rng(5)
    tokens = rng.lognormal(6.0, 1.5, 200_000)
    tokens = np.maximum(1, tokens.round()) if whole else tokens
    ours = replay_ours.Ours(CAP, WorkloadClass.REAL_TIME, 300, ScalingSettings())
    for seen in np.sort(rng.integers(1, tokens.size, 30)):
        obs = Observed(0, 1, 1, 1, 0, np.zeros(1), tokens[:seen], tokens[::-1][:seen], np.zeros(0), np.zeros(0))
        assert ours._token_means(obs) == (float(obs.tokens_in.mean()), float(obs.tokens_out.mean()))
    assert (ours.token_sums is not None) == whole
