"""Forecasts made aside (``run_once(fork=True)``, as a report does): a forked child makes them while the features
and classes are made here, and the plan is the same; where no child can be had, or it fails, they are made
here."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from collectors.files import read_snapshot
from recommender.core.settings import Settings
from recommender.demo import demo_path
from recommender.outputs.jsondoc import render_json
from recommender.pipeline import aside as aside_mod
from recommender.pipeline import run
from recommender.pipeline.aside import aside


def _started(fn: Any) -> aside_mod.Aside[Any]:
    started = aside(fn)
    if started is None:
        pytest.skip("one core or no fork here: nothing is done aside")
    return started


def test_the_childs_value_comes_back() -> None:
    assert np.array_equal(_started(lambda: np.arange(5) / 3).result(), np.arange(5) / 3)  # type: ignore[arg-type]


def test_a_child_that_fails_or_sends_what_cannot_be_sent_gives_none() -> None:
    assert _started(lambda: 1 / 0).result() is None
    assert _started(lambda: lambda: 1).result() is None  # a lambda cannot be pickled


def test_nothing_is_forked_on_one_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aside_mod, "cores", lambda: 1)
    assert aside(lambda: 1) is None


@pytest.fixture
def made_in(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The process ids that made each forecast, as this process sees them (a child's calls are not seen)."""
    pids: list[int] = []
    real = run.forecast_workload

    def spy(*args: Any) -> Any:
        pids.append(os.getpid())
        return real(*args)

    monkeypatch.setattr(run, "forecast_workload", spy)
    monkeypatch.setattr(run, "FORK_MIN_FORECASTS", 1)
    return pids


def test_forecasts_made_aside_give_the_same_plan(made_in: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    snap = read_snapshot(demo_path())
    light = replace(snap, usage={})
    here = render_json(run.run_once(snap, Settings(), snap.end), light)
    assert made_in  # the demo has forecasts to make
    made_in.clear()
    forked = render_json(run.run_once(snap, Settings(), snap.end, fork=True, memo={}), light)
    if aside(lambda: None) is None:
        pytest.skip("one core or no fork here: nothing is done aside")
    assert not made_in  # all made in the child
    assert forked == here


def test_forecasts_are_made_here_when_no_child_can_be_had(made_in: list[int], monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    snap = read_snapshot(demo_path())
    light = replace(snap, usage={})
    here = render_json(run.run_once(snap, Settings(), snap.end), light)
    made_in.clear()
    monkeypatch.setattr(aside_mod, "cores", lambda: 1)
    assert render_json(run.run_once(snap, Settings(), snap.end, fork=True), light) == here
    assert made_in and set(made_in) == {os.getpid()}


def test_forecasts_the_memo_holds_are_not_made_again(made_in: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    snap = read_snapshot(demo_path())
    memo: dict[str, Any] = {}
    first = run.run_once(snap, Settings(), snap.end, memo=memo)
    made_in.clear()
    started: list[object] = []
    real = run.aside

    def spy(fn: Any) -> Any:
        started.append(fn)
        return real(fn)

    monkeypatch.setattr(run, "aside", spy)
    again = run.run_once(snap, Settings(), snap.end, memo=memo, fork=True)
    assert not started and not made_in  # every forecast was in the memo: no child
    light = replace(snap, usage={})
    assert render_json(again, light) == render_json(first, light)
