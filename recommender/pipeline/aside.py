"""Work done aside: a function run in a forked copy of this process, its answer sent back over a pipe, so that a
report uses a second core for one stage while this process does the next (the report's forecasts beside its
features and classes). The child computes what this process would have computed from the same objects (fork
copies them; nothing is sent to it), so the answer is the same; where there is no second core, no fork or the
child fails, :meth:`Aside.result` is None and the caller does the work itself.

Only the one-shot report forks: a long-lived process with threads of its own (the controller, the scaler's
gRPC server) does not.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Generic, TypeVar

T = TypeVar("T")


class Aside(Generic[T]):
    """A forked child computing one value; :meth:`result` waits for it."""

    def __init__(self, process: BaseProcess, conn: Connection) -> None:
        self._process, self._conn = process, conn

    def result(self) -> T | None:
        """The child's value, or None where it failed or sent nothing (the caller computes it then)."""
        try:
            ok, value = self._conn.recv()
        except (EOFError, OSError):
            ok, value = False, None
        finally:
            self._conn.close()
            self._process.join()
        return value if ok else None


def cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def aside(fn: Callable[[], T]) -> Aside[T] | None:
    """``fn()`` started in a forked child, or None where this process has one core or cannot fork."""
    if cores() < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return None
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    try:
        process = ctx.Process(target=_child, args=(fn, send), daemon=True)
        process.start()
    except OSError:  # no process to be had (limits, memory): the caller does the work
        receive.close()
        return None
    finally:
        send.close()  # the child holds its own end
    return Aside(process, receive)


def _child(fn: Callable[[], object], conn: Connection) -> None:
    try:
        value = fn()
        conn.send((True, value))
    except BaseException:  # any failure (an unpicklable value too): the parent computes it
        conn.send((False, None))
    finally:
        conn.close()
