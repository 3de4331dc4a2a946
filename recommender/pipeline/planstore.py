"""The latest plan, shared by the writer (controller loop or a one-off report) and the servers.

Thread-safe and clock-injected: servers read ``latest()`` and decide from ``age_s`` whether the plan
is stale. Nothing here does I/O.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from recommender.core.plan import Plan


@dataclass(frozen=True)
class Published:
    """A plan and when it was published (seconds on the store's clock)."""

    plan: Plan
    published_at: float


class PlanStore:
    """Holds the most recent :class:`Plan`; ``publish`` replaces it atomically."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._current: Published | None = None
        self._listeners: list[Callable[[Published], None]] = []

    def publish(self, plan: Plan) -> Published:
        item = Published(plan, self._clock())
        with self._lock:
            self._current = item
            listeners = list(self._listeners)
        for listener in listeners:
            listener(item)
        return item

    def latest(self) -> Published | None:
        with self._lock:
            return self._current

    def age_s(self) -> float | None:
        """Seconds since the latest plan was published; None before the first one."""
        current = self.latest()
        return None if current is None else max(0.0, self._clock() - current.published_at)

    def subscribe(self, listener: Callable[[Published], None]) -> None:
        """Call ``listener`` on every publish (streams: KEDA StreamIsActive / StreamMetricSpec)."""
        with self._lock:
            self._listeners.append(listener)
