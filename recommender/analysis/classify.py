"""Classify a workload as real-time, near-real-time or batch, with a confidence and the evidence in words.

Order of precedence (the first that applies decides; see recommender/CLASSES.md for users):

0. ``policy``: a GPURightsizingPolicy's ``classOverride`` (controller only; :func:`overridden`, confidence 1.0).
1. ``annotation``: ``rightsizer.io/class`` on the workload, always (confidence 1.0).
2. ``rule``: strong evidence that needs no statistics: a latency objective, a Job or CronJob owner,
   requests left waiting for an hour, a GPU run flat out at the same time every day and idle between.
3. ``model``: a logistic regression over the demand shape, trained at load time from the committed,
   weakly labelled table ``recommender/data/class_training.csv`` (built from public traces by
   benchmarks/build_class_training.py with the same ``series_shape``). Linear, so the evidence can
   name the features that pushed it; its probability is the confidence. It may only take a workload
   out of real-time (less headroom, scale-to-zero) with probability >= MIN_DEMOTION_PROB: when unsure,
   the safe class stays.
"""

from __future__ import annotations

import functools
import io
import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from importlib import resources
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from recommender.analysis.shape import DemandShape, SeriesShape
from recommender.core.annotations import CLASS_ANNOTATION, quoted
from recommender.core.inventory import Workload

if TYPE_CHECKING:  # scikit-learn is imported where a model is trained (~1 s): a report whose classes are all
    # remembered or decided by rules needs none
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
from recommender.core.plan import Classification, WorkloadClass
from recommender.core.resources import BATCH_WORKLOAD_KINDS

RT, NRT, BATCH = WorkloadClass.REAL_TIME, WorkloadClass.NEAR_REAL_TIME, WorkloadClass.BATCH
BATCH_KINDS = BATCH_WORKLOAD_KINDS  # Job, CronJob, Volcano and Kubeflow jobs, PodGroups, JobSets
REAL_TIME_MAX_TTFT_S = 10.0  # an objective above this tolerates seconds of queueing: near-real-time
SUSTAINED_QUEUE_S = 3600.0  # requests left waiting this long, unscaled, with no objective
SUSTAINED_QUEUE_FRAC = 0.25  # ... and in at least this share of the steps
BATCH_WAIT_S = 60.0  # typical TTFT while queued at or above this: batch; between 10 s and this: near-real-time
# A scheduled job: at its ceiling whenever it runs, idle most of the time and for hours at once, at the
# same time every day (so it needs >= 2 days), and busy for at least an hour of 10-minute steps.
SCHEDULED = {"plateau_frac": 0.8, "idle_frac": 0.5, "longest_idle_s": 4 * 3600.0, "daily_strength_frac": 0.5,
             "busy_steps": 6}
MIN_POINTS = 24  # fewer points at the grain: no shape worth a model
MIN_DEMOTION_PROB = 0.6
RULE_CONFIDENCE = {"objective": 0.95, "owner": 0.9, "queue": 0.8, "scheduled": 0.8, "default": 1 / 3}
TRAINING_TABLE = "class_training.csv"


def _fmt_idle_gap(s: SeriesShape) -> str:
    if not s.longest_idle_s:
        return f"never idle for a whole {(s.grain_s or 0) / 60:g}-minute window"
    return f"longest idle gap {s.longest_idle_s / 3600:.1f} h ({s.longest_idle_frac or 0:.0%} of the history)"


# Model inputs: name -> (value from a SeriesShape, None when unknown; words for the evidence).
FEATURES: dict[str, tuple[Callable[[SeriesShape], float | None], Callable[[SeriesShape], str]]] = {
    "burstiness": (lambda s: s.burstiness,
                   lambda s: f"burstiness {s.burstiness:+.2f}" + (f" (CV {s.cv:.2f})" if s.cv is not None else "")),
    "duty_cycle_frac": (lambda s: s.duty_cycle_frac, lambda s: f"average load {s.duty_cycle_frac:.0%} of its peak"),
    "idle_frac": (lambda s: s.idle_frac, lambda s: f"idle {s.idle_frac:.0%} of windows"),
    "longest_idle_frac": (lambda s: s.longest_idle_frac, _fmt_idle_gap),
    "plateau_frac": (lambda s: s.plateau_frac, lambda s: f"at its ceiling in {s.plateau_frac:.0%} of busy windows"),
    "log_peak_to_mean": (lambda s: math.log(s.peak_to_mean) if s.peak_to_mean else None,
                         lambda s: f"peak {s.peak_to_mean:.1f}x the mean"),
    "lag1_autocorr": (lambda s: s.lag1_autocorr, lambda s: f"step-to-step persistence {s.lag1_autocorr:.2f}"),
    "daily_strength_frac": (lambda s: s.daily_strength_frac,
                            lambda s: f"daily seasonality {s.daily_strength_frac:.2f}"),
}


def model_inputs(shape: SeriesShape) -> list[float]:
    """The model's input row for one shape; NaN (only here, inside the matrix) where a feature is unknown."""
    values = (get(shape) for get, _ in FEATURES.values())
    return [math.nan if v is None or not math.isfinite(v) else float(v) for v in values]


@dataclass(frozen=True)
class ClassModel:
    """A fitted classifier over demand shapes, and how many weakly labelled rows taught it."""

    pipeline: Pipeline
    rows: int

    def proba(self, shape: SeriesShape) -> dict[WorkloadClass, float]:
        """Each class's probability: the pipeline's ``predict_proba`` of the shape's row, worked out here with the
        same numpy operations in the same order (the same bits; scikit-learn's checks of its input cost more than
        the sums, on one row), for a multinomial model; its own ``predict_proba`` otherwise."""
        lr: LogisticRegression = self.pipeline[-1]
        if len(lr.classes_) <= 2:
            p = self.pipeline.predict_proba(np.array([model_inputs(shape)]))[0]
        else:
            x = self.standardised(shape)
            p = x @ lr.coef_.T + lr.intercept_  # LogisticRegression.decision_function
            p -= np.max(p, axis=1).reshape(-1, 1)  # then scikit-learn's softmax, in place as it does it
            np.exp(p, out=p)
            p /= np.sum(p, axis=1).reshape(-1, 1)
            p = p[0]
        return {WorkloadClass(c): float(v) for c, v in zip(self.pipeline.classes_, p, strict=True)}

    def standardised(self, shape: SeriesShape) -> np.ndarray:
        """The shape's row as the model's last step sees it, shape (1, features): the imputer's medians where a
        value is unknown, then the scaler's ``(x - mean) / scale`` (``pipeline[:-1].transform``'s numbers)."""
        x = np.array([model_inputs(shape)])
        impute, scale = self.pipeline[0], self.pipeline[1]
        x = np.where(np.isnan(x), impute.statistics_, x)
        if scale.with_mean:
            x -= scale.mean_
        if scale.with_std:
            x /= scale.scale_
        return x

    def drivers(self, shape: SeriesShape, cls: WorkloadClass, top: int = 3) -> list[str]:
        """Features that pushed towards ``cls`` most: coefficient x standardised value, against the mean
        of the classes (a linear model's exact decomposition of its log-odds)."""
        x = self.standardised(shape)[0]
        lr: LogisticRegression = self.pipeline[-1]
        contrib = lr.coef_ * x
        k = list(lr.classes_).index(cls.value)
        push = contrib[k] - contrib.mean(axis=0)
        names = list(FEATURES)
        order = [i for i in np.argsort(-push) if push[i] > 0 and FEATURES[names[i]][0](shape) is not None]
        return [FEATURES[names[i]][1](shape) for i in order[:top]]


def shape_from_row(row: pd.Series) -> SeriesShape:
    """A training-table row back to the SeriesShape it was written from (empty cells are None)."""
    def cell(name: str) -> float | None:
        v = row.get(name)
        return None if v is None or pd.isna(v) else float(v)

    floats = {f.name: cell(f.name) for f in fields(SeriesShape) if f.name != "points"}
    return SeriesShape(points=int(cell("points") or 0), **floats)


def training_matrix(table: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, labels) from a training table, through the same model_inputs as live workloads."""
    x = np.array([model_inputs(shape_from_row(r)) for _, r in table.iterrows()])
    return x, table["label"].to_numpy(str)


def train_model(table: pd.DataFrame, random_state: int = 0) -> ClassModel:
    """Fit the pipeline. Classes are weighted inversely to their row counts, so the few near-real-time
    rows count as much as the many real-time ones."""
    x, y = training_matrix(table)
    labels, counts = np.unique(y, return_counts=True)
    weight = dict(zip(labels, counts.max() / counts, strict=True))
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    pipeline = Pipeline([("impute", SimpleImputer(strategy="median")), ("scale", StandardScaler()),
                         ("lr", LogisticRegression(C=0.3, max_iter=2000, random_state=random_state))])
    pipeline.fit(x, y, lr__sample_weight=np.array([weight[v] for v in y]))
    return ClassModel(pipeline, len(y))


def load_training_table() -> pd.DataFrame:
    """The committed training table, read from the installed package."""
    text = resources.files("recommender").joinpath("data", TRAINING_TABLE).read_text(encoding="utf-8")
    return pd.read_csv(io.StringIO(text))


@functools.lru_cache(maxsize=1)
def load_class_model() -> ClassModel:
    """The model trained on the committed table, once per process (fitting takes tens of milliseconds)."""
    return train_model(load_training_table())


def _annotated(shape: DemandShape) -> tuple[WorkloadClass | None, str | None]:
    """The class the annotation names, or (None, why it was ignored) for a value that is not a class."""
    raw = shape.class_annotation
    if raw is None:
        return None, None
    value = raw.strip().lower().replace("_", "-").replace(" ", "-")
    try:
        return WorkloadClass(value), None
    except ValueError:
        allowed = ", ".join(c.value for c in WorkloadClass)
        return None, f"annotation {CLASS_ANNOTATION}={quoted(raw)} is not one of {allowed}: ignored"


def _objective_rule(shape: DemandShape) -> Classification | None:
    if shape.ttft_objective_s is None:
        return None
    slo = shape.ttft_objective_s
    cls = RT if slo <= REAL_TIME_MAX_TTFT_S else NRT
    evidence = [f"latency objective: TTFT p95 <= {slo:g} s"
                + ("" if cls is RT else f" (over {REAL_TIME_MAX_TTFT_S:g} s: tolerates seconds of queueing)")]
    if shape.owner_kind in BATCH_KINDS:
        evidence.append(f"owner is a {shape.owner_kind}, but the objective says someone waits on it")
    return Classification(cls, RULE_CONFIDENCE["objective"], tuple(evidence), "rule")


def _owner_rule(shape: DemandShape) -> Classification | None:
    if shape.owner_kind not in BATCH_KINDS and shape.schedule is None:
        return None
    what = f"owner is a {shape.owner_kind}" if shape.owner_kind in BATCH_KINDS else "runs on a schedule"
    when = f" (schedule {shape.schedule!r})" if shape.schedule else ""
    return Classification(BATCH, RULE_CONFIDENCE["owner"], (f"{what}{when}: runs to completion, nobody waits "
                                                            "on a response",), "rule")


def _queue_rule(shape: DemandShape) -> Classification | None:
    """Requests left waiting for an hour or more, without an objective: the owner tolerates queueing."""
    q = shape.queue
    if (q.longest_queue_s or 0) < SUSTAINED_QUEUE_S or (q.queued_frac or 0) < SUSTAINED_QUEUE_FRAC:
        return None
    seen = f"requests waited in {q.queued_frac:.0%} of steps, up to {(q.longest_queue_s or 0) / 3600:.1f} h unscaled"
    wait = q.queued_ttft_p95_s
    if wait is None:
        return Classification(BATCH, RULE_CONFIDENCE["queue"], (seen, "no latency signal at all (no objective, "
                                                                      "no TTFT): a work queue"), "rule")
    if wait < REAL_TIME_MAX_TTFT_S:
        return None  # short waits: a busy service at its peak, for the model to judge
    cls = BATCH if wait >= BATCH_WAIT_S else NRT
    return Classification(cls, RULE_CONFIDENCE["queue"], (seen, f"TTFT p95 {wait:.0f} s while queued"), "rule")


def _scheduled_rule(shape: DemandShape) -> Classification | None:
    """Flat out at the same time every day and idle for hours between: a scheduled job, not users."""
    s = shape.series
    busy_steps = s.points * (1 - (s.idle_frac or 1))
    if not ((s.plateau_frac or 0) >= SCHEDULED["plateau_frac"] and (s.idle_frac or 0) >= SCHEDULED["idle_frac"]
            and (s.longest_idle_s or 0) >= SCHEDULED["longest_idle_s"] and busy_steps >= SCHEDULED["busy_steps"]
            and (s.daily_strength_frac or 0) >= SCHEDULED["daily_strength_frac"]):
        return None
    words = (FEATURES["plateau_frac"][1](s), FEATURES["idle_frac"][1](s), FEATURES["daily_strength_frac"][1](s))
    return Classification(BATCH, RULE_CONFIDENCE["scheduled"], ("runs flat out at the same time every day, "
                                                                "idle for hours between", *words), "rule")


def _model_decision(shape: DemandShape, model: ClassModel) -> Classification:
    s = shape.series
    proba = model.proba(s)
    best = max(proba, key=lambda c: proba[c])
    head = (f"model over {shape.demand_metric} ({(s.span_s or 0) / 86_400:.1f} d at {s.grain_s:g} s): "
            + ", ".join(f"{c.value} {p:.2f}" for c, p in sorted(proba.items(), key=lambda kv: -kv[1])))
    if best is not RT and proba[best] < MIN_DEMOTION_PROB:
        kept = (f"leaned {best.value} ({proba[best]:.2f}) but under {MIN_DEMOTION_PROB} needed to drop "
                "headroom: kept real-time")
        return Classification(RT, proba[RT], (head, kept, *model.drivers(s, best)), "model")
    return Classification(best, proba[best], (head, *model.drivers(s, best)), "model")


def _too_little(shape: DemandShape) -> str | None:
    """Why the shape cannot feed the model, or None when it can."""
    s = shape.series
    if shape.demand_metric is None:
        return "no demand series (request rate, running requests or GPU activity)"
    if s.points < MIN_POINTS:
        return f"only {s.points} points of {shape.demand_metric} (need {MIN_POINTS})"
    if (s.idle_frac or 0) >= 1:
        return f"no demand in {s.points} points of {shape.demand_metric}"
    return None


def overridden(cls: WorkloadClass, source: str) -> Classification:
    """A policy's ``classOverride`` (``source``: ``policy ns/name``): certain, and it wins over the
    ``rightsizer.io/class`` annotation, so the classifier is not asked."""
    return Classification(cls, 1.0, (f"classOverride {cls.value} in {source}: not classified",), "policy")


def classify(workload: Workload, shape: DemandShape, model: ClassModel | None = None) -> Classification:
    """The class of one workload from its annotation, strong-evidence rules, or the model (in that order)."""
    notes = list(shape.notes)
    annotated, why = _annotated(shape)
    if annotated is not None:
        return Classification(annotated, 1.0, (f"annotation {CLASS_ANNOTATION}={shape.class_annotation}",
                                               *notes), "annotation")
    notes += [why] if why else []
    for rule in (_objective_rule, _owner_rule, _queue_rule, _scheduled_rule):
        found = rule(shape)
        if found is not None:
            return Classification(found.workload_class, found.confidence, (*notes, *found.evidence), found.source)
    lacking = _too_little(shape)
    if lacking:
        return Classification(RT, RULE_CONFIDENCE["default"], (*notes, f"{lacking}: real-time, the safe class "
                                                               "(most headroom, never scaled to zero)"), "rule")
    found = _model_decision(shape, model or load_class_model())
    return Classification(found.workload_class, found.confidence, (*notes, *found.evidence), found.source)
