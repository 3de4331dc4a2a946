"""One registry for everything pluggable: sources, sizing policies, sharing mechanisms, report formats.

Built-ins register themselves when their module is imported; lookup imports only the module of the name
asked for, so a format that needs matplotlib costs nothing until it is used. Third parties add entries
through an entry-point group (e.g. ``gpu_rightsizer.formatters``); entry points are loaded lazily, so one
broken plugin cannot break the built-ins. Registering the very same object twice is a no-op; a different
object under a taken name raises :class:`DuplicateError` (a packaging bug, so it fails loudly at import).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import import_module
from importlib.metadata import EntryPoint, entry_points
from typing import Generic, TypeVar

from recommender.core.errors import ConfigError

T = TypeVar("T")


class DuplicateError(ValueError):
    """Two different objects claimed one name in one registry."""


@dataclass
class Registry(Generic[T]):
    """Named entries of one kind.

    ``kind`` names an entry in messages ("report format"); ``builtins`` maps a built-in name to the module
    that registers it on import; ``known`` is the word before the list of names in the unknown-name error.
    """

    kind: str
    group: str | None  # entry-point group of third-party plugins; None: built-ins and registrations only
    builtins: Mapping[str, str] = field(default_factory=dict)
    known: str = "known"
    check: Callable[[object], str | None] | None = None  # what is wrong with a plugin's object, or None
    _entries: dict[str, T] = field(default_factory=dict, repr=False)
    _imported: bool = field(default=False, repr=False)  # every built-in's module imported (by :meth:`loaded`)

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: register the decorated object as ``name``."""
        if not name or not name.strip() or name != name.strip():
            raise ValueError(f"{self.kind} name {name!r} must be non-empty with no surrounding spaces")

        def wrap(obj: T) -> T:
            self.add(name, obj)
            return obj

        return wrap

    def add(self, name: str, obj: T) -> None:
        """Register ``obj`` as ``name``; the same object again is a no-op, a different one raises."""
        taken = self._entries.get(name)
        if taken is not None and taken is not obj:
            raise DuplicateError(f"{self.kind} {name!r} is already registered ({qualname(taken)}); "
                                 f"refusing {qualname(obj)}")
        builtin = self.builtins.get(name)
        module = getattr(obj, "__module__", None)
        if builtin is not None and module is not None and module != builtin:  # even before it is imported
            raise DuplicateError(f"{self.kind} {name!r} is already registered (built-in, {builtin}); "
                                 f"refusing {qualname(obj)}")
        self._entries[name] = obj

    def unregister(self, name: str) -> None:
        """Remove an entry (tests use it to leave the registry as they found it)."""
        self._entries.pop(name, None)

    def get(self, name: str) -> T:
        """The entry called ``name``; a :class:`ConfigError` listing the valid names otherwise."""
        if name in self.builtins:
            import_module(self.builtins[name])
        if name in self._entries:
            return self._entries[name]
        found = self._plugins().get(name, [])
        if not found:
            raise ConfigError(f"unknown {self.kind} {name!r}; {self.known}: {', '.join(self.names())}")
        if len(found) > 1:
            raise ConfigError(f"{self.kind} {name!r} is provided by several plugins: "
                              f"{', '.join(ep.value for ep in found)}; uninstall all but one")
        return self._load(found[0])

    def find(self, name: str) -> T | None:
        """The built-in or registered entry called ``name``, or None (plugins are not consulted)."""
        if name in self.builtins:
            import_module(self.builtins[name])
        return self._entries.get(name)

    def names(self) -> list[str]:
        """Every name that can be asked for: built-in, registered and installed plugins (none imported)."""
        return sorted(set(self.builtins) | set(self._entries) | set(self._plugins()))

    def loaded(self) -> dict[str, T]:
        """Every built-in entry, imported, plus whatever is registered (plugins stay unloaded)."""
        if not self._imported:  # once: a module stays imported (a mechanism's lookup calls this per allocation)
            for module in sorted(set(self.builtins.values())):
                import_module(module)
            self._imported = True
        return dict(self._entries)

    def _plugins(self) -> dict[str, list[EntryPoint]]:
        """Installed plugin entry points by name; a name a built-in already has is not a plugin's to take."""
        found: dict[str, list[EntryPoint]] = {}
        if self.group is None:
            return found
        for ep in entry_points(group=self.group):
            if ep.name not in self._entries and ep.name not in self.builtins:
                found.setdefault(ep.name, []).append(ep)
        return found

    def _load(self, ep: EntryPoint) -> T:
        """Import one plugin and register it; a plugin that fails to import is a configuration error."""
        try:
            obj = ep.load()
        except Exception as exc:  # a third party's import error: say whose, keep the cause
            raise ConfigError(f"{self.kind} {ep.name!r} ({ep.value}) failed to load: {exc}") from exc
        problem = self.check(obj) if self.check is not None else None
        if problem:
            raise ConfigError(f"{self.kind} {ep.name!r} ({ep.value}) {problem}")
        self.add(ep.name, obj)
        return obj


def callable_or_not(obj: object) -> str | None:
    """A ``check`` for registries of callables."""
    return None if callable(obj) else "is not callable"


def qualname(obj: object) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"
