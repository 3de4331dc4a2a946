"""Work shared with a forked child: items ``0..n-1``, each ``make(i)``, that a forked copy of this process takes from
the front while this process does other work, and that this process takes from the back once it comes to them
(:meth:`Shared.result`), so that both cores work until the last one is made (a report's forecasts beside its
features and classes). The child makes what this process would have made from the same objects (fork copies them;
nothing is sent to it) and sends each item as it is made, so the answer is the same. Where there is no second core
or no fork, :func:`share` is None and the caller makes them all.

Every wait on the child has a deadline: once this process has made all it can take, it waits for the child's last
items at most :func:`patience` (a multiple of the slowest item either process made, plus a floor), then stops the
child (SIGTERM, then SIGKILL, each join bounded) and makes here what the child took and did not send. A child that
sends anything malformed (an answer that does not unpickle, an index it did not take or sent twice, a value
``check`` refuses) is not trusted at all: every item is then made here. The child dies with this process
(``PR_SET_PDEATHSIG`` on Linux) and is stopped when the report raises (:meth:`Shared.close`, a context manager).

Only the one-shot report forks: a long-lived process with threads of its own (the controller, the scaler's
gRPC server) does not.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import math
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, TypeVar

T = TypeVar("T")

WAIT_SLOWEST = 4.0  # the child's last item may take this many times the slowest item seen (it shares a core)
WAIT_FLOOR_S = 2.0  # and at least this, s: a fork's exit and a pipe's latency where items are tiny
STOP_S = 5.0  # the most one stop step (a join after SIGTERM, after SIGKILL; the reader's join) waits, s


def patience(slowest_s: float) -> float:
    """How long this process waits for the child's last items once it has none left to make, seconds. The child
    takes one item at a time and sends each as it is made, so at that point it holds at most one in progress: a
    working child needs about one item's time. Waiting too little costs only time (the item is made here)."""
    return WAIT_FLOOR_S + WAIT_SLOWEST * slowest_s


class _Answers:
    """What the child sent, read on a thread of this process as it comes (the child never blocks on a full pipe):
    items by index, the slowest item's seconds, whether it said it is done, and whether anything was malformed."""

    def __init__(self, conn: Connection, n: int, check: Callable[[Any], bool]) -> None:
        self.items: dict[int, Any] = {}
        self.slowest_s = 0.0
        self.bad = False
        self.over = threading.Event()  # done, failed, gone or malformed: nothing more will come
        self._conn, self._n, self._check = conn, n, check
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, name="aside-reader", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            while True:
                try:
                    message = self._conn.recv()
                except (EOFError, OSError):  # the child is gone: what came whole before stands
                    return
                if not self._take(message):
                    return
        except BaseException:  # an answer that does not unpickle: a partial or garbled message
            self.bad = True
        finally:
            self.over.set()

    def _take(self, message: object) -> bool:
        """Keep one message; whether more may follow."""
        if isinstance(message, tuple) and len(message) == 4 and message[0] == "item":
            _, i, value, seconds = message
            if (type(i) is int and 0 <= i < self._n and i not in self.items and isinstance(seconds, float)
                    and self._check(value)):
                with self._lock:
                    self.items[i] = value
                    self.slowest_s = max(self.slowest_s, seconds)
                return True
        elif (isinstance(message, tuple) and len(message) == 2 and message[0] in ("done", "failed")
              and type(message[1]) is int and message[1] == len(self.items)):
            return False
        self.bad = True
        return False

    def trusted(self) -> dict[int, Any]:
        """The items sent, or none where anything the child sent was malformed."""
        with self._lock:
            return {} if self.bad else dict(self.items)

    def stop(self) -> None:
        """Close this end and wait for the reader (bounded: after the child is stopped its end is closed)."""
        self._thread.join(STOP_S)
        with suppress(OSError):
            self._conn.close()


class Shared(Generic[T]):
    """Items being made by a forked child from the front; :meth:`result` makes the rest here from the back."""

    def __init__(self, process: BaseProcess, answers: _Answers, bounds: Any, n: int, make: Callable[[int], T]
                 ) -> None:
        self._process, self._answers, self._bounds, self._n, self._make = process, answers, bounds, n, make
        self._closed = False

    def result(self, wait_s: float | None = None) -> dict[int, T]:
        """Item index -> value, every one of ``0..n-1``: those this process takes until the child and it meet,
        the child's, and those the child took and did not send (or all of its own where it is not trusted), made
        here. ``wait_s``: the most this process waits for the child's last items (default :func:`patience` of the
        slowest item seen)."""
        out: dict[int, T] = {}
        slowest = 0.0
        while (i := self._take_back()) is not None:
            start = time.perf_counter()
            out[i] = self._make(i)
            slowest = max(slowest, time.perf_counter() - start)
        self._answers.over.wait(patience(max(slowest, self._answers.slowest_s)) if wait_s is None else wait_s)
        self.close()
        theirs = self._answers.trusted()
        taken = self._bounds.get_obj()[0]  # the child is stopped: the raw array is read without its lock
        if any(i >= taken or i in out for i in theirs):  # one the child was not given: nothing of it is used
            theirs = {}
        for i in range(self._n):
            if i not in out and i not in theirs:
                out[i] = self._make(i)
        return out | theirs

    def _take_back(self) -> int | None:
        """The next item from the back; None when none is left, or when the lock cannot be had within the floor
        (the child holds it and does not let go: it is stopped, and every item not made here is left to the end)."""
        lock = self._bounds.get_lock()
        if not lock.acquire(timeout=WAIT_FLOOR_S):
            self.close()
            return None
        try:
            return _step(self._bounds, front=False)
        finally:
            lock.release()

    def close(self) -> None:
        """Stop the child if it still runs (SIGTERM, then SIGKILL; each join bounded) and the reader. Idempotent."""
        if self._closed:
            return
        self._closed = True
        process = self._process
        process.join(0)
        for stop in (process.terminate, process.kill):
            if not process.is_alive():
                break
            with suppress(OSError):
                stop()
            process.join(STOP_S)
        self._answers.stop()

    def __enter__(self) -> Shared[T]:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
                 ) -> None:
        self.close()


def cores(cgroup: Path = Path("/sys/fs/cgroup")) -> int:
    """Cores this process may run on: those it may be scheduled on, fewer where its cgroup's CPU quota (a container's
    CPU limit) allows less than that many cores' time."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        n = os.cpu_count() or 1
    quota = cpu_quota(cgroup)
    return n if quota is None else max(1, min(n, math.floor(quota)))


def cpu_quota(cgroup: Path) -> float | None:
    """The cores' time a cgroup allows, from cgroup v2's ``cpu.max`` or v1's ``cpu.cfs_quota_us`` /
    ``cpu.cfs_period_us`` (``cgroup``: where they are mounted); None where there is no limit or it cannot be read."""
    try:
        if (v2 := cgroup / "cpu.max").exists():
            quota, period = v2.read_text(encoding="ascii").split()[:2]
        else:
            v1 = cgroup / "cpu"
            quota = (v1 / "cpu.cfs_quota_us").read_text(encoding="ascii").strip()
            period = (v1 / "cpu.cfs_period_us").read_text(encoding="ascii").strip()
        q, p = (None if quota in ("max", "-1") else float(quota)), float(period)
    except (OSError, ValueError):
        return None
    return None if q is None or not (q > 0 and p > 0) else q / p


def resident_mib() -> float | None:
    """This process' resident memory, MiB; None where it cannot be read (no ``/proc``)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def fits(within_mib: float | None) -> bool:
    """Whether a forked copy of this process fits within ``within_mib`` beside it: twice its resident memory, as
    the copy may come to own every page the two share (copy-on-write). None: no limit. Unknown memory: no."""
    if within_mib is None:
        return True
    here = resident_mib()
    return here is not None and 2 * here <= within_mib


def share(n: int, make: Callable[[int], T], check: Callable[[Any], bool] = lambda _: True,
          prepare: Callable[[], object] | None = None) -> Shared[T] | None:
    """Items ``0..n-1`` started in a forked child, or None where this process has one core or is not on Linux (the
    only system where the child is sure to die with it, ``PR_SET_PDEATHSIG``; macOS' system libraries are not
    safe to fork either). ``check``: whether a value the child sent is of the kind ``make`` returns (one that is
    not: nothing the child sent is used). ``prepare``: run in the child before its first item (to drop what it
    will not read)."""
    if not sys.platform.startswith("linux") or cores() < 2:
        return None
    ctx = multiprocessing.get_context("fork")
    bounds = ctx.Array("q", [0, n])  # [next from the front, one past the last left]: taken under its lock
    receive, send = ctx.Pipe(duplex=False)
    gc.freeze()  # the child's collections leave this process' objects alone: their pages stay shared
    try:
        process = ctx.Process(target=_child, args=(bounds, make, send, prepare, os.getpid()), daemon=True)
        process.start()
    except OSError:  # no process to be had (limits, memory): the caller makes them all
        receive.close()
        return None
    finally:
        gc.unfreeze()
        send.close()  # the child holds its own end: when it is gone, this process reads the end of the pipe
    return Shared(process, _Answers(receive, n, check), bounds, n, make)


def _step(bounds: Any, front: bool) -> int | None:
    """The next item's index from one end, or None when none is left (the caller holds the lock: the raw array is
    read, which takes no lock of its own)."""
    raw = bounds.get_obj()
    lo, hi = raw[0], raw[1]
    if lo >= hi:
        return None
    if front:
        raw[0] = lo + 1
        return int(lo)
    raw[1] = hi - 1
    return int(hi - 1)


def _die_with(parent: int) -> None:
    """Have the kernel kill this process when its parent dies (Linux); exit now if it already has."""
    name = ctypes.util.find_library("c")
    with suppress(OSError, AttributeError):
        ctypes.CDLL(name, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)


def _child(bounds: Any, make: Callable[[int], object], conn: Connection, prepare: Callable[[], object] | None,
           parent: int) -> None:
    _die_with(parent)
    sent = 0
    try:
        if prepare is not None:
            prepare()
        while True:
            with bounds.get_lock():
                i = _step(bounds, front=True)
            if i is None:
                break
            start = time.perf_counter()
            value = make(i)
            conn.send(("item", i, value, time.perf_counter() - start))
            sent += 1
        conn.send(("done", sent))
    except BaseException:  # any failure (an unpicklable value too): the parent makes what is missing
        with suppress(BaseException):
            conn.send(("failed", sent))
    finally:
        conn.close()
