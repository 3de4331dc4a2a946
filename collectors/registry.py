"""Registry of data sources: each turns settings into a Snapshot. Duplicates are rejected.

Built-in: ``demo`` (the bundled snapshot), ``file`` (a snapshot directory), ``prometheus`` (a live
Prometheus-compatible API, plus the Kubernetes API or kube-state-metrics for the inventory).
Third parties add sources through the ``gpu_rightsizer.sources`` entry-point group.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from importlib.metadata import entry_points
from typing import TYPE_CHECKING

from recommender.core.errors import ConfigError
from recommender.core.progress import Progress
from recommender.core.settings import Settings
from recommender.core.usage import Snapshot

if TYPE_CHECKING:
    from collectors.prometheus.collect import UsageCache


@dataclass(frozen=True)
class SourceRequest:
    """What a source is asked for: settings, the window's end, an optional path, and (in a loop) the cache
    of the last collection, which a source may use to read only what is new."""

    settings: Settings
    end: datetime
    path: str | None = None
    cache: UsageCache | None = None


SourceFn = Callable[[SourceRequest, Progress], Snapshot]
_SOURCES: dict[str, SourceFn] = {}


def register_source(name: str) -> Callable[[SourceFn], SourceFn]:
    def wrap(fn: SourceFn) -> SourceFn:
        if name in _SOURCES and _SOURCES[name] is not fn:
            raise ValueError(f"source {name!r} is already registered")
        _SOURCES[name] = fn
        return fn

    return wrap


def _builtins() -> None:
    import collectors.sources  # noqa: F401  (registers demo, file, prometheus)

    for ep in entry_points(group="gpu_rightsizer.sources"):
        if ep.name not in _SOURCES:
            register_source(ep.name)(ep.load())


def get_source(name: str) -> SourceFn:
    _builtins()
    try:
        return _SOURCES[name]
    except KeyError:
        raise ConfigError(f"unknown source {name!r}; known: {', '.join(sorted(_SOURCES))}") from None
