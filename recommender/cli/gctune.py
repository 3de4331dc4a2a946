"""Fewer garbage collections while one report runs (an edge concern: the process, not the pipeline).

A report allocates millions of small objects that live to its end (imports, the memo's JSON, per-workload
dataclasses); with CPython's default thresholds (700, 10, 10) each of the several hundred collections that
triggers walks them again, about a quarter of a warm report's CPU. Inside :func:`fewer_collections` what is
alive at its start is frozen (never walked again) and a young collection runs every ``YOUNG`` allocations, so
short-lived cycles are still freed; on exit both are as they were. :func:`no_collection_at_exit` spares the
exiting process the interpreter's last full collection, a walk of every object the report left.
"""

from __future__ import annotations

import atexit
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager

YOUNG = 100_000  # allocations (less deallocations) between young collections: CPython's default is 700
OLDER = 20  # young collections per middle one, and middle ones per full one: the defaults are 10 and 10


@contextmanager
def fewer_collections(first: Callable[[], object] | None = None) -> Iterator[None]:
    """Run the block with the objects alive at its start frozen and collections ``YOUNG`` allocations apart;
    ``first`` (the command's imports: what they make lives to the end) runs before the block, and what is alive
    after it is frozen too (a freeze also restarts the count to the next young collection)."""
    was = gc.get_threshold()
    frozen = gc.get_freeze_count()
    gc.freeze()
    gc.set_threshold(YOUNG, OLDER, OLDER)
    try:
        if first is not None:
            first()
            gc.freeze()
        yield
    finally:
        gc.set_threshold(*was)
        if frozen == 0:  # a caller that froze before us keeps its own
            gc.unfreeze()


def no_collection_at_exit() -> None:
    """Once per process: turn the collector off as the interpreter exits (``atexit`` runs before its last full
    collection, ``Py_FinalizeEx``), which walks every object still alive to free nothing the ending process
    needs. Cycles left at exit are then not finalized: what a command writes is closed before it returns."""
    global _AT_EXIT
    if not _AT_EXIT:
        atexit.register(gc.disable)
        _AT_EXIT = True


_AT_EXIT = False
