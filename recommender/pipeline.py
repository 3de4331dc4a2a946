"""``run_once``: snapshot → features → policy → plan, timing each step. Reads like a table of contents."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime

from policies.catalogue import Catalogue, load_catalogue
from policies.modelcards import ModelCards, load_model_cards
from policies.registry import get_policy
from policies.rightsize import Context
from policies.savings import summarize, with_money
from recommender.errors import NoWorkloadsError
from recommender.features import WorkloadFeatures, workload_features
from recommender.model import Plan, Recommendation, Snapshot
from recommender.settings import Settings


@contextmanager
def _timed(timings: dict[str, float], step: str) -> Iterator[None]:
    t0 = time.perf_counter()
    yield
    timings[step] = round(time.perf_counter() - t0, 4)


def run_once(snapshot: Snapshot, settings: Settings, now: datetime, *, policy: str = "gpu-rightsize",
             catalogue: Catalogue | None = None, cards: ModelCards | None = None) -> Plan:
    """One pass of the pipeline over a snapshot. ``now`` is the plan's timestamp (no clock inside)."""
    if not snapshot.workloads:
        scope = ", ".join(settings.namespaces) or "all namespaces"
        raise NoWorkloadsError(f"no GPU workloads found in {scope}")
    timings: dict[str, float] = {}
    catalogue = catalogue or load_catalogue(settings.policy.catalogue_override)
    cards = cards or load_model_cards(settings.policy.models_override)
    decide: Callable[[Context], Recommendation] = get_policy(policy)
    with _timed(timings, "features"):
        feats: dict[str, WorkloadFeatures] = {
            w.ref.key: workload_features(snapshot, w, settings.policy.idle_compute_frac)
            for w in snapshot.workloads
        }
    with _timed(timings, "policies"):
        recs = [decide(Context(w, feats[w.ref.key], settings, catalogue, cards)) for w in snapshot.workloads]
    with _timed(timings, "savings"):
        recs = [with_money(r, settings.prices) for r in recs]
        recs.sort(key=lambda r: (-(r.gpus_held - r.gpus_needed), r.ref))
        summary = summarize(recs, (snapshot.end - snapshot.start).total_seconds(), catalogue)
    return Plan(now, snapshot.start, snapshot.end, snapshot.step_s, tuple(recs), summary,
                snapshot.warnings, timings, snapshot.source)
