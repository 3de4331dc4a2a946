"""Forecasts shared with a forked child (``run_once(fork=True)``, as a report does): it makes them from the front
while the features and classes are made here, this process the rest from the back, and the plan is the same;
where no child can be had, or it fails, they are made here."""

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
from recommender.pipeline.aside import share

PARENT = os.getpid()


def _shared(n: int, make: Any) -> dict[int, Any]:
    started = share(n, make)
    if started is None:
        pytest.skip("one core or no fork here: nothing is shared")
    return started.result()


def test_every_item_comes_back_made_by_one_or_the_other() -> None:
    got = _shared(40, lambda i: np.arange(i) / 3)
    assert sorted(got) == list(range(40))
    assert all(np.array_equal(v, np.arange(i) / 3) for i, v in got.items())


def _child_fails(i: int) -> object:
    if os.getpid() != PARENT:
        raise RuntimeError("in the child")
    return i * 2


def _child_cannot_send(i: int) -> object:
    return (lambda: i) if os.getpid() != PARENT else i * 2  # a lambda cannot be pickled


@pytest.mark.parametrize("make", [_child_fails, _child_cannot_send])
def test_what_a_failed_child_took_is_missing_and_the_rest_is_made_here(make: Any) -> None:
    got = _shared(50, make)
    assert got and all(v == 2 * i for i, v in got.items())  # only this process' values
    assert len(got) >= 49  # the child took at most one before it failed


def test_nothing_is_forked_on_one_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aside_mod, "cores", lambda: 1)
    assert share(3, lambda i: i) is None


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


def test_forecasts_shared_with_a_child_give_the_same_plan(made_in: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    snap = read_snapshot(demo_path())
    light = replace(snap, usage={})
    here = render_json(run.run_once(snap, Settings(), snap.end), light)
    total = len(made_in)
    assert total  # the demo has forecasts to make
    made_in.clear()
    forked = render_json(run.run_once(snap, Settings(), snap.end, fork=True, memo={}), light)
    if aside_mod.cores() < 2:
        pytest.skip("one core: nothing is shared")
    assert len(made_in) < total  # the child made some (it starts before the features; this process at the end)
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
    real = run.share

    def spy(n: int, make: Any) -> Any:
        started.append(make)
        return real(n, make)

    monkeypatch.setattr(run, "share", spy)
    again = run.run_once(snap, Settings(), snap.end, memo=memo, fork=True)
    assert not started and not made_in  # every forecast was in the memo: no child
    light = replace(snap, usage={})
    assert render_json(again, light) == render_json(first, light)
