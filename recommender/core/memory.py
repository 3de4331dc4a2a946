"""Memory a process has freed, handed back to the system (an edge: the pure stages never call it)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable


@functools.lru_cache(maxsize=1)
def _trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none (musl, macOS, Windows)."""
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    except OSError:
        return None


def give_back_freed() -> bool:
    """Return the free pages of every malloc arena to the system (glibc's ``malloc_trim(0)``); whether it could.

    Threads that decoded answers freed them into their own arenas, which the main thread never allocates from:
    without this, those pages stay resident for the rest of the run. Values and objects in use are untouched."""
    trim = _trim()
    if trim is None:
        return False
    trim(0)
    return True
