"""Installed library versions fed into a digest: a memo's code version changes when a library its values come
from changes."""

from __future__ import annotations

from collections.abc import Iterable
from importlib import metadata
from typing import Any


def add_library_versions(h: Any, libraries: Iterable[str]) -> None:
    """Feed ``name=version;`` of each library (``name=-;`` where it is not installed) into the hash ``h``."""
    for lib in libraries:
        try:
            h.update(f"{lib}={metadata.version(lib)};".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{lib}=-;".encode())
