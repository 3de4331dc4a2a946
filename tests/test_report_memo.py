"""The pipeline remembers what it derives per workload (features, class, forecasts) under digests of exactly the
inputs it read: a second run with the same inputs reuses all of it and gives the same document; a changed series
value recomputes that workload only; a changed setting the analysis reads recomputes what reads it. On disk, beside
the report cache: a spoilt or foreign memo file is one warning and a correct report; another code's is not used."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from recommender.core import usage as m
from recommender.core.inventory import VllmArgs
from recommender.core.settings import ForecastSettings, PolicySettings, Settings
from recommender.core.settings_scaling import ScalingSettings
from recommender.core.usage import Snapshot
from recommender.outputs.jsondoc import render_json
from recommender.pipeline import memostore, run
from recommender.pipeline.memo import Memo
from recommender.pipeline.memostore import DiskMemo
from tests.builders import END, index, snapshot, whole_gpu, workload

DAYS = 3
N = len(index(DAYS))
T = np.arange(N, dtype=float)
NAMES = ("chat", "code", "embed")
PARTS = ("features", "class", "forecast", "scaling")


def fleet() -> Snapshot:
    rate = {n: 5 + (i + 1) * np.sin(2 * np.pi * T * 600 / 86_400) for i, n in enumerate(NAMES)}
    ws = [workload(n, whole_gpu(vllm=VllmArgs("meta-llama/Meta-Llama-3-8B-Instruct", 0.9, 8192)),
                   kv_capacity_tokens=400_000) for n in NAMES]
    return snapshot(ws, {
        m.FB_USED_MIB: {n: 60_000.0 + 1_000 * i for i, n in enumerate(NAMES)},
        m.GR_ENGINE_ACTIVE_FRAC: {n: 0.2 + 0.1 * i for i, n in enumerate(NAMES)},
        m.REQUEST_RATE: rate,
        m.PROMPT_TOKENS_RATE: {n: r * 500 for n, r in rate.items()},
        m.GENERATION_TOKENS_RATE: {n: r * 200 for n, r in rate.items()},
        m.KV_USAGE_FRAC: {n: r / 20 for n, r in rate.items()},
        m.REQUESTS_WAITING: {n: np.where(r > 5 + i, 1.0, 0.0) for i, (n, r) in enumerate(rate.items())},
    }, days=DAYS)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[tuple[str, str]]]:
    """(part, workload name) for each feature, class, forecast and scaling plan the pipeline computes."""
    seen: Counter[tuple[str, str]] = Counter()

    def counted(part: str, fn: Callable[..., Any], arg: int) -> Callable[..., Any]:
        def wrapper(*a: Any, **kw: Any) -> Any:
            seen[(part, a[arg].ref.name)] += 1
            return fn(*a, **kw)
        return wrapper

    monkeypatch.setattr(run, "workload_features", counted("features", run.workload_features, 1))
    monkeypatch.setattr(run, "classify", counted("class", run.classify, 0))
    monkeypatch.setattr(run, "forecast_workload", counted("forecast", run.forecast_workload, 1))
    monkeypatch.setattr(run, "scaling_plan", counted("scaling", run.scaling_plan, 0))
    yield seen


def doc(snap: Snapshot, settings: Settings, memo: Memo | None) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(render_json(run.run_once(snap, settings, END, memo=memo), snap))
    out.pop("timings", None)
    return out


def test_a_second_run_reuses_everything_and_gives_the_cold_document(calls: Counter[tuple[str, str]]) -> None:
    snap, s = fleet(), Settings()
    cold = doc(snap, s, None)
    assert set(calls) == {(p, n) for p in PARTS for n in NAMES}
    memo: dict[str, Any] = {}
    assert doc(snap, s, memo) == cold and len(memo) == len(PARTS) * len(NAMES)
    calls.clear()
    assert doc(fleet(), s, memo) == cold  # the same inputs, built again: equal, not the same objects
    assert not calls


def test_a_changed_value_recomputes_that_workload_only(calls: Counter[tuple[str, str]]) -> None:
    snap, s = fleet(), Settings()
    memo: dict[str, Any] = {}
    doc(snap, s, memo)
    rate = snap.usage[m.REQUEST_RATE].copy()
    rate.iloc[N // 2, rate.columns.get_loc("ml/Deployment/code")] += 1.0  # type: ignore[index]
    changed = replace(snap, usage={**snap.usage, m.REQUEST_RATE: rate})
    cold = doc(changed, s, None)
    calls.clear()
    assert doc(changed, s, memo) == cold
    assert {n for _, n in calls} == {"code"}
    assert set(calls) == {(p, "code") for p in PARTS}


def test_a_changed_index_recomputes(calls: Counter[tuple[str, str]]) -> None:
    """The same values a step later are another window: nothing is reused."""
    snap, s = fleet(), Settings()
    memo: dict[str, Any] = {}
    doc(snap, s, memo)
    calls.clear()
    later = {k: f.set_axis(f.index + pd.Timedelta(seconds=snap.step_s)) for k, f in snap.usage.items()}
    moved = replace(snap, usage=later, start=snap.start + timedelta(seconds=snap.step_s),
                    end=snap.end + timedelta(seconds=snap.step_s))
    doc(moved, s, memo)
    assert set(calls) == {(p, n) for p in PARTS for n in NAMES}


@pytest.mark.parametrize(("settings", "parts"), [
    (Settings(policy=PolicySettings(idle_compute_frac=0.3)), {"features"}),
    (Settings(scaling=ScalingSettings(error_budget_window_s=3_600.0)), {"features", "scaling"}),
    (Settings(scaling=ScalingSettings(ttft_error_budget=0.2)), {"scaling"}),
    (Settings(forecast=ForecastSettings(horizon_s=7_200.0)), {"forecast", "scaling"}),
    (Settings(forecast=ForecastSettings(levels=(90,))), {"forecast", "scaling"}),
], ids=["idle-threshold", "budget-window", "error-budget", "horizon", "levels"])
def test_a_changed_setting_the_analysis_reads_recomputes_what_reads_it(
        calls: Counter[tuple[str, str]], settings: Settings, parts: set[str]) -> None:
    snap = fleet()
    memo: dict[str, Any] = {}
    doc(snap, Settings(), memo)
    cold = doc(snap, settings, None)
    calls.clear()
    assert doc(snap, settings, memo) == cold
    assert {p for p, _ in calls} == parts and {n for _, n in calls} == set(NAMES)


def test_a_changed_workload_recomputes_it(calls: Counter[tuple[str, str]]) -> None:
    snap, s = fleet(), Settings()
    memo: dict[str, Any] = {}
    doc(snap, s, memo)
    ws = tuple(replace(w, kv_capacity_tokens=200_000) if w.ref.name == "embed" else w for w in snap.workloads)
    changed = replace(snap, workloads=ws)
    cold = doc(changed, s, None)
    calls.clear()
    assert doc(changed, s, memo) == cold
    assert {n for _, n in calls} == {"embed"}


def test_a_memo_file_gives_back_what_was_kept(tmp_path: Path, calls: Counter[tuple[str, str]]) -> None:
    snap, s = fleet(), Settings()
    cold = doc(snap, s, None)
    first = DiskMemo(tmp_path / "m.memo")
    assert first.load() is None and doc(snap, s, first) == cold and first.save() is None
    calls.clear()
    again = DiskMemo(tmp_path / "m.memo")
    assert again.load() is None and doc(snap, s, again) == cold
    assert not calls and again.reused == len(PARTS) * len(NAMES)
    before = (tmp_path / "m.memo").stat().st_mtime_ns
    assert again.save() is None and (tmp_path / "m.memo").stat().st_mtime_ns == before  # nothing new: not rewritten


def test_forecast_frames_round_trip_exactly() -> None:
    snap = fleet()
    memo: dict[str, Any] = {}
    run.run_once(snap, Settings(), END, memo=memo)
    for k, value in memo.items():
        back = memostore.decode(k, json.loads(json.dumps(memostore.encode(k, value))))
        if k.startswith("forecast:"):
            assert len(back[0]) == len(value[0]) > 0 and back[1] == value[1]
            for a, b in zip(back[0], value[0], strict=True):
                pd.testing.assert_frame_equal(a.frame, b.frame, check_freq=True)
                assert replace(a, frame=None) == replace(b, frame=None)
        else:
            assert back == value


def _spoilt(path: Path, how: str) -> None:
    data = path.read_bytes()
    path.write_bytes({"truncated": data[: len(data) // 2], "empty": b"", "foreign": b"not a memo\n",
                      "other-format": data.replace(memostore.MAGIC + b"1\n", memostore.MAGIC + b"9\n", 1),
                      "altered": data[:-10] + bytes([data[-10] ^ 0xFF]) + data[-9:]}[how])


@pytest.mark.parametrize("how", ["truncated", "empty", "foreign", "other-format", "altered"])
def test_a_spoilt_memo_file_is_one_warning_and_a_full_computation(
        tmp_path: Path, calls: Counter[tuple[str, str]], how: str) -> None:
    snap, s = fleet(), Settings()
    cold = doc(snap, s, None)
    first = DiskMemo(tmp_path / "m.memo")
    first.load()
    doc(snap, s, first)
    first.save()
    _spoilt(tmp_path / "m.memo", how)
    calls.clear()
    spoilt = DiskMemo(tmp_path / "m.memo")
    warning = spoilt.load()
    assert warning is not None and "\n" not in warning and str(tmp_path / "m.memo") in warning
    assert doc(snap, s, spoilt) == cold and len(calls) == len(PARTS) * len(NAMES)
    assert spoilt.save() is None  # replaced by a whole file
    healed = DiskMemo(tmp_path / "m.memo")
    assert healed.load() is None and doc(snap, s, healed) == cold and healed.reused == len(PARTS) * len(NAMES)


def test_another_code_versions_memo_is_not_used_and_says_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 calls: Counter[tuple[str, str]]) -> None:
    snap, s = fleet(), Settings()
    first = DiskMemo(tmp_path / "m.memo")
    first.load()
    doc(snap, s, first)
    first.save()
    monkeypatch.setattr(memostore, "code_version", lambda: "another build")
    calls.clear()
    other = DiskMemo(tmp_path / "m.memo")
    assert other.load() is None and other.reused == 0
    doc(snap, s, other)
    assert len(calls) == len(PARTS) * len(NAMES)


def test_an_entry_that_cannot_be_decoded_is_computed_again(tmp_path: Path, calls: Counter[tuple[str, str]]) -> None:
    """A whole file of this format and code whose entry is not what this code wrote (a forged checksum)."""
    snap, s = fleet(), Settings()
    first = DiskMemo(tmp_path / "m.memo")
    first.load()
    cold = doc(snap, s, first)
    first.save()
    data = json.loads((tmp_path / "m.memo").read_bytes().split(b"\n", 3)[3])
    entries = {k: (["not-a-class", 1.0, [], "x"] if k.startswith("class:") else v) for k, v in data["entries"].items()}
    (tmp_path / "m.memo").write_bytes(memostore.dumps(entries))
    calls.clear()
    forged = DiskMemo(tmp_path / "m.memo")
    assert forged.load() is None and doc(snap, s, forged) == cold
    assert {p for p, _ in calls} == {"class"}


def test_a_memo_that_cannot_be_written_is_one_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from recommender.core import writes

    def full(path: Path | str, data: str | bytes) -> None:
        raise writes.OutputError(f"{path}: cannot write: No space left on device")

    monkeypatch.setattr(writes, "write_file", full)
    snap, s = fleet(), Settings()
    memo = DiskMemo(tmp_path / "m.memo")
    memo.load()
    doc(snap, s, memo)
    warning = memo.save()
    assert warning is not None and "No space left on device" in warning and not (tmp_path / "m.memo").exists()
    assert DiskMemo(tmp_path / "m.memo", quiet=True).save() is None


def test_no_cache_writes_no_memo(tmp_path: Path) -> None:
    res = CliRunner().invoke(__import__("recommender.cli.main", fromlist=["main"]).main,
                             ["report", "--demo", "-o", "json", "--cache-dir", str(tmp_path)],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert list(tmp_path.iterdir()) == []  # the demo is no Prometheus: neither cache nor memo


def test_scaling_plans_round_trip_with_their_types() -> None:
    """A scaling plan read back from the memo file is the plan kept: each field of the same type (an int stays an
    int, a whole float a float), its plan on today's shape nested, and a plan-less answer's reasons."""
    from policies.replicas import NoScalingPlan
    from recommender.core.plan import ScalingPlan

    today = ScalingPlan("request_rate_per_s", 3.0, 2.5, 0, 4, 2, 0.0125, 300, True, 0.2, None, ("a", "b"),
                        mean_replicas=1.0, waiting_per_replica=np.float64(7.5), basis_capacity=3.0)
    plan = replace(today, per_replica_capacity=1.5, capacity_scale=0.5, shape="mig 3g.40gb", on_today=today,
                   reasons=("x",), cold_start_s=45.0, ttft_objective_s=2, rate_window_s=np.int64(120))
    for value in (plan, today, NoScalingPlan(("no capacity", "no demand"))):
        back = memostore.decode("scaling:k", json.loads(json.dumps(memostore.encode("scaling:k", value))))
        assert back == value and type(back) is type(value)
        for a, b in ((back, value), (getattr(back, "on_today", None), getattr(value, "on_today", None))):
            if isinstance(b, ScalingPlan):
                assert [type(getattr(a, f)) for f in vars(a)] == [
                    int if isinstance(v, np.integer) else float if isinstance(v, np.floating) else type(v)
                    for v in vars(b).values()]
    nan = replace(today, headroom_frac=float("nan"))
    back = memostore.decode("scaling:k", json.loads(json.dumps(memostore.encode("scaling:k", nan))))
    assert np.isnan(back.headroom_frac) and replace(back, headroom_frac=0.0) == replace(nan, headroom_frac=0.0)


def test_the_forecasts_digest_is_the_forecasts() -> None:
    """Scaling plans are remembered under a digest of the forecasts they read: equal forecasts built again give
    the same digest; a value, a column, the index's zone or times, the model or a reason give another."""
    from recommender.pipeline.memo import forecasts_digest

    snap = fleet()
    found = run.forecast_workload(snap, snap.workloads[0], Settings().forecast)[0]
    again = run.forecast_workload(fleet(), fleet().workloads[0], Settings().forecast)[0]
    assert found and forecasts_digest(found) == forecasts_digest(again)
    f = found[0]
    nudged = f.frame.copy()
    nudged.iloc[5, 0] = np.nextafter(nudged.iloc[5, 0], np.inf)
    others = [replace(f, frame=nudged), replace(f, frame=f.frame.rename(columns={"mean": "avg"})),
              replace(f, frame=f.frame.tz_convert("Europe/Paris")),
              replace(f, frame=f.frame.set_axis(f.frame.index + pd.Timedelta(seconds=1))),
              replace(f, model="other"), replace(f, reasons=(*f.reasons, "more"))]
    digests = {forecasts_digest((o, *found[1:])) for o in others}
    assert len(digests) == len(others) and forecasts_digest(found) not in digests
    assert forecasts_digest(()) != forecasts_digest(found[:1])


def test_a_series_digest_is_its_numbers_however_the_frame_holds_them() -> None:
    """The same numbers held as float32 (exact) or float64, in a frame of one block or of one per column, give the
    same digests; one number changed changes its workload's digest only."""
    from recommender.pipeline.memo import series_digests

    snap = fleet()
    base = series_digests(snap)
    fb = snap.usage[m.FB_USED_MIB]
    narrow = replace(snap, usage={**snap.usage, m.FB_USED_MIB: fb.astype(np.float32)})
    split = replace(snap, usage={**snap.usage, m.FB_USED_MIB: pd.DataFrame({c: fb[c].to_numpy() for c in fb.columns},
                                                                           index=fb.index)})
    assert series_digests(narrow) == base == series_digests(split)
    nudged = fb.copy()
    nudged.iloc[7, 1] += 1.0
    changed = series_digests(replace(snap, usage={**snap.usage, m.FB_USED_MIB: nudged}))
    assert {k for k in base if changed[k] != base[k]} == {fb.columns[1]}


def test_a_said_input_makes_the_same_key() -> None:
    """A workload or settings written out once (``Said``) stand for themselves in a key: the same key text."""
    from recommender.pipeline.memo import Said, key

    w, s = fleet().workloads[0], Settings().scaling
    assert key("scaling", "d", Said(w), 1.5, Said(s)) == key("scaling", "d", w, 1.5, s)
    assert key("scaling", "d", Said(w), 1.5, Said(s)) != key("scaling", "d", Said(replace(w, cold_start_s=9.0)), 1.5,
                                                            Said(s))
