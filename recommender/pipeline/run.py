"""``run_once``: snapshot → data quality → features → policy → plan, timing each step. Reads like a table of
contents."""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial

from policies.autoscalerobjects import trigger_prometheus
from policies.bounds import within_replica_bounds
from policies.devplugin import plan_device_plugin
from policies.migdemand import mig_demands
from policies.modelcards import ModelCards, load_model_cards
from policies.nodeplan import plan_nodes
from policies.registry import get_policy
from policies.replicas import NoScalingPlan, history_from_snapshot, scaling_plan
from policies.rightscale import ShapeScale, shape_scale
from policies.rightsize import Context
from policies.savings import summarize, with_money
from policies.tenancy import tenancy_cost, with_tenancy_reasons
from recommender.analysis.classify import classify, overridden
from recommender.analysis.demand import DEMAND_METRICS, LABELS, demand_series
from recommender.analysis.features import WorkloadFeatures, workload_features
from recommender.analysis.forecast import ModelChoice, NotEnoughHistory, forecast_with_choice, preload
from recommender.analysis.quality import clean, fleet_warning
from recommender.analysis.quality_data import load_bounds
from recommender.analysis.shape import DEMAND_METRICS as SHAPE_DEMAND_METRICS
from recommender.analysis.shape import demand_shape
from recommender.core import usage as m
from recommender.core.catalogue import Catalogue, load_catalogue
from recommender.core.errors import NoWorkloadsError
from recommender.core.inventory import Workload
from recommender.core.memory import give_back_freed
from recommender.core.plan import Classification, Forecast, Plan, Recommendation, ScalingPlan, WorkloadConstraints
from recommender.core.settings import ForecastSettings, Settings
from recommender.core.usage import Snapshot
from recommender.pipeline.advice import with_advice
from recommender.pipeline.aside import Shared, fits, share
from recommender.pipeline.memo import Memo, Said, forecasts_digest, key, remembered, series_digests


@contextmanager
def _timed(timings: dict[str, float], step: str) -> Iterator[None]:
    t0 = time.perf_counter()
    yield
    timings[step] = round(time.perf_counter() - t0, 4)


Choices = Mapping[str, Mapping[str, ModelChoice]]  # workload key -> demand metric -> the model chosen for it


@dataclass(frozen=True)
class Cycled:
    """One loop cycle's plan, the forecast model choices it used (to be handed to the next cycle) and the snapshot
    it read: the one given with impossible values dropped (the quality stage's), what formats draw beside the plan
    (with ``release``, only the frames read after the features)."""

    plan: Plan
    snapshot: Snapshot
    choices: dict[str, dict[str, ModelChoice]] = field(default_factory=dict)


def run_once(snapshot: Snapshot, settings: Settings, now: datetime, *, policy: str = "gpu-rightsize",
             catalogue: Catalogue | None = None, cards: ModelCards | None = None, previous: Plan | None = None,
             constraints: Mapping[str, WorkloadConstraints] | None = None, memo: Memo | None = None,
             release: bool = False, fork: bool = False) -> Plan:
    """One pass of the pipeline over a snapshot. ``now`` is the plan's timestamp (no clock inside).
    ``previous`` is the last cycle's plan in a loop: its scaling plans carry capacity forward.
    ``constraints`` (workload key → a policy object's class and MIG bounds) come from the controller; the
    report has none. ``memo`` (from the edge: a dict, a file's contents) holds features, classes and forecasts of
    earlier runs under digests of their inputs (``recommender.pipeline.memo``): those found are reused, the others
    computed and added. ``release``: the caller hands ``snapshot.usage`` over (a dict it does not read again): the
    frames no stage after the features reads are taken out of it once the features are made, so their memory
    goes back before the classifier and the policies run (the plan is the same); and the pages the quality stage
    freed go back to the system before the features run (``give_back_freed``). ``fork``: the forecasts are made
    in a forked child (``recommender.pipeline.aside``) while this process makes the features and classes, where
    there are at least ``FORK_MIN_FORECASTS`` to make, a second core and memory for it (``forecast.fork_within_mib``),
    and this process makes those left when it comes to them, and those the child did not send within its deadline
    (the same plan; for a one-shot report, not a process with threads of its own)."""
    return run_cycle(snapshot, settings, now, policy=policy, catalogue=catalogue, cards=cards, previous=previous,
                     constraints=constraints, memo=memo, release=release, fork=fork).plan


def run_cycle(snapshot: Snapshot, settings: Settings, now: datetime, *, policy: str = "gpu-rightsize",
              catalogue: Catalogue | None = None, cards: ModelCards | None = None, previous: Plan | None = None,
              constraints: Mapping[str, WorkloadConstraints] | None = None, memo: Memo | None = None,
              choices: Choices | None = None, release: bool = False, fork: bool = False) -> Cycled:
    """``run_once`` for a loop that carries forecast model choices from one cycle to the next: ``choices`` are
    the last cycle's (``Cycled.choices``; ``{}`` on the first), and a choice younger than
    ``forecast.reselect_s`` is refitted without a new backtest (``forecast_with_choice``). With ``choices``
    the forecasts do not use ``memo`` (a loop's series gain steps every cycle, so their digests never repeat).
    Without ``choices`` (None) the plan is ``run_once``'s and no choices come back. ``release`` and ``fork`` (without
    ``choices`` only): as ``run_once``'s."""
    if not snapshot.workloads:
        scope = ", ".join(settings.namespaces) or "all namespaces"
        raise NoWorkloadsError(f"no GPU workloads found in {scope}")
    timings: dict[str, float] = {}
    catalogue = catalogue or load_catalogue(settings.policy.catalogue_override)
    cards = cards or load_model_cards(settings.policy.models_override)
    decide: Callable[[Context], Recommendation] = get_policy(policy)
    callers = snapshot  # (``release``: the frames no later stage reads are taken out of its usage too)
    with _timed(timings, "quality"):
        snapshot, quality = clean(snapshot, catalogue, load_bounds(), settings.policy.min_usable_frac)
    if release:  # the quality stage's masks, freed in pieces: the pages go back before the features run
        give_back_freed()
    digests = series_digests(snapshot) if memo is not None else {}
    said = {w.ref.key: Said(w) for w in snapshot.workloads} if memo is not None else {}  # each repr made once
    ahead = _forecasts_aside(snapshot, callers, settings, memo, digests, said, release) if fork and choices is None \
        else None
    try:  # the child never outlives this stage: stopped here whatever raises
        with _timed(timings, "features"):
            feats = {w.ref.key: _features(snapshot, w, settings, quality[w.ref.key].usable_frac,
                                          quality[w.ref.key].unusable, memo, digests.get(w.ref.key),
                                          said.get(w.ref.key))
                     for w in snapshot.workloads}
        if release:
            snapshot = _read_later(snapshot)
            _take_unread(callers.usage)
        with _timed(timings, "classify"):
            fixed = constraints or {}
            classes = _classes(snapshot, fixed, memo, digests, said)
        with _timed(timings, "forecast"):
            chosen: dict[str, dict[str, ModelChoice]] = {}
            ready = None if ahead is None else {ahead[0][i].ref.key: v for i, v in ahead[1].result().items()}
            forecasts = _forecasts(snapshot, settings, memo, digests, choices, chosen, said, ready)
    finally:
        if ahead is not None:
            ahead[1].close()
    before = {r.ref.key: r.scaling for r in previous.recommendations} if previous else {}
    scaling_settings = Said(settings.scaling)
    with _timed(timings, "policies"):
        recs = []
        for w in snapshot.workloads:
            found, notes = forecasts.get(w.ref.key, ((), ()))
            c = fixed.get(w.ref.key)
            ctx = Context(w, feats[w.ref.key], settings, catalogue, cards, classes[w.ref.key], found, c)
            rec = _with_demand(decide(ctx), classes[w.ref.key], found, notes)
            planned = _scaling(snapshot, w, classes[w.ref.key], found, settings, _carried(before, w, previous), c,
                               shape_scale(rec, catalogue), memo if choices is None else None, digests.get(w.ref.key),
                               (said.get(w.ref.key, w), scaling_settings))
            recs.append(with_scaling(rec, planned))
    with _timed(timings, "savings"):
        recs = [with_money(r, settings.prices) for r in recs]
        recs.sort(key=lambda r: (-(r.gpus_held - r.gpus_needed), r.ref))
        tenancy = tenancy_cost(recs, catalogue, settings.mechanisms.tenancy)
        recs = with_tenancy_reasons(recs, tenancy)
        summary = summarize(recs, (snapshot.end - snapshot.start).total_seconds(), catalogue,
                            settings.mechanisms.tenancy, memo)
    with _timed(timings, "mig_nodes"):
        nodes = plan_nodes(mig_demands(recs, catalogue), snapshot.nodes, catalogue, memo)
    with _timed(timings, "device_plugin"):
        sharing = plan_device_plugin(recs, snapshot.nodes, nodes.nodes, settings)
    prometheus, auth_why = trigger_prometheus(settings.scaling.keda_prometheus_url, settings.prometheus)
    plan = Plan(now, snapshot.start, snapshot.end, snapshot.step_s, tuple(recs), summary,
                (*snapshot.warnings, *fleet_warning(quality), *nodes.warnings,
                 *(sharing.warnings if sharing else ()), *auth_why,
                 *((tenancy.warning,) if tenancy.warning else ())), timings, snapshot.source,
                nodes.nodes, nodes.mig_parted_config, prometheus, sharing)
    with _timed(timings, "advice"):  # the replica series from what the plan read: no impossible value drawn
        plan = with_advice(plan, snapshot, catalogue)
    return Cycled(plan, snapshot, chosen)


def _scaling(snapshot: Snapshot, w: Workload, cls: Classification, found: tuple[Forecast, ...], settings: Settings,
             carried: ScalingPlan | None, c: WorkloadConstraints | None, shape: ShapeScale | None, memo: Memo | None,
             digest: str | None, named: tuple[object, object]) -> ScalingPlan | NoScalingPlan:
    """One workload's scaling plan within its bounds (remembered in ``memo`` for a report's: no plan carried from a
    last cycle and no policy bounds, under its series' digest, the workload, class, forecasts' digest, scaling
    settings and recommended shape: everything ``scaling_plan`` reads; ``named``: the workload and scaling settings
    as they go into the key, each a :class:`Said`)."""

    def compute() -> ScalingPlan | NoScalingPlan:
        planned = scaling_plan(w, history_from_snapshot(snapshot, w), cls, found, settings.scaling, carried, c, shape)
        return within_replica_bounds(planned, c) if isinstance(planned, ScalingPlan) else planned

    if memo is None or digest is None or carried is not None or c is not None:
        return compute()
    workload, scaling = named
    return remembered(memo, "scaling", (digest, workload, cls, forecasts_digest(found), scaling, shape), compute)


# What the stages after the features read of the usage: classify (demand_shape: its demand series, the queue, the
# token mix), forecast (demand_series: request rate, tokens, KV usage), the replica policy and the advice's replica
# series (history_from_snapshot). Device memory (FB used and total), power and the rest are the features' only.
READ_AFTER_FEATURES = frozenset({*SHAPE_DEMAND_METRICS, m.REQUEST_RATE, m.PROMPT_TOKENS_RATE,
                                 m.GENERATION_TOKENS_RATE, m.KV_USAGE_FRAC, m.REQUESTS_WAITING, m.TTFT_P95_S,
                                 m.SERVING_REPLICAS})


def _read_later(snapshot: Snapshot) -> Snapshot:
    """The snapshot with the frames of ``READ_AFTER_FEATURES`` only."""
    return replace(snapshot, usage={k: v for k, v in snapshot.usage.items() if k in READ_AFTER_FEATURES})


def _take_unread(usage: Mapping[str, object]) -> None:
    """The frames no stage after the features reads taken out of the caller's ``usage``, handed over
    (``release``), so that nothing holds them any more."""
    if isinstance(usage, dict):
        for metric in [x for x in usage if x not in READ_AFTER_FEATURES]:
            del usage[metric]


def _carried(before: dict[str, ScalingPlan | None], workload: Workload, previous: Plan | None
             ) -> ScalingPlan | None:
    """The last cycle's scaling plan for this workload, unless its replicas changed shape since it was made:
    its capacity was another shape's."""
    since = workload.shape_since
    if previous is None or (since is not None and previous.generated_at < since):
        return None
    return before.get(workload.ref.key)


def _features(snapshot: Snapshot, w: Workload, settings: Settings, usable_frac: float, unusable: str | None,
              memo: Memo | None, digest: str | None, said: Said | None = None) -> WorkloadFeatures:
    """One workload's features with the data-quality stage's verdict (remembered in ``memo``)."""
    idle, window_s = settings.policy.idle_compute_frac, settings.scaling.error_budget_window_s
    wake_s = settings.scaling.wake_s(w.cold_start_s)

    def compute() -> WorkloadFeatures:
        return replace(workload_features(snapshot, w, idle, window_s, wake_s), usable_frac=usable_frac,
                       unusable=unusable)

    return remembered(memo, "features", (digest, said or w, idle, window_s, wake_s, usable_frac, unusable), compute)


def _classes(snapshot: Snapshot, fixed: Mapping[str, WorkloadConstraints], memo: Memo | None = None,
             digests: Mapping[str, str] | None = None, said: Mapping[str, Said] | None = None
             ) -> dict[str, Classification]:
    """Each workload's class: a policy's ``classOverride`` where one is set, else the classifier's (remembered
    in ``memo``)."""
    out = {}
    for w in snapshot.workloads:
        c = fixed.get(w.ref.key)
        if c is not None and c.class_override is not None:
            out[w.ref.key] = overridden(c.class_override, c.source)
            continue
        objective_s = c.ttft_objective_s if c else None
        out[w.ref.key] = remembered(memo, "class", ((digests or {}).get(w.ref.key), (said or {}).get(w.ref.key, w),
                                                     objective_s),
                                    partial(_classify, snapshot, w, objective_s))
    return out


def _classify(snapshot: Snapshot, w: Workload, objective_s: float | None) -> Classification:
    """The classifier's class of one workload (its model is loaded only where no rule decides)."""
    return classify(w, demand_shape(snapshot, w, objective_s))


FORK_MIN_FORECASTS = 16  # fewer forecasts to make than this: made here (a fork costs about as much as a few)
Forecasts = tuple[tuple[Forecast, ...], tuple[str, ...]]  # one workload's forecasts and notes


def _forecast_keys(snapshot: Snapshot, settings: Settings) -> set[str]:
    """The workloads forecast: those that hold the most GPUs (at most ``forecast.max_workloads``)."""
    ranked = sorted(snapshot.workloads, key=lambda w: (-w.allocation.total_gpu_equivalents, w.ref))
    return {w.ref.key for w in ranked[:settings.forecast.max_workloads]}


def _forecast_inputs(w: Workload, fs: ForecastSettings, digests: Mapping[str, str] | None,
                     said: Mapping[str, Said] | None) -> tuple[object, ...]:
    """A workload's forecast memo key's inputs."""
    return (digests or {}).get(w.ref.key), (said or {}).get(w.ref.key, w), fs.horizon_s, fs.levels


def _forecasts_aside(snapshot: Snapshot, callers: Snapshot, settings: Settings, memo: Memo | None,
                     digests: Mapping[str, str], said: Mapping[str, Said], release: bool
                     ) -> tuple[list[Workload], Shared[Forecasts]] | None:
    """The forecasts ``memo`` does not hold, started in a forked child (``aside.share``), and the workloads they
    are for (item ``i`` is ``todo[i]``'s), where there are at least ``FORK_MIN_FORECASTS`` of them and twice this
    process' resident memory fits within ``forecast.fork_within_mib`` (``aside.fits``); otherwise None. With
    ``release`` the child first drops the frames this process drops after the features (``_read_later``), so that
    their pages are given back by both. The forecasts' modules are imported first (``forecast.preload``), so that
    the child inherits them instead of importing them too."""
    fs = settings.forecast
    if not fs.enabled:
        return None
    todo = _forecasts_todo(snapshot, settings, memo, digests, said)
    if len(todo) < FORK_MIN_FORECASTS:
        return None
    preload()  # needed here too if no copy is forked: imported before the memory check, so that it counts them
    if not fits(fs.fork_within_mib):
        return None

    light = _read_later(snapshot)  # what the forecasts read: held here by the child's and this process' items
    held = (weakref.ref(snapshot), weakref.ref(callers))  # not held by them: this process drops them after the features

    def prepare() -> None:  # in the child, while the copy of run_cycle's frame still holds both
        for ref in held:
            was = ref()
            if was is not None:
                _take_unread(was.usage)
        give_back_freed()

    shared = share(len(todo), lambda i: forecast_workload(light, todo[i], fs), _is_forecasts,
                   prepare if release else None)
    return None if shared is None else (todo, shared)


def _forecasts_todo(snapshot: Snapshot, settings: Settings, memo: Memo | None, digests: Mapping[str, str],
                    said: Mapping[str, Said]) -> list[Workload]:
    """The workloads forecast whose forecasts ``memo`` does not hold, in the snapshot's order."""
    fs = settings.forecast
    keys = _forecast_keys(snapshot, settings)
    return [w for w in snapshot.workloads if w.ref.key in keys
            and (memo is None or key("forecast", *_forecast_inputs(w, fs, digests, said)) not in memo)]


def _is_forecasts(value: object) -> bool:
    """Whether a value is what ``forecast_workload`` returns: forecasts and notes."""
    return (isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], tuple)
            and isinstance(value[1], tuple) and all(isinstance(f, Forecast) for f in value[0])
            and all(isinstance(n, str) for n in value[1]))


def _forecasts(snapshot: Snapshot, settings: Settings, memo: Memo | None = None,
               digests: Mapping[str, str] | None = None, choices: Choices | None = None,
               chosen: dict[str, dict[str, ModelChoice]] | None = None, said: Mapping[str, Said] | None = None,
               ready: Mapping[str, Forecasts] | None = None) -> dict[str, Forecasts]:
    """Forecasts of the workloads that hold the most GPUs (at most ``forecast.max_workloads``): remembered in
    ``memo`` when no ``choices`` are carried (``ready``: those already made, by workload key); with ``choices``,
    made from them and the choices used put in ``chosen``."""
    fs = settings.forecast
    if not fs.enabled:
        return {}
    keys = _forecast_keys(snapshot, settings)
    made = ready or {}
    out: dict[str, Forecasts] = {}
    for w in snapshot.workloads:
        if w.ref.key not in keys:
            continue
        if choices is None:
            compute = partial(made.__getitem__, w.ref.key) if w.ref.key in made else partial(
                forecast_workload, snapshot, w, fs)
            out[w.ref.key] = remembered(memo, "forecast", _forecast_inputs(w, fs, digests, said), compute)
            continue
        found, notes, used = forecast_workload_choosing(snapshot, w, fs, choices.get(w.ref.key, {}))
        out[w.ref.key] = (found, notes)
        if chosen is not None and used:
            chosen[w.ref.key] = used
    skipped = (f"no forecast: only the {fs.max_workloads} workloads holding the most GPUs are forecast "
               "(--forecast-max)",)
    return out | {w.ref.key: ((), skipped) for w in snapshot.workloads if w.ref.key not in keys}


def forecast_workload(snapshot: Snapshot, workload: Workload, fs: ForecastSettings
                      ) -> tuple[tuple[Forecast, ...], tuple[str, ...]]:
    """Every demand forecast of one workload, and a note for each one that could not be made."""
    found, notes, _ = forecast_workload_choosing(snapshot, workload, fs, {})
    return found, notes


def forecast_workload_choosing(snapshot: Snapshot, workload: Workload, fs: ForecastSettings,
                               previous: Mapping[str, ModelChoice]
                               ) -> tuple[tuple[Forecast, ...], tuple[str, ...], dict[str, ModelChoice]]:
    """``forecast_workload``, reusing ``previous`` (demand metric → model choice) for ``fs.reselect_s``, and the
    choice each forecast used (by metric)."""
    horizon = max(1, round(fs.horizon_s / snapshot.step_s))
    found: list[Forecast] = []
    notes: list[str] = []
    used: dict[str, ModelChoice] = {}
    for metric in DEMAND_METRICS:
        y = demand_series(snapshot, workload, metric)
        if y is None:
            continue
        try:
            forecast, used[metric] = forecast_with_choice(y, horizon, fs.levels, metric, previous.get(metric),
                                                          fs.reselect_s)
        except NotEnoughHistory as exc:
            notes.append(f"no {LABELS[metric]} forecast: {exc}")
            continue
        found.append(forecast)
    return tuple(found), tuple(notes), used


def with_scaling(rec: Recommendation, found: ScalingPlan | NoScalingPlan) -> Recommendation:
    """Attach the scaling plan (replica bounds and autoscaler parameters), or say why there is none.

    The plan is advice for an autoscaler, not a fixed count: the recommendation keeps its replicas, so
    GPUs needed and savings compare like with like (one replica's right-sizing times today's replicas).
    """
    if isinstance(found, NoScalingPlan):
        return replace(rec, reasons=(*rec.reasons, *(f"no scaling plan: {r}" for r in found.reasons)))
    return replace(rec, scaling=found)


def _with_demand(rec: Recommendation, cls: Classification, forecasts: tuple[Forecast, ...],
                 notes: tuple[str, ...]) -> Recommendation:
    """The recommendation with its workload's class and demand forecasts (and why any is missing)."""
    return replace(rec, classification=cls, forecasts=forecasts, reasons=(*rec.reasons, *notes))
