"""Registry of sizing policies: decorator registration that rejects duplicates.

Third parties add policies through the ``gpu_rightsizer.policies`` entry-point group.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from recommender.core.errors import ConfigError

PolicyFn = Callable[[Any], Any]  # (policies.rightsize.Context) -> Recommendation
_POLICIES: dict[str, PolicyFn] = {}


def register_policy(name: str) -> Callable[[PolicyFn], PolicyFn]:
    def wrap(fn: PolicyFn) -> PolicyFn:
        if name in _POLICIES and _POLICIES[name] is not fn:
            raise ValueError(f"policy {name!r} is already registered")
        _POLICIES[name] = fn
        return fn

    return wrap


def _load_entry_points() -> None:
    for ep in entry_points(group="gpu_rightsizer.policies"):
        if ep.name not in _POLICIES:
            register_policy(ep.name)(ep.load())


def get_policy(name: str) -> PolicyFn:
    import policies.rightsize  # noqa: F401  (registers the built-in policy)

    _load_entry_points()
    try:
        return _POLICIES[name]
    except KeyError:
        raise ConfigError(f"unknown policy {name!r}; known: {', '.join(sorted(_POLICIES))}") from None


def policy_names() -> list[str]:
    get_policy("gpu-rightsize")
    return sorted(_POLICIES)
