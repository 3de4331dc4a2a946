"""Registry of data sources: each turns settings into a Snapshot. Duplicates are rejected.

Built-in: ``demo`` (the bundled snapshot), ``file`` (a snapshot directory), ``prometheus`` (a live
Prometheus-compatible API, plus the Kubernetes API or kube-state-metrics for the inventory).
Third parties add sources through the ``gpu_rightsizer.sources`` entry-point group; one instance of
:class:`recommender.core.registry.Registry`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from recommender.core.progress import Progress
from recommender.core.registry import Registry, callable_or_not
from recommender.core.settings import Settings
from recommender.core.usage import Snapshot

if TYPE_CHECKING:
    from collectors.prometheus.client import PromClient
    from collectors.prometheus.collect import UsageCache


@dataclass(frozen=True)
class SourceRequest:
    """What a source is asked for: settings, the window's end, an optional path, (in a loop, or a report's on
    disk) the cache of the last collection, which a source may use to read only what is new, and the Prometheus
    client to read with (one that sent requests ahead: ``collectors.prometheus.ahead``)."""

    settings: Settings
    end: datetime
    path: str | None = None
    cache: UsageCache | None = None
    client: PromClient | None = None


SourceFn = Callable[[SourceRequest, Progress], Snapshot]
SOURCES: Registry[SourceFn] = Registry(
    "source", "gpu_rightsizer.sources",
    builtins=dict.fromkeys(("demo", "file", "prometheus"), "collectors.sources"),
    check=callable_or_not,
)


def register_source(name: str) -> Callable[[SourceFn], SourceFn]:
    """Decorator: register the decorated function as the source called ``name``."""
    return SOURCES.register(name)


def get_source(name: str) -> SourceFn:
    """The source called ``name``; a ConfigError listing the known ones otherwise."""
    return SOURCES.get(name)
