"""The run loop: take the Lease before the first pass, reconcile on the configured interval, survive an
exception inside reconcile, and on stop let the running pass finish before the Lease is released. Bounded
waits on Events, no fixed sleeps."""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from apscheduler.schedulers.background import BackgroundScheduler

from recommender.controller.schedule import run_scheduled

INTERVAL_S = 0.05
WAIT_S = 3.0  # bound on every wait; the whole test takes well under a second


class Elector:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def start(self) -> None:
        self.log.append("elect")

    def stop(self) -> None:
        self.log.append("release")


class Reconciler:
    """Call 2 raises; call 4 blocks until ``proceed`` is set, so stop arrives while a pass runs."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.log: list[str] = []
        self.elector = Elector(self.log)
        self.in_fourth, self.proceed = threading.Event(), threading.Event()

    def reconcile(self) -> Any:
        self.times.append(time.monotonic())
        n = len(self.times)
        self.log.append(f"start {n}")
        if n == 2:
            raise RuntimeError("a bug inside reconcile")
        if n == 4:
            self.in_fourth.set()
            assert self.proceed.wait(WAIT_S)
        self.log.append(f"end {n}")


def test_reconciles_on_the_interval_survives_an_exception_and_stops_gracefully(
        caplog: pytest.LogCaptureFixture) -> None:
    ctl, stop = Reconciler(), threading.Event()
    scheduler = BackgroundScheduler(timezone="UTC")
    runner = threading.Thread(target=run_scheduled, args=(ctl, INTERVAL_S, stop, scheduler), daemon=True)
    with caplog.at_level(logging.ERROR, logger="rightsizer.controller"):
        runner.start()
        assert ctl.in_fourth.wait(WAIT_S), f"the loop stopped after {ctl.log}"  # call 2 raised, 3 and 4 ran
        assert scheduler.get_job("reconcile").trigger.interval == timedelta(seconds=INTERVAL_S)
        stop.set()  # while pass 4 is still running
        ctl.proceed.set()
        runner.join(WAIT_S)
    assert not runner.is_alive()
    # k-th pass no earlier than (k − 1) intervals after the first (apscheduler never fires early)
    assert ctl.times[3] - ctl.times[0] >= 3 * INTERVAL_S * 0.9
    # the lease first (acquired, then renewed on the elector's own thread), before any pass
    assert ctl.log[:8] == ["elect", "start 1", "end 1", "start 2", "start 3", "end 3", "start 4", "end 4"]
    # the lease goes last, after every pass that started has ended (a pass may slip in before shutdown)
    assert ctl.log[-1] == "release" and ctl.log.count("release") == 1
    started = {e.split()[1] for e in ctl.log if e.startswith("start")} - {"2"}
    assert started == {e.split()[1] for e in ctl.log if e.startswith("end")}
    assert not scheduler.running
    assert any("reconcile failed" in r.getMessage() and r.exc_info for r in caplog.records)
