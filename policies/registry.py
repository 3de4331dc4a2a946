"""Registry of sizing policies: decorator registration that rejects duplicates.

Third parties add policies through the ``gpu_rightsizer.policies`` entry-point group; one instance of
:class:`recommender.core.registry.Registry`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from recommender.core.registry import Registry, callable_or_not

PolicyFn = Callable[[Any], Any]  # (policies.rightsize.Context) -> Recommendation
POLICIES: Registry[PolicyFn] = Registry(
    "policy", "gpu_rightsizer.policies", builtins={"gpu-rightsize": "policies.rightsize"}, check=callable_or_not
)


def register_policy(name: str) -> Callable[[PolicyFn], PolicyFn]:
    """Decorator: register the decorated function as the policy called ``name``."""
    return POLICIES.register(name)


def get_policy(name: str) -> PolicyFn:
    """The policy called ``name``; a ConfigError listing the known ones otherwise."""
    return POLICIES.get(name)


def policy_names() -> list[str]:
    """Every policy that can be asked for (plugins listed, not imported)."""
    return POLICIES.names()
