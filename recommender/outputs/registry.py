"""Registry of report formatters: decorator registration that rejects duplicates, lookup by name.

A formatter is a plain callable ``(plan, snapshot) -> str`` (HTML too is one string), so a formatter
is trivially testable and the CLI only ever writes text. Each built-in format registers itself when
its module is imported, and lookup imports only the module of the format asked for (``html`` pulls in
matplotlib, which the other formats should not pay for).

Third parties add formats through the ``gpu_rightsizer.formatters`` entry-point group, e.g. in their
``pyproject.toml``::

    [project.entry-points."gpu_rightsizer.formatters"]
    pdf = "my_package.report:render_pdf"

Entry points are loaded lazily: listing names reads only their metadata, and a plugin's module is
imported only when its format is asked for, so one broken plugin cannot break the built-in formats.
Both tables here are instances of :class:`recommender.core.registry.Registry`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

from recommender.core.plan import Plan
from recommender.core.registry import DuplicateError, Registry, callable_or_not
from recommender.core.usage import Snapshot

Formatter: TypeAlias = Callable[[Plan, Snapshot | None], str]
# files a format writes beside its report when it goes to a file: suffix -> text (CSV's MIG plan)
Companions: TypeAlias = Callable[[Plan], dict[str, str]]
ENTRY_POINT_GROUP = "gpu_rightsizer.formatters"
# Two different formatters claimed one name: a packaging bug, so it fails loudly at import.
DuplicateFormatterError = DuplicateError

BUILTIN_MODULES = {  # name -> module that registers it on import
    "table": "recommender.outputs.table",
    "wide": "recommender.outputs.table",
    "json": "recommender.outputs.jsondoc",
    "yaml": "recommender.outputs.yamldoc",
    "csv": "recommender.outputs.csvfmt",
    "markdown": "recommender.outputs.markdown",
    "html": "recommender.outputs.htmlreport",
}
# built-in formats that render the plan alone (their snapshot argument is unused): a report in only these lets
# the snapshot's usage frames go before it is rendered
PLAN_ONLY = frozenset({"json", "yaml", "csv"})

FORMATTERS: Registry[Formatter] = Registry(
    "report format", ENTRY_POINT_GROUP, builtins=BUILTIN_MODULES, known="valid formats", check=callable_or_not
)
COMPANIONS: Registry[Companions] = Registry("companion files of format", None, builtins=BUILTIN_MODULES)


def register_formatter(name: str) -> Callable[[Formatter], Formatter]:
    """Decorator: register ``fn`` as the formatter called ``name``.

    Registering the very same function again is a no-op (module reloads, an entry point that points at
    a function whose module also registers it); a different function under a taken name raises.
    """
    return FORMATTERS.register(name)


def register_companions(name: str) -> Callable[[Companions], Companions]:
    """Decorator: ``fn(plan)`` gives the files the format ``name`` writes beside its report (suffix -> text),
    for what one file of that format cannot hold. A second, different function for one format raises."""
    return COMPANIONS.register(name)


def get_companions(name: str) -> Companions | None:
    """The companion files of format ``name``, or None when it writes none."""
    return COMPANIONS.find(name)


def unregister_formatter(name: str) -> None:
    """Remove a formatter (tests use it to leave the registry as they found it)."""
    FORMATTERS.unregister(name)


def get_formatter(name: str) -> Formatter:
    """The formatter called ``name``; a :class:`ConfigError` listing the valid names otherwise."""
    return FORMATTERS.get(name)


def formatter_names() -> list[str]:
    """Every format that can be asked for: built-in, registered, and installed plugins (none imported)."""
    return FORMATTERS.names()
