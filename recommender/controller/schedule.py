"""The run loop: an apscheduler BackgroundScheduler calls :meth:`Controller.reconcile` every interval until
asked to stop, then lets the running pass finish and hands the Lease over at once (the elector renews it
on its own thread meanwhile).
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.schedulers.base import BaseScheduler

from recommender.controller.loop import Controller
from recommender.core.stopping import wait

log = logging.getLogger("rightsizer.controller")


def run_scheduled(controller: Controller, interval_s: float, stop: threading.Event,
                  scheduler: BaseScheduler | None = None) -> None:
    """Reconcile every ``interval_s`` until ``stop`` is set; then finish the running pass and release the lease.

    The lease is acquired first and renewed on the elector's own thread, independent of ``interval_s``.
    ``scheduler`` (not started) is for tests; by default a BackgroundScheduler in UTC.
    """
    scheduler = scheduler or BackgroundScheduler(timezone="UTC")
    scheduler.add_job(_tick, "interval", args=[controller], seconds=interval_s, max_instances=1, coalesce=True,
                      next_run_time=datetime.now(UTC), id="reconcile")
    try:
        if controller.elector is not None:
            controller.elector.start()
        scheduler.start()
        wait(stop)  # in slices: a signal another thread received still ends it
    finally:
        if scheduler.running:
            scheduler.shutdown(wait=True)
        if controller.elector is not None:
            controller.elector.stop()  # stops renewing, then releases


def _tick(controller: Controller) -> None:
    """One scheduled pass: an unexpected exception (a bug) is logged and the next interval runs as usual."""
    try:
        controller.reconcile()
    except Exception:
        log.exception("reconcile failed; the next one runs in one interval")
