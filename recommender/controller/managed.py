"""Pure: the fields the controller manages, so a change record (even a validly signed one) can only ever
make it touch those. Rollback and the automatic revert check every change of a record here first; one
change outside the list refuses the whole record.

Managed on a Deployment or StatefulSet: ``spec.replicas``; in a container, GPU resources (whole GPUs,
shared GPUs, MIG slices, HAMi's limits), the two MPS env vars, the vLLM flags the policy sizes; in the pod
template, KAI's GPU-share annotations and the node-selector keys of unshared GPU nodes
(``mechanisms.exclusive_node_selector``), and the name in one ``resourceClaims`` entry, switched from
another name to a DRA claim the controller made for that workload (``<workload>-gpu-*``). On a Volcano Job only
the GPU and vGPU resources of a task template's containers (``spec.tasks[i].template``), never its replicas. On
a KEDA ScaledObject its replica bounds and trigger thresholds; on a HorizontalPodAutoscaler its replica bounds.
The controller's own annotations are written beside a change, never recorded in one.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from recommender.controller.builder import is_gpu
from recommender.controller.changes import GPU_MEM_UTIL, MAX_NUM_SEQS
from recommender.controller.changeset import Change
from recommender.controller.dra import managed_ref
from recommender.controller.patch import get, unesc
from recommender.core.resources import VOLCANO_JOB
from recommender.mechanisms.base import GPU, GPU_SHARED, MIG_PREFIX
from recommender.mechanisms.hami import HAMI_CORES_PCT, HAMI_MEM_MIB, HAMI_MEM_PCT
from recommender.mechanisms.kai import KAI_DEVICES, KAI_FRACTION, KAI_MEMORY
from recommender.mechanisms.mps import MPS_MEM_ENV, MPS_THREADS_ENV
from recommender.mechanisms.volcano import VOLCANO_RESOURCES

GPU_RESOURCES = frozenset({GPU, GPU_SHARED, HAMI_MEM_MIB, HAMI_MEM_PCT, HAMI_CORES_PCT})
MPS_ENVS = frozenset({MPS_THREADS_ENV, MPS_MEM_ENV})
VLLM_FLAGS = (GPU_MEM_UTIL, MAX_NUM_SEQS)
KAI_KEYS = frozenset({KAI_FRACTION, KAI_MEMORY, KAI_DEVICES})
MAX_REPLICAS = 100_000
_C = r"/spec/template/spec/containers/(\d+)"
# a Volcano Job: a task template's container resources, nothing else
_TASK_RESOURCE = r"/spec/tasks/\d+/template/spec/containers/\d+/resources/(limits|requests)/"
_SEG = r"((?:[^/~]|~[01])+)"  # one JSON-pointer segment


def gpu_resource(name: str) -> bool:
    return name in GPU_RESOURCES or name.startswith(MIG_PREFIX)


def _count(v: Any) -> bool:
    return v is None or (isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_REPLICAS)


def _text(v: Any) -> bool:
    return v is None or (isinstance(v, str | int | float) and not isinstance(v, bool) and len(str(v)) <= 256)


def _flag_token(v: Any) -> bool:
    return isinstance(v, str) and any(v.startswith(f + "=") for f in VLLM_FLAGS) and len(v) <= 256


def _mps_entry(v: Any) -> bool:
    return isinstance(v, Mapping) and set(v) <= {"name", "value"} and v.get("name") in MPS_ENVS \
        and _text(v.get("value"))


def _map_of(v: Any, keys: Any) -> bool:
    """None, or a map whose keys all pass ``keys`` and whose values are short scalars."""
    return v is None or (isinstance(v, Mapping) and all(keys(k) and _text(x) for k, x in v.items()))


def _list_of(v: Any, item: Any) -> bool:
    return v is None or (isinstance(v, list) and all(item(x) for x in v))


def _workload_rule(c: Change, obj: Mapping[str, Any], selector_keys: Collection[str]) -> bool:
    p, vals = c.path, (c.old, c.new)
    if p == "/spec/replicas":
        return all(_count(v) for v in vals)
    claim = managed_ref(p, c.old, c.new, obj)
    if claim is not None:
        return claim
    if m := re.fullmatch(_C + r"/args/(\d+)", p):
        j = int(m.group(2))
        flag = _get_or_none(obj, f"/spec/template/spec/containers/{m.group(1)}/args/{j - 1}") if j else None
        return all(v is None or _flag_token(v) or (flag in VLLM_FLAGS and _text(v)) for v in vals)
    if re.fullmatch(_C + r"/args", p):
        return c.old is None and _list_of(c.new, _flag_token)
    if m := re.fullmatch(_C + r"/env/(\d+)/value", p):
        name = _get_or_none(obj, f"/spec/template/spec/containers/{m.group(1)}/env/{m.group(2)}/name")
        return name in MPS_ENVS and all(_text(v) for v in vals)
    if re.fullmatch(_C + r"/env/(\d+)", p):
        return all(v is None or _mps_entry(v) for v in vals)
    if re.fullmatch(_C + r"/env", p):
        return c.old is None and _list_of(c.new, _mps_entry)
    if m := re.fullmatch(_C + r"/resources/(limits|requests)/" + _SEG, p):
        return gpu_resource(unesc(m.group(3))) and all(_text(v) for v in vals)
    if re.fullmatch(_C + r"/resources/limits", p):
        return all(_map_of(v, gpu_resource) for v in vals)
    if re.fullmatch(_C + r"/resources", p):
        return c.old is None and isinstance(c.new, Mapping) and set(c.new) == {"limits"} \
            and _map_of(c.new["limits"], gpu_resource)
    if m := re.fullmatch(r"/spec/template/metadata/annotations/" + _SEG, p):
        return unesc(m.group(1)) in KAI_KEYS and all(_text(v) for v in vals)
    if p == "/spec/template/metadata/annotations":
        return c.old is None and _map_of(c.new, KAI_KEYS.__contains__)
    if m := re.fullmatch(r"/spec/template/spec/nodeSelector/" + _SEG, p):
        return unesc(m.group(1)) in selector_keys and all(_text(v) for v in vals)
    if p == "/spec/template/spec/nodeSelector":
        return c.old is None and _map_of(c.new, lambda k: k in selector_keys)
    return False


def _task_rule(c: Change) -> bool:
    """A Volcano Job: one vGPU (or GPU device) resource of a task template's container, set or removed."""
    m = re.fullmatch(_TASK_RESOURCE + _SEG, c.path)
    return m is not None and (unesc(m.group(2)) in VOLCANO_RESOURCES or is_gpu(unesc(m.group(2)))) \
        and all(_text(v) for v in (c.old, c.new))


def _get_or_none(obj: Mapping[str, Any], pointer: str) -> Any:
    try:
        return get(obj, pointer)
    except (IndexError, KeyError, TypeError, ValueError, AttributeError):
        return None


_AUTOSCALER_PATHS = {
    "ScaledObject": (r"/spec/(minReplicaCount|maxReplicaCount)", r"/spec/triggers/\d+/metadata/threshold"),
    "HorizontalPodAutoscaler": (r"/spec/(minReplicas|maxReplicas)", None),
}


def _autoscaler_rule(kind: str, c: Change) -> bool:
    counts, text = _AUTOSCALER_PATHS[kind]
    if re.fullmatch(counts, c.path):
        return all(_count(v) for v in (c.old, c.new))
    return text is not None and re.fullmatch(text, c.path) is not None and all(_text(v) for v in (c.old, c.new))


def unmanaged(kind: str, changes: Sequence[Change], obj: Mapping[str, Any],
              selector_keys: Collection[str] = ()) -> str | None:
    """Why the first of ``changes`` to a ``kind`` object is not one the controller makes; None when all are.
    ``obj`` is that object as it is now (an args or env index is judged by what stands beside it)."""
    for c in changes:
        if kind in ("Deployment", "StatefulSet"):
            ok = _workload_rule(c, obj, selector_keys)
        elif kind == VOLCANO_JOB:
            ok = _task_rule(c)
        elif kind in _AUTOSCALER_PATHS:
            ok = _autoscaler_rule(kind, c)
        else:
            return f"the controller changes no {kind}"
        if not ok:
            return f"{c.path} on a {kind} is not a field the controller manages (or its value is not one it writes)"
    return None
