"""Classification: the annotation, the strong-evidence rules, the model, and the committed training table."""

from __future__ import annotations

from dataclasses import asdict, fields

import numpy as np
import pandas as pd
import pytest

from recommender.analysis.classify import (
    MIN_DEMOTION_PROB,
    classify,
    load_class_model,
    load_training_table,
    model_inputs,
    shape_from_row,
    train_model,
)
from recommender.analysis.shape import SeriesShape, demand_shape, series_shape
from recommender.core import usage as m
from recommender.core.annotations import CLASS_ANNOTATION, TTFT_OBJECTIVE_ANNOTATION
from recommender.core.inventory import Workload
from recommender.core.plan import Classification, WorkloadClass
from tests import builders as b

RT, NRT, BATCH = WorkloadClass.REAL_TIME, WorkloadClass.NEAR_REAL_TIME, WorkloadClass.BATCH
DAY = 144  # 10-minute steps
T = np.arange(14 * DAY)
RNG = np.random.default_rng(7)

# A busy interactive service: never idle, a strong daily cycle, noise on top.
DIURNAL = 50 + 30 * np.sin(2 * np.pi * T / DAY) + RNG.normal(0, 3, T.size)
# A nightly job: flat out for 2 h at the same time every day, nothing otherwise.
NIGHTLY = np.where(T % DAY < 12, 1.0, 0.0)
# A training queue's GPU occupancy: jobs start and stop, so a slow random walk, never idle.
JOBS = np.clip(np.cumsum(RNG.choice([-1, 0, 0, 0, 0, 0, 0, 1], T.size)) + 30, 4, 48).astype(float)


def _case(series: dict[str, np.ndarray | float], kind: str = "Deployment", days: float = 14,
          annotations: dict[str, str] | None = None) -> tuple[Workload, m.Snapshot]:
    wl = b.workload("w", b.whole_gpu(), kind=kind, annotations=annotations or {})
    return wl, b.snapshot([wl], {metric: {"w": v} for metric, v in series.items()}, days=days)


def _classify(series: dict[str, np.ndarray | float], kind: str = "Deployment", days: float = 14,
              annotations: dict[str, str] | None = None) -> Classification:
    wl, snap = _case(series, kind, days, annotations)
    return classify(wl, demand_shape(snap, wl))


def test_annotation_wins_over_a_job_owner() -> None:
    got = _classify({m.REQUEST_RATE: DIURNAL}, kind="Job", annotations={CLASS_ANNOTATION: "Real_Time"})
    assert (got.workload_class, got.source, got.confidence) == (RT, "annotation", 1.0)
    assert any(CLASS_ANNOTATION in e for e in got.evidence)


@pytest.mark.parametrize("kind", ["Job", "CronJob"])
def test_jobs_are_batch(kind: str) -> None:
    got = _classify({m.REQUEST_RATE: DIURNAL}, kind=kind)  # even with a service-like shape
    assert (got.workload_class, got.source) == (BATCH, "rule")
    assert any(kind in e for e in got.evidence)


@pytest.mark.parametrize(("objective", "expected"), [("0.5", RT), ("10", RT), ("30", NRT)])
def test_latency_objective(objective: str, expected: WorkloadClass) -> None:
    got = _classify({m.REQUEST_RATE: NIGHTLY}, annotations={TTFT_OBJECTIVE_ANNOTATION: objective})
    assert (got.workload_class, got.source) == (expected, "rule")
    assert any("latency objective" in e for e in got.evidence)


def test_bad_annotation_is_ignored_and_said() -> None:
    got = _classify({m.REQUEST_RATE: DIURNAL}, kind="Job", annotations={CLASS_ANNOTATION: "urgent"})
    assert (got.workload_class, got.source) == (BATCH, "rule")  # the Job rule decides instead
    assert any("'urgent'" in e and "ignored" in e for e in got.evidence)


@pytest.mark.parametrize(("ttft_s", "expected"), [(120.0, BATCH), (20.0, NRT), (None, BATCH)])
def test_requests_left_waiting_for_hours(ttft_s: float | None, expected: WorkloadClass) -> None:
    waiting = np.where(T % DAY < 30, 5.0, 0.0)  # 5 h of queue at the start of every day ...
    waiting[: 4 * DAY] = 3.0  # ... and the first 4 days throughout: (4 x 144 + 10 x 30) / 2016 = 43% of steps
    series: dict[str, np.ndarray | float] = {m.REQUEST_RATE: DIURNAL, m.REQUESTS_WAITING: waiting}
    if ttft_s is not None:
        series[m.TTFT_P95_S] = ttft_s
    got = _classify(series)
    assert (got.workload_class, got.source) == (expected, "rule")
    assert any("waited" in e for e in got.evidence)


def test_short_waits_are_left_to_the_model() -> None:
    waiting = np.where(T % DAY < 60, 2.0, 0.0)  # 10 h a day, but each request waits 2 s
    got = _classify({m.REQUEST_RATE: DIURNAL, m.REQUESTS_WAITING: waiting, m.TTFT_P95_S: 2.0})
    assert (got.workload_class, got.source) == (RT, "model")


def test_model_calls_a_busy_diurnal_service_real_time() -> None:
    got = _classify({m.REQUEST_RATE: DIURNAL})
    assert (got.workload_class, got.source) == (RT, "model")
    assert got.confidence > 0.5
    assert got.evidence[0].startswith("model over request_rate_per_s")
    assert any("daily seasonality" in e for e in got.evidence)


def test_model_calls_job_occupancy_batch() -> None:
    got = _classify({m.GR_ENGINE_ACTIVE_FRAC: JOBS / 48})
    assert (got.workload_class, got.source) == (BATCH, "model")
    assert got.confidence >= MIN_DEMOTION_PROB
    assert len(got.evidence) >= 2


def test_a_nightly_on_off_job_is_batch() -> None:
    got = _classify({m.GR_ENGINE_ACTIVE_FRAC: NIGHTLY})
    assert (got.workload_class, got.source) == (BATCH, "rule")
    assert any("same time every day" in e for e in got.evidence)
    # The model alone leans further towards batch for it than for the diurnal service, even though no
    # public trace in its training table has this on/off shape (hence the rule).
    model = load_class_model()
    assert model.proba(series_shape(NIGHTLY, 600.0))[BATCH] > model.proba(series_shape(DIURNAL, 600.0))[BATCH]


@pytest.mark.parametrize(("series", "days", "says"), [
    ({}, 1, "no demand series"),
    ({m.REQUEST_RATE: 3.0}, 0.1, "only 14 points"),  # 0.1 day = 14 steps of 600 s
    ({m.REQUEST_RATE: 0.0}, 2, "no demand in 288 points"),
])
def test_too_little_to_judge_stays_real_time(series: dict[str, np.ndarray | float], days: float, says: str) -> None:
    got = _classify(series, days=days)
    assert (got.workload_class, got.source) == (RT, "rule")
    assert got.confidence < 0.5
    assert any(says in e and "safe class" in e for e in got.evidence)


def test_every_decision_is_a_valid_classification() -> None:
    for series in (DIURNAL, NIGHTLY, JOBS, RNG.poisson(3, T.size).astype(float)):
        got = _classify({m.REQUEST_RATE: series})
        assert 0.0 <= got.confidence <= 1.0 and got.evidence and got.source in {"annotation", "rule", "model"}


def test_training_table_loads_with_all_classes_and_shape_columns() -> None:
    table = load_training_table()
    assert set(table["label"]) == {c.value for c in WorkloadClass}
    assert {f.name for f in fields(SeriesShape)} <= set(table.columns)
    assert table.groupby("label").size().min() >= 30  # enough rows of the rarest class to fit on
    assert {"source", "group", "window_s"} <= set(table.columns)


def test_table_rows_round_trip_to_the_shape_they_came_from() -> None:
    shape = series_shape(DIURNAL, 600.0)
    back = shape_from_row(pd.Series(asdict(shape)))
    assert model_inputs(back) == pytest.approx(model_inputs(shape), nan_ok=True)


def test_training_is_deterministic() -> None:
    table = load_training_table()
    first = train_model(table)
    second = train_model(table)
    x = np.array([model_inputs(series_shape(v, 600.0)) for v in (DIURNAL, NIGHTLY, JOBS)])
    assert np.array_equal(first.pipeline.predict_proba(x), second.pipeline.predict_proba(x))
    assert first.rows == second.rows == len(table)


def test_the_loaded_model_is_cached() -> None:
    assert load_class_model() is load_class_model()


def test_the_models_probabilities_and_standardised_rows_are_the_pipelines_to_the_bit() -> None:
    model = load_class_model()
    shapes = [shape_from_row(r) for _, r in load_training_table().iloc[::7].iterrows()]
    shapes += [SeriesShape(**{**asdict(s), name: None}) for s in shapes[:40]
               for name in ("burstiness", "idle_frac", "lag1_autocorr", "daily_strength_frac")]  # imputed
    assert any(np.isnan(model_inputs(s)).any() for s in shapes)
    for s in shapes:
        row = np.array([model_inputs(s)])
        assert model.standardised(s).tobytes() == model.pipeline[:-1].transform(row).tobytes()
        want = model.pipeline.predict_proba(row)[0]
        got = model.proba(s)
        assert [got[WorkloadClass(c)] for c in model.pipeline.classes_] == want.tolist()
