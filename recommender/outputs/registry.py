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
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from importlib.metadata import EntryPoint, entry_points
from typing import TypeAlias

from recommender.core.errors import ConfigError
from recommender.core.plan import Plan
from recommender.core.usage import Snapshot

Formatter: TypeAlias = Callable[[Plan, Snapshot | None], str]
# files a format writes beside its report when it goes to a file: suffix -> text (CSV's MIG plan)
Companions: TypeAlias = Callable[[Plan], dict[str, str]]
ENTRY_POINT_GROUP = "gpu_rightsizer.formatters"

_FORMATTERS: dict[str, Formatter] = {}
_COMPANIONS: dict[str, Companions] = {}
BUILTIN_MODULES = {  # name -> module that registers it on import
    "table": "recommender.outputs.table",
    "wide": "recommender.outputs.table",
    "json": "recommender.outputs.jsondoc",
    "yaml": "recommender.outputs.yamldoc",
    "csv": "recommender.outputs.csvfmt",
    "markdown": "recommender.outputs.markdown",
    "html": "recommender.outputs.htmlreport",
}


class DuplicateFormatterError(ValueError):
    """Two different formatters claimed one name: a packaging bug, so it fails loudly at import."""


def register_formatter(name: str) -> Callable[[Formatter], Formatter]:
    """Decorator: register ``fn`` as the formatter called ``name``.

    Registering the very same function again is a no-op (module reloads, an entry point that points at
    a function whose module also registers it); a different function under a taken name raises.
    """
    if not name or not name.strip() or name != name.strip():
        raise ValueError(f"formatter name {name!r} must be non-empty with no surrounding spaces")

    def wrap(fn: Formatter) -> Formatter:
        taken = _FORMATTERS.get(name)
        builtin = BUILTIN_MODULES.get(name)
        if taken is not None and taken is not fn:
            raise DuplicateFormatterError(
                f"formatter {name!r} is already registered ({_qualname(taken)}); refusing {_qualname(fn)}"
            )
        if builtin is not None and getattr(fn, "__module__", None) != builtin:  # even before it is imported
            raise DuplicateFormatterError(
                f"formatter {name!r} is already registered (built-in, {builtin}); refusing {_qualname(fn)}"
            )
        _FORMATTERS[name] = fn
        return fn

    return wrap


def register_companions(name: str) -> Callable[[Companions], Companions]:
    """Decorator: ``fn(plan)`` gives the files the format ``name`` writes beside its report (suffix -> text),
    for what one file of that format cannot hold. A second, different function for one format raises."""

    def wrap(fn: Companions) -> Companions:
        taken = _COMPANIONS.get(name)
        if taken is not None and taken is not fn:
            raise DuplicateFormatterError(f"companion files of {name!r} are already registered ({_qualname(taken)})")
        _COMPANIONS[name] = fn
        return fn

    return wrap


def get_companions(name: str) -> Companions | None:
    """The companion files of format ``name``, or None when it writes none."""
    if name in BUILTIN_MODULES:
        import_module(BUILTIN_MODULES[name])
    return _COMPANIONS.get(name)


def unregister_formatter(name: str) -> None:
    """Remove a formatter (tests use it to leave the registry as they found it)."""
    _FORMATTERS.pop(name, None)


def get_formatter(name: str) -> Formatter:
    """The formatter called ``name``; a :class:`ConfigError` listing the valid names otherwise."""
    if name in BUILTIN_MODULES:
        import_module(BUILTIN_MODULES[name])
    if name in _FORMATTERS:
        return _FORMATTERS[name]
    found = _plugins().get(name, [])
    if not found:
        raise ConfigError(f"unknown report format {name!r}; valid formats: {', '.join(formatter_names())}")
    if len(found) > 1:
        raise ConfigError(f"report format {name!r} is provided by several plugins: "
                          f"{', '.join(ep.value for ep in found)}; uninstall all but one")
    return _load_plugin(found[0])


def formatter_names() -> list[str]:
    """Every format that can be asked for: built-in, registered, and installed plugins (none imported)."""
    return sorted(set(BUILTIN_MODULES) | set(_FORMATTERS) | set(_plugins()))


def _plugins() -> dict[str, list[EntryPoint]]:
    """Installed plugin entry points by name; a name a built-in already has is not a plugin's to take."""
    found: dict[str, list[EntryPoint]] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name not in _FORMATTERS and ep.name not in BUILTIN_MODULES:
            found.setdefault(ep.name, []).append(ep)
    return found


def _load_plugin(ep: EntryPoint) -> Formatter:
    """Import one plugin and register it; a plugin that fails to import is a configuration error."""
    try:
        fn = ep.load()
    except Exception as exc:  # a third party's import error: say whose, keep the cause
        raise ConfigError(f"report format {ep.name!r} ({ep.value}) failed to load: {exc}") from exc
    if not callable(fn):
        raise ConfigError(f"report format {ep.name!r} ({ep.value}) is not callable")
    return register_formatter(ep.name)(fn)


def _qualname(fn: object) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
