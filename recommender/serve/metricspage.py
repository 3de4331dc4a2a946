"""The ``/metrics`` body, rendered off the event loop so a scrape never holds up KEDA or the probes.

Rendering walks every workload's forecast; on the loop it would stall every other endpoint for as long.
Here it runs on one worker thread; scrapes that arrive meanwhile wait for that same render, and its
body is reused while the plan is the same one and has aged less than ``max_age_s`` (the store's clock),
so a scraper in a loop costs one render per ``max_age_s``, not one per request.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from recommender.pipeline.planstore import PlanStore, Published


@dataclass(frozen=True)
class _Body:
    plan: Published | None  # the plan it was rendered from (None: before the first)
    age_s: float | None  # that plan's age when the render began
    data: bytes


class MetricsPage:
    """``await body()`` from the event loop; ``close()`` when the servers stop."""

    def __init__(self, registry: CollectorRegistry, store: PlanStore, max_age_s: float) -> None:
        self.registry, self.store, self.max_age_s = registry, store, max_age_s
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="rightsizer-metrics")
        self._last: _Body | None = None
        self._rendering: asyncio.Future[_Body] | None = None

    async def body(self) -> bytes:
        plan, age_s = self.store.latest(), self.store.age_s()
        if self._fresh(self._last, plan, age_s):
            assert self._last is not None
            return self._last.data
        if self._rendering is None:
            self._rendering = asyncio.get_running_loop().run_in_executor(self._worker, self._render, plan, age_s)
            self._rendering.add_done_callback(self._rendered)
        return (await asyncio.shield(self._rendering)).data

    def close(self) -> None:
        self._worker.shutdown(wait=False, cancel_futures=True)

    def _render(self, plan: Published | None, age_s: float | None) -> _Body:
        return _Body(plan, age_s, generate_latest(self.registry))

    def _rendered(self, future: asyncio.Future[_Body]) -> None:
        self._rendering = None
        if not future.cancelled() and future.exception() is None:
            self._last = future.result()

    def _fresh(self, last: _Body | None, plan: Published | None, age_s: float | None) -> bool:
        if last is None or last.plan is not plan or self.max_age_s <= 0:
            return False
        if last.age_s is None or age_s is None:  # no plan then, none now: nothing that ages
            return True
        return 0 <= age_s - last.age_s < self.max_age_s
