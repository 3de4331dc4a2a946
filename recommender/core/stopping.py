"""Stopping a long-running command on SIGTERM/SIGINT.

CPython runs a signal's handler on the main thread, but the kernel may deliver the signal to any thread
that does not block it (gRPC, asyncio, scheduler and lease threads). The main thread, blocked in a lock
wait, then sleeps on until that wait's timeout before the handler runs: with ``--every 1h`` a SIGTERM could
go unanswered for an hour. So the main thread waits in slices of at most ``SLICE_S`` seconds, and the
handlers that arrived meanwhile run between slices.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Iterable

SLICE_S = 0.5  # longest the main thread sleeps without running pending signal handlers

log = logging.getLogger("recommender.stopping")


def on_signals(signals: Iterable[signal.Signals] = (signal.SIGTERM, signal.SIGINT)) -> threading.Event:
    """An Event that ``signals`` set (each logged once as it arrives); call from the main thread."""
    stop = threading.Event()

    def handler(signum: int, _frame: object) -> None:
        log.info("%s: stopping", signal.Signals(signum).name)
        stop.set()

    for sig in signals:
        signal.signal(sig, handler)
    return stop


def wait(stop: threading.Event, timeout_s: float | None = None) -> bool:
    """Wait until ``stop`` is set (True) or ``timeout_s`` seconds pass (False; None: no end), in slices
    short enough that a signal another thread received still stops the wait within ``SLICE_S``."""
    end = None if timeout_s is None else time.monotonic() + timeout_s
    while not stop.is_set():
        left = SLICE_S if end is None else end - time.monotonic()
        if left <= 0:
            return False
        stop.wait(min(left, SLICE_S))
    return True
