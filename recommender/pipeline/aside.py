"""Work shared with a forked child: items ``0..n-1``, each ``make(i)``, that a forked copy of this process takes from
the front while this process does other work, and that this process takes from the back once it comes to them
(:meth:`Shared.result`), so that both cores work until the last one is made (a report's forecasts beside its
features and classes). The child makes what this process would have made from the same objects (fork copies them;
nothing is sent to it), so the answer is the same; where there is no second core or no fork, :func:`share` is
None, and an item the child took and did not send back (it failed) is missing from the result: the caller makes
those itself.

Only the one-shot report forks: a long-lived process with threads of its own (the controller, the scaler's
gRPC server) does not.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Shared(Generic[T]):
    """Items being made by a forked child from the front; :meth:`result` makes the rest here from the back."""

    def __init__(self, process: BaseProcess, conn: Connection, bounds: Any, make: Callable[[int], T]) -> None:
        self._process, self._conn, self._bounds, self._make = process, conn, bounds, make

    def result(self) -> dict[int, T]:
        """Item index -> value: those this process takes until the child and it meet, and the child's."""
        out = {}
        while (i := _take(self._bounds, front=False)) is not None:
            out[i] = self._make(i)
        try:
            ok, theirs = self._conn.recv()
        except (EOFError, OSError):
            ok, theirs = False, {}
        finally:
            self._conn.close()
            self._process.join()
        return out | theirs if ok else out


def cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def share(n: int, make: Callable[[int], T]) -> Shared[T] | None:
    """Items ``0..n-1`` started in a forked child, or None where this process has one core or cannot fork."""
    if cores() < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return None
    ctx = multiprocessing.get_context("fork")
    bounds = ctx.Array("q", [0, n])  # [next from the front, one past the last left]: taken under its lock
    receive, send = ctx.Pipe(duplex=False)
    try:
        process = ctx.Process(target=_child, args=(bounds, make, send), daemon=True)
        process.start()
    except OSError:  # no process to be had (limits, memory): the caller makes them all
        receive.close()
        return None
    finally:
        send.close()  # the child holds its own end
    return Shared(process, receive, bounds, make)


def _take(bounds: Any, front: bool) -> int | None:
    """The next item's index from one end, or None when none is left."""
    with bounds.get_lock():
        lo, hi = bounds[0], bounds[1]
        if lo >= hi:
            return None
        if front:
            bounds[0] = lo + 1
            return int(lo)
        bounds[1] = hi - 1
        return int(hi - 1)


def _child(bounds: Any, make: Callable[[int], object], conn: Connection) -> None:
    try:
        made = {}
        while (i := _take(bounds, front=True)) is not None:
            made[i] = make(i)
        conn.send((True, made))
    except BaseException:  # any failure (an unpicklable value too): the parent makes what is missing
        conn.send((False, {}))
    finally:
        conn.close()
