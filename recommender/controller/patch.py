"""Pure: a :class:`~recommender.controller.changeset.ChangeSet` as the JSON patch that applies it only if nothing
moved since it was read, its exact inverse, and the same applied in memory.

Guards are JSON-patch ``test`` ops on what is about to change (a replaced value, or the list/map an entry is
added to or removed from) plus ``metadata.resourceVersion`` when the server has one: a concurrent edit makes
the whole patch fail instead of being overwritten. JSON pointers follow RFC 6901 (:func:`esc`, :func:`unesc`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from recommender.controller.changeset import Change, ChangeSet


def to_patch(cs: ChangeSet, resource_version: str | None = None,
             extra: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
    """Guards first (``test``), then one op per change, then ``extra`` ops (the record annotation)."""
    ops: list[dict[str, Any]] = []
    if resource_version:
        ops.append({"op": "test", "path": "/metadata/resourceVersion", "value": resource_version})
    ops += [{"op": "test", "path": p, "value": v} for p, v in cs.guards]
    for c in cs.changes:
        if c.old is None:
            ops.append({"op": "add", "path": c.path, "value": c.new})
        elif c.new is None:
            ops.append({"op": "remove", "path": c.path})
        else:
            ops.append({"op": "replace", "path": c.path, "value": c.new})
    return ops + [dict(o) for o in extra]


def inverse(cs: ChangeSet, removed_parents: Sequence[tuple[str, Any]] = ()) -> ChangeSet:
    """The change set that undoes ``cs``, guarded by the values ``cs`` wrote (nobody changed them since):
    each value it set, and for each entry it removed, the parent as ``cs`` left it (:func:`removed_parents`),
    so no undo op runs unguarded."""
    back = tuple(Change(c.path, c.what, c.new, c.old) for c in reversed(cs.changes))
    guards = tuple((c.path, c.new) for c in cs.changes if c.new is not None) + tuple(removed_parents)
    return ChangeSet(cs.target, back, guards)


def removed_parents(obj: Mapping[str, Any], cs: ChangeSet) -> list[tuple[str, Any]]:
    """For each entry ``cs`` removes from ``obj``: (its parent's path, the parent once ``cs`` is applied)."""
    gone = sorted({c.path.rsplit("/", 1)[0] for c in cs.changes if c.new is None})
    if not gone:
        return []
    after = apply_local(obj, cs)
    return [(p, copy.deepcopy(get(after, p))) for p in gone]


def apply_local(obj: Mapping[str, Any], cs: ChangeSet) -> dict[str, Any]:
    """``obj`` with ``cs`` applied in memory (what an undo must find, a dry run's result)."""
    import jsonpatch

    result: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(dict(obj)), to_patch(cs))
    return result


def get(obj: Any, pointer: str) -> Any:
    """The value at JSON pointer ``pointer`` in ``obj``."""
    for part in pointer.strip("/").split("/"):
        part = unesc(part)
        obj = obj[int(part)] if isinstance(obj, list) else obj.get(part)
    return obj


def esc(key: str) -> str:
    """A map key as one JSON-pointer segment (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def unesc(segment: str) -> str:
    """One JSON-pointer segment back to the map key (RFC 6901)."""
    return segment.replace("~1", "/").replace("~0", "~")
