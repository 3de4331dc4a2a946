"""A plan made with its usage handed over (``run_once(release=True)``, as a plan-only report does): the frames no
stage after the features reads are freed before the classifier runs, and the plan is the same."""

from __future__ import annotations

import weakref
from dataclasses import replace
from typing import Any

import pytest

from collectors.files import read_snapshot
from recommender.core import usage as m
from recommender.core.settings import Settings
from recommender.core.usage import Snapshot
from recommender.demo import demo_path
from recommender.outputs.jsondoc import render_json
from recommender.pipeline import run
from tests.promcluster import Cluster, report_json


def _handed(snap: Snapshot) -> Snapshot:
    """The snapshot with its own dict of its own frames (nothing else holds them)."""
    return replace(snap, usage={k: v.copy() for k, v in snap.usage.items()})


def test_a_plan_made_with_the_usage_handed_over_is_the_same() -> None:
    snap = read_snapshot(demo_path())
    light = replace(snap, usage={})
    full = render_json(run.run_once(_handed(snap), Settings(), snap.end), light)
    handed = _handed(snap)
    released = render_json(run.run_once(handed, Settings(), snap.end, release=True), light)
    assert released == full
    assert set(handed.usage) == set(snap.usage) & run.READ_AFTER_FEATURES  # the others were taken out
    assert set(snap.usage) - run.READ_AFTER_FEATURES  # (the demo has frames to free)


def test_frames_no_later_stage_reads_are_freed_before_the_classifier(monkeypatch: pytest.MonkeyPatch) -> None:
    snap = _handed(read_snapshot(demo_path()))
    dropped = {k: weakref.ref(v) for k, v in snap.usage.items() if k not in run.READ_AFTER_FEATURES}
    kept = {k: weakref.ref(v) for k, v in snap.usage.items() if k in run.READ_AFTER_FEATURES}
    assert m.FB_USED_MIB in dropped and m.REQUEST_RATE in kept
    seen: dict[str, bool] = {}
    real = run._classes

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.update({k: r() is None for k, r in (dropped | kept).items()})
        return real(*args, **kwargs)

    monkeypatch.setattr(run, "_classes", spy)
    run.run_once(snap, Settings(), snap.end, release=True)
    assert seen == {**{k: True for k in dropped}, **{k: False for k in kept}}


def test_a_report_over_real_prometheus_is_the_same_without_the_release(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    released = report_json(cluster, "--no-cache")
    monkeypatch.setattr(run, "READ_AFTER_FEATURES", frozenset(m.USAGE_METRICS))  # nothing taken out
    assert released["workloads"] and report_json(cluster, "--no-cache") == released
