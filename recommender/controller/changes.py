"""Pure: what a recommendation changes on a live object, as typed :class:`Change` records and the JSON
patch that applies them only if nothing moved since we read it.

Every change carries its previous value, so the inverse (:func:`inverse`) is exact and ``rightsizer
rollback`` needs nothing but the record. Guards are JSON-patch ``test`` ops on what is about to change
(a replaced value, or the list/map an entry is added to or removed from) plus ``metadata.resourceVersion``
when the server has one: a concurrent edit makes the whole patch fail instead of being overwritten.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from policies.replicas import positive_number, trigger_thresholds
from policies.shares import MPS_MEM_ENV, MPS_THREADS_ENV, hami_resources, hami_whole_resources, kai_annotations, mps_env
from recommender.core.autoscalers import HPA
from recommender.core.inventory import Sharing
from recommender.core.plan import Recommendation, ScalingPlan

GPU = "nvidia.com/gpu"
GPU_SHARED = "nvidia.com/gpu.shared"  # time-slicing or MPS with renameByDefault (reference.md §3)
MIG_PREFIX = "nvidia.com/mig-"
MPS_THREADS, MPS_MEM = MPS_THREADS_ENV, MPS_MEM_ENV
GPU_MEM_UTIL = "--gpu-memory-utilization"
MAX_NUM_SEQS = "--max-num-seqs"
HAMI_MEM, HAMI_MEM_PCT = "nvidia.com/gpumem", "nvidia.com/gpumem-percentage"  # reference.md §6: not both
KAI_FRACTION, KAI_MEMORY = "gpu-fraction", "gpu-memory"  # reference.md §7: alternatives, one at a time
KAI_DEVICES, KAI_CONTAINER = "gpu-fraction-num-devices", "gpu-fraction-container-name"  # default: container 0
ACTUATED_KINDS = frozenset({"Deployment", "StatefulSet"})
REPLICAS = "/spec/replicas"


@dataclass(frozen=True)
class ObjectRef:
    kind: str
    namespace: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.kind}/{self.name}"


@dataclass(frozen=True)
class Change:
    """One value at one JSON pointer: ``old`` None means it was added, ``new`` None that it was removed."""

    path: str
    what: str  # for people: "replicas", "vllm --max-num-seqs", "env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
    old: Any
    new: Any

    def describe(self) -> str:
        return f"{self.what}: {_show(self.old)} → {_show(self.new)}"


@dataclass(frozen=True)
class ChangeSet:
    """Changes to one object, the ``test`` guards that must hold first, and what was left out and why."""

    target: ObjectRef
    changes: tuple[Change, ...] = ()
    guards: tuple[tuple[str, Any], ...] = ()
    skipped: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.changes

    def diff(self) -> str:
        """The dry-run diff: one line per change."""
        return "; ".join(c.describe() for c in self.changes) or "no change"


@dataclass(frozen=True)
class Desired:
    """What the actuator should make true; None leaves that field alone."""

    replicas: int | None = None
    gpu_memory_utilization: float | None = None
    max_num_seqs: int | None = None
    mps_thread_pct: int | None = None
    mps_mem_limit: str | None = None  # CUDA_MPS_PINNED_DEVICE_MEM_LIMIT value, e.g. "0=20480M"
    mig_profile: str | None = None
    mig_count: int = 1
    whole_gpus: int | None = None  # nvidia.com/gpu per pod, in place of its MIG slices
    # the autoscaler's bounds where one owns replicas: ScaledObject minReplicaCount/maxReplicaCount, HPA min/maxReplicas
    keda_min: int | None = None
    keda_max: int | None = None
    keda_thresholds: tuple[tuple[str, str], ...] = ()  # (metric a Prometheus trigger's query reads, threshold)
    hami_limits: tuple[tuple[str, str], ...] = ()  # container limits, as policies.shares.hami_resources
    pod_annotations: tuple[tuple[str, str], ...] = ()  # pod template, as policies.shares.kai_annotations
    drop_pod_annotations: tuple[str, ...] = ()  # pod template annotations removed (KAI's share, for whole GPUs)
    node_selector: tuple[tuple[str, str], ...] = ()  # added to the pod's (whole GPUs off MPS or time-slicing)
    drop_envs: tuple[str, ...] = ()  # literal env values removed from the GPU container (MPS's, for whole GPUs)
    reasons: tuple[str, ...] = field(default=())


def desired_from(rec: Recommendation, allowed: Sequence[str], min_replicas: int | None = None,
                 max_replicas: int | None = None, exclusive_nodes: Mapping[str, str] | None = None) -> Desired:
    """The parts of a recommendation a policy allows, within its replica bounds. Whole GPUs in place of MPS or
    time-slicing go to the nodes ``exclusive_nodes`` labels (``mechanisms.exclusive_node_selector``): the
    device plugin shares every GPU of a node, so a whole one is only found on another node."""
    alloc, why = rec.recommended, []
    if "replicas" in allowed and rec.scaling is None:
        why.append("replicas: no scaling recommendation")
    if alloc is None:
        return replace(_replicas(rec.scaling, allowed, min_replicas, max_replicas), reasons=tuple(why))
    vllm = alloc.vllm if "vllm" in allowed else None
    mps = alloc.sharing == Sharing.MPS and "mps" in allowed
    mig = alloc.sharing == Sharing.MIG and "mig" in allowed and alloc.mig_profile is not None
    held = rec.workload.allocation.sharing
    whole = alloc.sharing == Sharing.EXCLUSIVE and "exclusive" in allowed and held != Sharing.EXCLUSIVE
    moves_node = whole and held in (Sharing.MPS, Sharing.TIME_SLICING)
    if moves_node and not exclusive_nodes:
        why.append(f"exclusive: whole GPUs in place of {held.value} are not applied: the node's device plugin shares "
                   "every GPU, and no node selector of unshared GPU nodes is set (mechanisms.exclusive_node_selector)")
        whole = moves_node = False
    elif whole and held is Sharing.NONE:
        why.append(f"exclusive: whole GPUs in place of {held.value} are not applied")
        whole = False
    if alloc.sharing == Sharing.TIME_SLICING and "time-slicing" in allowed:
        why.append("time-slicing: set in the node's device-plugin config, which the controller does not change: "
                   "recommended only")
    hami = alloc.sharing == Sharing.HAMI and "hami" in allowed
    if hami and alloc.hami_gpumem_mib is None and alloc.hami_gpucores_pct is None:
        why.append("hami: the recommendation sizes neither gpumem nor gpucores")
        hami = False
    gpus = max(1, alloc.gpus)
    hami_limits = hami_resources(alloc) if hami else hami_whole_resources(gpus) if whole and held == Sharing.HAMI \
        else {}
    kai = kai_annotations(alloc) if alloc.sharing == Sharing.KAI and "kai" in allowed else {}
    if alloc.sharing == Sharing.KAI and "kai" in allowed and not kai:
        why.append("kai: the recommendation has no gpu-fraction")
    shape = Desired(
        gpu_memory_utilization=vllm.gpu_memory_utilization if vllm else None,
        max_num_seqs=vllm.max_num_seqs if vllm else None,
        mps_thread_pct=round(alloc.mps_active_thread_pct) if mps and alloc.mps_active_thread_pct else None,
        mps_mem_limit=mps_env(alloc).get(MPS_MEM) if mps else None,
        mig_profile=alloc.mig_profile if mig else None,
        mig_count=max(1, alloc.mig_count),
        whole_gpus=gpus if whole and held != Sharing.HAMI else None,  # HAMi's whole GPU is its own limits
        hami_limits=tuple(sorted(hami_limits.items())),
        pod_annotations=tuple(sorted(kai.items())),
        drop_pod_annotations=(KAI_FRACTION, KAI_MEMORY, KAI_DEVICES) if whole and held == Sharing.KAI else (),
        node_selector=tuple(sorted((exclusive_nodes or {}).items())) if moves_node else (),
        drop_envs=(MPS_THREADS, MPS_MEM) if moves_node else (),
        reasons=tuple(why),
    )
    plan = rec.scaling
    if plan is not None and plan.on_today is not None and not _changes_shape(shape):
        why.append(f"replicas: sized for today's shape, as {plan.shape} (which the plan's figures are for) is not "
                   "applied here")
        plan = plan.on_today
    counts = _replicas(plan, allowed, min_replicas, max_replicas)
    return replace(shape, replicas=counts.replicas, keda_min=counts.keda_min, keda_max=counts.keda_max,
                   keda_thresholds=counts.keda_thresholds, reasons=tuple(why))


def _replicas(plan: ScalingPlan | None, allowed: Sequence[str], min_replicas: int | None,
              max_replicas: int | None) -> Desired:
    """The replica count, autoscaler bounds and trigger thresholds of ``plan`` within a policy's bounds, where the
    policy allows replicas."""
    if "replicas" not in allowed or plan is None:
        return Desired()
    lo, hi = min_replicas or 0, max_replicas or 10**6
    keda_min = max(lo, min(hi, plan.min_replicas))
    return Desired(replicas=max(lo, min(hi, plan.recommended_replicas)), keda_min=keda_min,
                   keda_max=max(keda_min, 1, min(hi, plan.max_replicas)),
                   keda_thresholds=tuple(trigger_thresholds(plan).items()))


def _changes_shape(d: Desired) -> bool:
    """Whether ``d`` moves the replicas to another GPU shape (a MIG profile, whole GPUs, an MPS, HAMi or KAI
    share)."""
    return any((d.mig_profile, d.whole_gpus, d.mps_thread_pct, d.hami_limits, d.pod_annotations))


def plan_changes(obj: Mapping[str, Any], desired: Desired, *, replicas_owned_by_keda: bool = False) -> ChangeSet:
    """The change set that makes ``obj`` (a Deployment or StatefulSet as read) what ``desired`` says."""
    meta = obj.get("metadata") or {}
    ref = ObjectRef(str(obj.get("kind")), str(meta.get("namespace", "")), str(meta.get("name", "")))
    if ref.kind not in ACTUATED_KINDS:
        return ChangeSet(ref, skipped=(f"{ref.kind} is not actuated (only {', '.join(sorted(ACTUATED_KINDS))})",))
    b = _Builder(obj)
    if desired.replicas is not None and not replicas_owned_by_keda:
        b.replace(REPLICAS, "replicas", (obj.get("spec") or {}).get("replicas", 1), desired.replicas)
    template = (obj.get("spec") or {}).get("template") or {}
    containers = template.get("spec", {}).get("containers") or []
    gpu_i = next((i for i, c in enumerate(containers) if _gpu_resources(c)), None)
    if gpu_i is None and desired.drop_pod_annotations:  # a KAI share requests no GPU resource: its container
        gpu_i = _kai_container(template, containers)
    vllm_i = next((i for i, c in enumerate(containers) if _runs_vllm(c)), gpu_i)
    if desired.gpu_memory_utilization is not None or desired.max_num_seqs is not None:
        if vllm_i is None:
            b.skipped.append("vllm: no container runs vLLM")
        else:
            flags = {GPU_MEM_UTIL: desired.gpu_memory_utilization, MAX_NUM_SEQS: desired.max_num_seqs}
            b.flags(vllm_i, containers[vllm_i], {f: _fmt(v) for f, v in flags.items() if v is not None})
    if desired.mps_thread_pct is not None or desired.mps_mem_limit is not None or desired.mig_profile \
            or desired.hami_limits or desired.whole_gpus:
        if gpu_i is None:
            b.skipped.append("no container requests a GPU: MPS/MIG/HAMi/whole-GPU changes left out")
        else:
            env = {MPS_THREADS: None if desired.mps_thread_pct is None else str(desired.mps_thread_pct),
                   MPS_MEM: desired.mps_mem_limit}
            b.envs(gpu_i, containers[gpu_i], {k: v for k, v in env.items() if v is not None})
            if desired.mig_profile:
                b.mig(gpu_i, containers[gpu_i], desired.mig_profile, desired.mig_count)
            elif desired.whole_gpus:  # the slices give way to whole GPUs (policies.mig.missed_too_often)
                b.resources(gpu_i, containers[gpu_i], {GPU: str(desired.whole_gpus)}, _is_gpu)
                b.drop_envs(gpu_i, containers[gpu_i], desired.drop_envs)
                if desired.node_selector:
                    b.node_selector(template.get("spec") or {}, dict(desired.node_selector))
            if desired.hami_limits:
                b.hami(gpu_i, containers[gpu_i], dict(desired.hami_limits))
    if desired.pod_annotations:
        b.pod_annotations(template.get("metadata"), dict(desired.pod_annotations))
    if desired.drop_pod_annotations and desired.whole_gpus and gpu_i is not None:
        b.drop_pod_annotations((template.get("metadata") or {}).get("annotations") or {}, desired.drop_pod_annotations)
    return b.build(ref)


def _kai_container(template: Mapping[str, Any], containers: Sequence[Mapping[str, Any]]) -> int | None:
    """The container a KAI GPU share belongs to (reference.md §7: named by its annotation, else the first)."""
    name = ((template.get("metadata") or {}).get("annotations") or {}).get(KAI_CONTAINER)
    if name is None:
        return 0 if containers else None
    return next((i for i, c in enumerate(containers) if c.get("name") == name), None)


# deriv(<selector>[<range>]): a gauge's growth, which the report's rate query adds to the finished rate
_DERIV = re.compile(r'deriv\(\s*[A-Za-z_:][\w:]*\s*(\{(?:[^}"]|"(?:[^"\\]|\\.)*")*\})?\s*\[[^\]]*\]\s*\)')


def scaledobject_changes(so: Mapping[str, Any], min_replicas: int, max_replicas: int,
                         thresholds: Sequence[tuple[str, str]] = (),
                         bound: Callable[[float, float], float] | None = None) -> ChangeSet:
    """KEDA owns the replica count: change its ScaledObject's min/max instead of ``spec.replicas``, and the
    ``threshold`` of each Prometheus trigger whose query reads one of ``thresholds``' metrics (the report's
    rate and waiting triggers), so the per-replica targets follow the plan instead of drifting in YAML. A
    gauge read only through ``deriv()`` does not count: the rate query adds the queue's growth to the
    finished rate (:func:`policies.replicas.arrival_rate_query`), and that makes it no waiting trigger.

    Other triggers (external, metrics-api, a query of the user's own, a ``Value`` target) are left alone; a
    threshold change is guarded by its trigger's query, so a reordered trigger list fails the patch instead
    of hitting another.
    ``bound(old, new)`` limits a numeric change (the actuator's step: :func:`guardrails.step_threshold`).
    """
    meta, spec = so.get("metadata") or {}, so.get("spec") or {}
    b = _Builder(so)
    b.set_key("/spec", spec, "minReplicaCount", "keda minReplicaCount", min_replicas)
    b.set_key("/spec", spec, "maxReplicaCount", "keda maxReplicaCount", max(max_replicas, min_replicas, 1))
    for i, trigger in enumerate((spec.get("triggers") or []) if thresholds else []):
        tmeta = trigger.get("metadata") or {}
        query = str(tmeta.get("query", ""))
        if trigger.get("type") != "prometheus":
            continue
        levels = _DERIV.sub("", query)
        hits = [(metric, value) for metric, value in thresholds if metric in levels]
        if len(hits) != 1:
            if hits:
                b.skipped.append(f"keda trigger {i}: its query reads {' and '.join(m for m, _ in hits)}: "
                                 "threshold left alone")
            continue
        metric, value = hits[0]
        if trigger.get("metricType", "AverageValue") != "AverageValue":  # KEDA's default is AverageValue
            b.skipped.append(f"keda trigger {i}: metricType {trigger['metricType']}, not a per-replica threshold")
            continue
        old = positive_number(tmeta.get("threshold"))  # None: absent or not a number, simply replaced
        if bound is not None and old is not None:
            value = f"{bound(old, float(value)):.6g}"
        if old is not None and math.isclose(old, float(value), rel_tol=1e-6):
            continue  # "7.0" already says 7: no change for formatting alone
        base = f"/spec/triggers/{i}/metadata"
        b.guards[f"{base}/query"] = query
        b.set_key(base, tmeta, "threshold", f"keda threshold ({metric})", value)
    return b.build(ObjectRef("ScaledObject", str(meta.get("namespace", "")), str(meta.get("name", ""))))


def hpa_changes(hpa: Mapping[str, Any], min_replicas: int, max_replicas: int) -> ChangeSet:
    """A HorizontalPodAutoscaler owns the replica count: change its ``minReplicas``/``maxReplicas`` instead of
    ``spec.replicas``. ``minReplicas`` stays at least 1 (0 needs the alpha ``HPAScaleToZero`` gate and an
    Object/External metric, reference.md §12) unless the HPA is at 0 already; an absent one is 1 (the API's
    default) and is not written as such. Guarded by its scaleTargetRef too: a retargeted HPA fails the patch.
    """
    meta, spec = hpa.get("metadata") or {}, hpa.get("spec") or {}
    b = _Builder(hpa)
    have = spec.get("minReplicas")
    lo = max(min_replicas, 0 if have == 0 else 1)
    if lo > min_replicas:
        b.skipped.append(f"hpa minReplicas {lo}, not {min_replicas}: an HPA scales to zero only where the "
                         "cluster enables HPAScaleToZero")
    if not (have is None and lo == 1):
        b.set_key("/spec", spec, "minReplicas", "hpa minReplicas", lo)
    b.set_key("/spec", spec, "maxReplicas", "hpa maxReplicas", max(max_replicas, lo, 1))
    if b.changes:
        b.guards["/spec/scaleTargetRef"] = spec.get("scaleTargetRef")
    return b.build(ObjectRef(HPA, str(meta.get("namespace", "")), str(meta.get("name", ""))))


def without_replicas(cs: ChangeSet) -> ChangeSet:
    """``cs`` less its ``spec.replicas`` change: what an autoscaler owns now is not written back."""
    return replace(cs, changes=tuple(c for c in cs.changes if c.path != REPLICAS),
                   guards=tuple(g for g in cs.guards if g[0] != REPLICAS))


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
    return [(p, copy.deepcopy(_get(after, p))) for p in gone]


def apply_local(obj: Mapping[str, Any], cs: ChangeSet) -> dict[str, Any]:
    """``obj`` with ``cs`` applied in memory (what an undo must find, a dry run's result)."""
    import jsonpatch

    result: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(dict(obj)), to_patch(cs))
    return result


class _Builder:
    """Collects changes and their guards while walking one object."""

    def __init__(self, obj: Mapping[str, Any]) -> None:
        self.obj = obj
        self.changes: list[Change] = []
        self.guards: dict[str, Any] = {}
        self.skipped: list[str] = []

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
        self.replace(f"{parent}/{_esc(key)}", what, old, new)

    def flags(self, i: int, c: Mapping[str, Any], values: Mapping[str, str]) -> None:
        """vLLM flags in the container's ``args``: replaced where found (``--f v`` or ``--f=v``), else appended."""
        base = f"/spec/template/spec/containers/{i}"
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

    def envs(self, i: int, c: Mapping[str, Any], values: Mapping[str, str]) -> None:
        """Literal env values: replaced where set, appended where absent; ``valueFrom`` is left alone."""
        base = f"/spec/template/spec/containers/{i}"
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
        self.guards[f"{base}/name"] = _get(self.obj, f"{base}/name")
        if have is None:
            self.changes.append(Change(f"{base}/{key}", f"{what} {key}", None, items))
            return
        self.guards[f"{base}/{key}"] = have
        for k, item in enumerate(items):
            label = item if isinstance(item, str) else item["name"]
            self.changes.append(Change(f"{base}/{key}/{len(have) + k}", f"{what} {label}", None, item))

    def mig(self, i: int, c: Mapping[str, Any], profile: str, count: int) -> None:
        """The MIG slice resource set; every other GPU resource (whole GPU, other slices) removed."""
        resource = MIG_PREFIX + profile.replace("+", ".")
        self.resources(i, c, {resource: str(count)}, _is_gpu)

    def hami(self, i: int, c: Mapping[str, Any], values: Mapping[str, str]) -> None:
        """HAMi limits set; MIG slices (a vGPU is an nvidia.com/gpu) and whichever of gpumem and
        gpumem-percentage (exclusive with each other) is not set removed."""
        self.resources(i, c, values, lambda k: k.startswith(MIG_PREFIX) or (k == HAMI_MEM_PCT and HAMI_MEM in values)
                       or (k == HAMI_MEM and HAMI_MEM_PCT in values))

    def resources(self, i: int, c: Mapping[str, Any], want: Mapping[str, str], drop: Callable[[str], bool]) -> None:
        """``want`` set and the keys ``drop`` names removed, in the container's limits and in its requests when
        they hold a GPU resource (extended resources need requests equal to limits; requests without any
        default to the limits); each changed section is guarded, and the container's name."""
        base = f"/spec/template/spec/containers/{i}/resources"
        self.guards[f"/spec/template/spec/containers/{i}/name"] = c.get("name")
        resources = c.get("resources")
        if not (resources or {}).get("limits"):  # no limits yet (a KAI share's container): they are added whole
            if resources is None:
                self.changes.append(Change(base, "resources", None, {"limits": dict(want)}))
            else:
                self.guards[base] = dict(resources)  # JSON patch cannot test absence: test the parent
                self.changes.append(Change(f"{base}/limits", "limits", resources.get("limits"), dict(want)))
        for section in ("limits", "requests"):
            have = dict((c.get("resources") or {}).get(section) or {})
            if not have or (section == "requests" and not any(_is_gpu(k) or k in want for k in have)):
                continue
            removed = sorted(k for k in have if drop(k) and k not in want)
            changed = sorted(k for k, v in want.items() if str(have.get(k)) != v)
            if not removed and not changed:
                continue
            self.guards[f"{base}/{section}"] = have
            for k in removed:
                self.changes.append(Change(f"{base}/{section}/{_esc(k)}", f"{section} {k}", have[k], None))
            for k in changed:
                self.changes.append(Change(f"{base}/{section}/{_esc(k)}", f"{section} {k}", have.get(k), want[k]))

    def pod_annotations(self, meta: Mapping[str, Any] | None, values: Mapping[str, str]) -> None:
        """KAI's pod annotations on the template; ``gpu-memory`` goes when ``gpu-fraction`` is set."""
        base = "/spec/template/metadata"
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
        if KAI_FRACTION in values and KAI_MEMORY in have:
            self.replace(f"{base}/annotations/{_esc(KAI_MEMORY)}", f"pod annotation {KAI_MEMORY}", have[KAI_MEMORY],
                         None)

    def drop_envs(self, i: int, c: Mapping[str, Any], names: Sequence[str]) -> None:
        """Literal env entries named by ``names`` removed, last first so each index still points at its entry
        (the inverse adds them back first to last); the list is guarded."""
        env = [dict(e) for e in c.get("env") or []]
        gone = [j for j, e in enumerate(env) if e.get("name") in names and "value" in e]
        if not gone:
            return
        base = f"/spec/template/spec/containers/{i}"
        self.guards[f"{base}/name"] = c.get("name")
        self.guards[f"{base}/env"] = env
        for j in reversed(gone):
            self.changes.append(Change(f"{base}/env/{j}", f"env {env[j]['name']}", env[j], None))

    def node_selector(self, spec: Mapping[str, Any], values: Mapping[str, str]) -> None:
        """``values`` set in the pod template's node selector (created when absent)."""
        have = spec.get("nodeSelector")
        if have is None:
            self.guards["/spec/template/spec"] = dict(spec)  # JSON patch cannot test absence: test the parent
            self.changes.append(Change("/spec/template/spec/nodeSelector", "nodeSelector", None, dict(values)))
            return
        for k, v in values.items():
            self.set_key("/spec/template/spec/nodeSelector", have, k, f"nodeSelector {k}", v)

    def drop_pod_annotations(self, have: Mapping[str, Any], keys: Sequence[str]) -> None:
        """The template's annotations named by ``keys`` removed, each guarded by the value it had."""
        for k in keys:
            if k in have:
                self.replace(f"/spec/template/metadata/annotations/{_esc(k)}", f"pod annotation {k}", have[k], None)


def _get(obj: Any, pointer: str) -> Any:
    for part in pointer.strip("/").split("/"):
        part = _unesc(part)
        obj = obj[int(part)] if isinstance(obj, list) else obj.get(part)
    return obj


def _is_gpu(resource: str) -> bool:
    return resource in (GPU, GPU_SHARED) or resource.startswith(MIG_PREFIX)


def _gpu_resources(c: Mapping[str, Any]) -> bool:
    return any(_is_gpu(k) for k in ((c.get("resources") or {}).get("limits") or {}))


def _runs_vllm(c: Mapping[str, Any]) -> bool:
    tokens = [str(t) for t in [*(c.get("command") or []), *(c.get("args") or [])]]
    return "vllm" in str(c.get("image", "")).lower() or any("vllm" in t for t in tokens)


def _esc(key: str) -> str:
    """A map key as one JSON-pointer segment (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def _unesc(segment: str) -> str:
    """One JSON-pointer segment back to the map key (RFC 6901)."""
    return segment.replace("~1", "/").replace("~0", "~")


def _fmt(value: float | int) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


def _show(value: Any) -> str:
    return "(none)" if value is None else str(value)
