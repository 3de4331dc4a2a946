"""Pure: :class:`Builder` collects the changes to one object and the guards they need while walking it — a
replaced value, a map key set, vLLM flags in a container's args, and a share's
:class:`~recommender.mechanisms.base.PodEdits` (GPU resources, env, node selector, pod annotations) — and
builds the :class:`~recommender.controller.changeset.ChangeSet`.

JSON patch cannot test that a key is absent, so adding one guards its parent; removing list entries guards
the list. Nothing here knows a sharing mechanism: each one's edits come from its plugin.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from recommender.controller.changeset import Change, ChangeSet, ObjectRef
from recommender.controller.patch import esc, get
from recommender.mechanisms.base import GPU, GPU_SHARED, MIG_PREFIX, PodEdits

TEMPLATE = "/spec/template"


class Builder:
    """Collects changes and their guards while walking one object."""

    def __init__(self, obj: Mapping[str, Any], base: str = TEMPLATE) -> None:
        self.obj = obj
        self.base = base  # the JSON pointer of the pod template being walked (a Volcano Job: one task's)
        self.changes: list[Change] = []
        self.guards: dict[str, Any] = {}
        self.skipped: list[str] = []

    @property
    def containers(self) -> str:
        return f"{self.base}/spec/containers"

    def build(self, ref: ObjectRef) -> ChangeSet:
        return ChangeSet(ref, tuple(self.changes), tuple(self.guards.items()), tuple(self.skipped))

    def replace(self, path: str, what: str, old: Any, new: Any) -> None:
        if old == new:
            return
        if old is None:
            self.changes.append(Change(path, what, None, new))
        else:
            self.guards[path] = old
            self.changes.append(Change(path, what, old, new))

    def set_key(self, parent: str, container: Mapping[str, Any], key: str, what: str, new: Any) -> None:
        old = container.get(key)
        if old is None and new is not None:
            self.guards.setdefault(parent, dict(container))  # JSON patch cannot test absence: test the parent
        self.replace(f"{parent}/{esc(key)}", what, old, new)

    def flags(self, i: int, c: Mapping[str, Any], values: Mapping[str, str]) -> None:
        """vLLM flags in the container's ``args``: replaced where found (``--f v`` or ``--f=v``), else appended."""
        base = f"{self.containers}/{i}"
        args = [str(t) for t in c.get("args") or []]
        missing = []
        for flag, value in values.items():
            j = next((j for j, t in enumerate(args) if t == flag or t.startswith(flag + "=")), None)
            if j is not None and args[j] == flag and j + 1 < len(args):
                self.replace(f"{base}/args/{j + 1}", f"vllm {flag}", args[j + 1], value)
            elif j is not None and args[j] != flag:
                self.replace(f"{base}/args/{j}", f"vllm {flag}", args[j], f"{flag}={value}")
            elif any(flag in str(t) for t in [*(c.get("command") or []), *args]):
                self.skipped.append(f"vllm {flag}: set inside a shell command string, not changed")
            else:
                missing.append(f"{flag}={value}")
        self._append(base, "args", args if "args" in c else None, missing, "vllm")

    def pod_edits(self, template: Mapping[str, Any], i: int | None, edits: PodEdits) -> None:
        """``edits`` on the pod template, container ``i`` holding the GPU share: env set, resources set and
        dropped, env dropped, node selector, then annotations set and dropped. Without such a container nothing
        of edits that touch one is written (their node selector and annotations neither)."""
        spec = template.get("spec") or {}
        if edits.on_container:
            if i is None:
                self.skipped.append("no container requests a GPU: MPS/MIG/HAMi/whole-GPU changes left out")
                return
            c = (spec.get("containers") or [])[i]
            self.envs(i, c, dict(edits.env))
            if edits.resources:
                self.resources(i, c, dict(edits.resources), edits.drops)
            self.drop_envs(i, c, edits.drop_env)
            if edits.node_selector:
                self.node_selector(spec, dict(edits.node_selector))
        meta = template.get("metadata")
        values = dict(edits.annotations)
        if values:
            self.pod_annotations(meta, values)
        self.drop_pod_annotations((meta or {}).get("annotations") or {},
                                  [k for k in edits.drop_annotations if k not in values])

    def envs(self, i: int, c: Mapping[str, Any], values: Mapping[str, str]) -> None:
        """Literal env values: replaced where set, appended where absent; ``valueFrom`` is left alone."""
        base = f"{self.containers}/{i}"
        env = [dict(e) for e in c.get("env") or []]
        missing = []
        for name, value in values.items():
            j = next((j for j, e in enumerate(env) if e.get("name") == name), None)
            if j is None:
                missing.append({"name": name, "value": value})
            elif "value" in env[j]:
                self.replace(f"{base}/env/{j}/value", f"env {name}", env[j]["value"], value)
            else:
                self.skipped.append(f"env {name}: set from a reference (valueFrom), not changed")
        self._append(base, "env", env if "env" in c else None, missing, "env")

    def _append(self, base: str, key: str, have: list[Any] | None, items: list[Any], what: str) -> None:
        """Append ``items`` to the list at ``base/key`` (creating it when absent), guarding the list."""
        if not items:
            return
        self.guards[f"{base}/name"] = get(self.obj, f"{base}/name")
        if have is None:
            self.changes.append(Change(f"{base}/{key}", f"{what} {key}", None, items))
            return
        self.guards[f"{base}/{key}"] = have
        for k, item in enumerate(items):
            label = item if isinstance(item, str) else item["name"]
            self.changes.append(Change(f"{base}/{key}/{len(have) + k}", f"{what} {label}", None, item))

    def resources(self, i: int, c: Mapping[str, Any], want: Mapping[str, str], drop: Callable[[str], bool]) -> None:
        """``want`` set and the keys ``drop`` names removed, in the container's limits and in its requests when
        they hold a GPU resource (extended resources need requests equal to limits; requests without any
        default to the limits); each changed section is guarded, and the container's name."""
        base = f"{self.containers}/{i}/resources"
        self.guards[f"{self.containers}/{i}/name"] = c.get("name")
        resources = c.get("resources")
        if not (resources or {}).get("limits"):  # no limits yet (a KAI share's container): they are added whole
            if resources is None:
                self.changes.append(Change(base, "resources", None, {"limits": dict(want)}))
            else:
                self.guards[base] = dict(resources)  # JSON patch cannot test absence: test the parent
                self.changes.append(Change(f"{base}/limits", "limits", resources.get("limits"), dict(want)))
        for section in ("limits", "requests"):
            have = dict((c.get("resources") or {}).get(section) or {})
            if not have or (section == "requests" and not any(is_gpu(k) or k in want for k in have)):
                continue
            removed = sorted(k for k in have if drop(k) and k not in want)
            changed = sorted(k for k, v in want.items() if str(have.get(k)) != v)
            if not removed and not changed:
                continue
            self.guards[f"{base}/{section}"] = have
            for k in removed:
                self.changes.append(Change(f"{base}/{section}/{esc(k)}", f"{section} {k}", have[k], None))
            for k in changed:
                self.changes.append(Change(f"{base}/{section}/{esc(k)}", f"{section} {k}", have.get(k), want[k]))

    def pod_annotations(self, meta: Mapping[str, Any] | None, values: Mapping[str, str]) -> None:
        """``values`` set in the pod template's annotations (the map created when absent)."""
        base = f"{self.base}/metadata"
        if meta is None:
            self.skipped.append("pod annotations: the pod template has no metadata")
            return
        have = meta.get("annotations")
        if have is None:
            self.guards[base] = dict(meta)  # JSON patch cannot test absence: test the parent
            self.changes.append(Change(f"{base}/annotations", "pod annotations", None, dict(values)))
            return
        for k, v in values.items():
            self.set_key(f"{base}/annotations", have, k, f"pod annotation {k}", v)

    def drop_envs(self, i: int, c: Mapping[str, Any], names: Sequence[str]) -> None:
        """Literal env entries named by ``names`` removed, last first so each index still points at its entry
        (the inverse adds them back first to last); the list is guarded."""
        env = [dict(e) for e in c.get("env") or []]
        gone = [j for j, e in enumerate(env) if e.get("name") in names and "value" in e]
        if not gone:
            return
        base = f"{self.containers}/{i}"
        self.guards[f"{base}/name"] = c.get("name")
        self.guards[f"{base}/env"] = env
        for j in reversed(gone):
            self.changes.append(Change(f"{base}/env/{j}", f"env {env[j]['name']}", env[j], None))

    def node_selector(self, spec: Mapping[str, Any], values: Mapping[str, str]) -> None:
        """``values`` set in the pod template's node selector (created when absent)."""
        have = spec.get("nodeSelector")
        if have is None:
            self.guards[f"{self.base}/spec"] = dict(spec)  # JSON patch cannot test absence: test the parent
            self.changes.append(Change(f"{self.base}/spec/nodeSelector", "nodeSelector", None, dict(values)))
            return
        for k, v in values.items():
            self.set_key(f"{self.base}/spec/nodeSelector", have, k, f"nodeSelector {k}", v)

    def drop_pod_annotations(self, have: Mapping[str, Any], keys: Sequence[str]) -> None:
        """The template's annotations named by ``keys`` removed, each guarded by the value it had."""
        for k in keys:
            if k in have:
                self.replace(f"{self.base}/metadata/annotations/{esc(k)}", f"pod annotation {k}", have[k], None)


def is_gpu(resource: str) -> bool:
    """Whether ``resource`` is a GPU device resource (whole, shared or a MIG slice)."""
    return resource in (GPU, GPU_SHARED) or resource.startswith(MIG_PREFIX)


def gpu_container(containers: Sequence[Mapping[str, Any]]) -> int | None:
    """The first container whose limits hold a GPU device resource."""
    return next((i for i, c in enumerate(containers)
                 if any(is_gpu(k) for k in ((c.get("resources") or {}).get("limits") or {}))), None)


def vllm_container(containers: Sequence[Mapping[str, Any]]) -> int | None:
    """The first container that runs vLLM (by its image, command or args)."""
    def runs_vllm(c: Mapping[str, Any]) -> bool:
        tokens = [str(t) for t in [*(c.get("command") or []), *(c.get("args") or [])]]
        return "vllm" in str(c.get("image", "")).lower() or any("vllm" in t for t in tokens)

    return next((i for i, c in enumerate(containers) if runs_vllm(c)), None)


def named_container(template: Mapping[str, Any], containers: Sequence[Mapping[str, Any]],
                    annotation: str) -> int | None:
    """The container the pod annotation ``annotation`` names (absent: the first; a name not found: None)."""
    name = ((template.get("metadata") or {}).get("annotations") or {}).get(annotation)
    if name is None:
        return 0 if containers else None
    return next((i for i, c in enumerate(containers) if c.get("name") == name), None)
