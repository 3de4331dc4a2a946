"""The one read path of every server: the latest published plan → a workload's target, with staleness
warnings logged once per plan and state (not once per request: KEDA polls every few seconds)."""

from __future__ import annotations

import logging
import threading

from recommender.pipeline.planstore import PlanStore, Published
from recommender.serve.settings import ServeSettings
from recommender.serve.targets import (
    ErrorKind,
    PlanState,
    TargetError,
    WorkloadTarget,
    find_recommendation,
    plan_state,
    target_for,
)

log = logging.getLogger("recommender.serve")


class Lookup:
    """Reads ``store`` for the servers; thread-safe (the gRPC and HTTP servers share one)."""

    def __init__(self, store: PlanStore, settings: ServeSettings) -> None:
        self.store, self.settings = store, settings
        self._warned: set[tuple[float, PlanState]] = set()
        self._lock = threading.Lock()

    def current(self) -> tuple[Published, float]:
        """The latest plan and its age in seconds; UNAVAILABLE before the first one."""
        published, age_s = self.store.latest(), self.store.age_s()
        if published is None or age_s is None:
            raise TargetError(ErrorKind.UNAVAILABLE, "no plan yet: the first pipeline run has not finished")
        self._warn(published, age_s)
        return published, age_s

    def target(self, namespace: str, workload: str) -> WorkloadTarget:
        published, age_s = self.current()
        rec = find_recommendation(published.plan, namespace, workload)
        return target_for(published.plan, rec, age_s, self.settings)

    def _warn(self, published: Published, age_s: float) -> None:
        state = plan_state(age_s, self.settings)
        if state is PlanState.FRESH:
            return
        key = (published.published_at, state)
        with self._lock:
            if key in self._warned:
                return
            self._warned = {k for k in self._warned if k[0] == published.published_at} | {key}
        if state is PlanState.STALE:
            log.warning("plan is %.0f s old (stale after %.0f s): still serving it; is the pipeline running?",
                        age_s, self.settings.stale_after_s)
        else:
            log.warning("plan is %.0f s old (fallback after %.0f s): serving safe values, no scale to zero",
                        age_s, self.settings.fallback_after_s)
