"""Library versions and source files fed into a digest: a memo's or a cache's code version changes when a library
or a source its values come from changes."""

from __future__ import annotations

from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any


def add_library_versions(h: Any, libraries: Iterable[str]) -> None:
    """Feed ``name=version;`` of each library (``name=-;`` where it is not installed) into the hash ``h``."""
    for lib in libraries:
        try:
            h.update(f"{lib}={metadata.version(lib)};".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{lib}=-;".encode())


def add_files(h: Any, files: Iterable[tuple[str, Path]]) -> None:
    """Feed each file's name, a NUL, its bytes and a NUL into the hash ``h``, in the order given."""
    for name, path in files:
        h.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
