"""SIGTERM stops the controller and serve loops even when the kernel hands the signal to another thread.

CPython runs a handler on the main thread only; a signal delivered to a gRPC, asyncio or scheduler thread
does not wake a main thread blocked in a lock wait. Here a helper thread sends SIGUSR1 to itself
(``pthread_kill``), so the signal never lands on the main thread; a watchdog sets ``stop`` after WAIT_S so a
failing test ends, and the test asserts the handler, not the watchdog, stopped the loop."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from recommender.controller.schedule import run_scheduled

WAIT_S = 20.0
SIG = signal.SIGUSR1
SETTLE_S = 1.0


class Passes:
    elector = None

    def __init__(self) -> None:
        self.ran = threading.Event()

    def reconcile(self) -> Any:
        self.ran.set()


@pytest.fixture
def stop() -> Iterator[tuple[threading.Event, list[str]]]:
    """``stop`` set by a SIGUSR1 handler (as the CLI installs for SIGTERM) or, failing that, by a watchdog."""
    event, who = threading.Event(), []

    def handler(_signum: int, _frame: object) -> None:
        who.append("signal")
        event.set()

    old = signal.signal(SIG, handler)
    watchdog = threading.Timer(WAIT_S, lambda: (who.append("watchdog"), event.set()))
    watchdog.daemon = True
    watchdog.start()
    try:
        yield event, who
    finally:
        watchdog.cancel()
        signal.signal(SIG, old)


def _signal_from_another_thread(after: threading.Event) -> threading.Thread:
    def send() -> None:
        if after.wait(WAIT_S):
            time.sleep(SETTLE_S)  # let the main thread block first: a signal sent before then proves nothing
            signal.pthread_kill(threading.get_ident(), SIG)  # this thread, never the main one

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def test_the_controller_loop_stops_on_a_signal_another_thread_received(
        stop: tuple[threading.Event, list[str]]) -> None:
    event, who = stop
    passes = Passes()
    sender = _signal_from_another_thread(passes.ran)
    run_scheduled(passes, 3600.0, event)  # type: ignore[arg-type]
    sender.join(WAIT_S)
    assert who[:1] == ["signal"], who


def test_the_serve_loop_stops_on_a_signal_another_thread_received(stop: tuple[threading.Event, list[str]]) -> None:
    from recommender.cli.serve import until_stopped
    from recommender.pipeline.planstore import PlanStore

    event, who = stop
    replans: list[int] = []
    now = threading.Event()
    now.set()
    sender = _signal_from_another_thread(now)
    until_stopped(event, PlanStore(), 3600.0, lambda: replans.append(1))  # no plan yet: next try in a minute
    sender.join(WAIT_S)
    assert who[:1] == ["signal"], who
    assert replans == []
