"""Pure: what a recommendation changes on a live workload — the :class:`Desired` state a policy allows, and the
:class:`~recommender.controller.changeset.ChangeSet` that makes a Deployment or StatefulSet so.

The share's pod edits come from its mechanism's plugin (:meth:`~recommender.mechanisms.base.Mechanism.pod_edits`;
whole GPUs in place of another share: that share's :meth:`~recommender.mechanisms.base.Mechanism.leave`), so
nothing here branches on a mechanism. The records are :mod:`~recommender.controller.changeset`, the patches
:mod:`~recommender.controller.patch`, the walk :mod:`~recommender.controller.builder` and an autoscaler's changes
:mod:`~recommender.controller.autoscaling`; their names are importable from here too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from policies.replicas import trigger_thresholds
from recommender.controller.autoscaling import hpa_changes, scaledobject_changes
from recommender.controller.builder import Builder, gpu_container, is_gpu, named_container, vllm_container
from recommender.controller.changeset import (
    ACTUATED_KINDS,
    REPLICAS,
    Change,
    ChangeSet,
    ObjectRef,
    without_replicas,
)
from recommender.controller.patch import apply_local, inverse, removed_parents, to_patch
from recommender.core.inventory import Allocation, Sharing
from recommender.core.plan import Recommendation, ScalingPlan
from recommender.core.resources import VOLCANO_JOB, owner_kind
from recommender.mechanisms import for_sharing
from recommender.mechanisms.base import GPU, PodEdits

__all__ = ["ACTUATED_KINDS", "GPU_MEM_UTIL", "MAX_NUM_SEQS", "REPLICAS", "Change", "ChangeSet", "Desired", "ObjectRef",
           "apply_local", "desired_from", "hpa_changes", "inverse", "plan_changes", "removed_parents",
           "scaledobject_changes", "to_patch", "without_replicas"]

GPU_MEM_UTIL = "--gpu-memory-utilization"
MAX_NUM_SEQS = "--max-num-seqs"


@dataclass(frozen=True)
class Desired:
    """What the actuator should make true; None leaves that field alone. ``edits``: the pod-template edits of
    the recommended share (none: the share stays as it is)."""

    replicas: int | None = None
    gpu_memory_utilization: float | None = None
    max_num_seqs: int | None = None
    edits: PodEdits = field(default_factory=PodEdits)
    # the autoscaler's bounds where one owns replicas: ScaledObject minReplicaCount/maxReplicaCount, HPA min/maxReplicas
    keda_min: int | None = None
    keda_max: int | None = None
    keda_thresholds: tuple[tuple[str, str], ...] = ()  # (metric a Prometheus trigger's query reads, threshold)
    reasons: tuple[str, ...] = field(default=())
    claim: Allocation | None = None  # a share applied as a claim object and its reference (controller.dra)
    # the pod templates the edits go to, as JSON pointers, where not ``spec.template`` (a Volcano Job's tasks)
    templates: tuple[str, ...] = ()

    @property
    def moves_to(self) -> tuple[dict[str, str], int] | None:
        """The node selector the edits move the pods to and the whole GPUs each pod asks for there; None where
        the pods stay on their nodes."""
        if not self.edits.node_selector:
            return None
        return dict(self.edits.node_selector), int(dict(self.edits.resources).get(GPU, "1"))


def desired_from(rec: Recommendation, allowed: Sequence[str], min_replicas: int | None = None,
                 max_replicas: int | None = None, exclusive_nodes: Mapping[str, str] | None = None) -> Desired:
    """The parts of a recommendation a policy allows, within its replica bounds. Whole GPUs in place of a share
    that a node's device plugin hands out (MPS, time-slicing) go to the nodes ``exclusive_nodes`` labels
    (``mechanisms.exclusive_node_selector``): the device plugin shares every GPU of a node, so a whole one is
    only found on another node."""
    alloc, why = rec.recommended, []
    if rec.ref.kind == VOLCANO_JOB:
        return _volcano_job(rec, allowed)
    if "replicas" in allowed and rec.scaling is None:
        why.append("replicas: no scaling recommendation")
    if alloc is None:
        return replace(_replicas(rec.scaling, allowed, min_replicas, max_replicas), reasons=tuple(why))
    vllm = alloc.vllm if "vllm" in allowed else None
    edits = _edits(alloc, rec.workload.allocation, allowed, exclusive_nodes or {}, why)
    claim = _claim(alloc, rec.workload.allocation, allowed)
    plan = rec.scaling
    if plan is not None and plan.on_today is not None and edits.empty and claim is None:
        why.append(f"replicas: sized for today's shape, as {plan.shape} (which the plan's figures are for) is not "
                   "applied here")
        plan = plan.on_today
    counts = _replicas(plan, allowed, min_replicas, max_replicas)
    return replace(counts, gpu_memory_utilization=vllm.gpu_memory_utilization if vllm else None,
                   max_num_seqs=vllm.max_num_seqs if vllm else None, edits=edits, reasons=tuple(why), claim=claim)


def _claim(alloc: Allocation, held: Allocation, allowed: Sequence[str]) -> Allocation | None:
    """``alloc`` where its mechanism is allowed, applied by a claim object (``writes_claims``) and not blocked
    (its reason is already in ``why``), and its share is not the one held."""
    mechanism = for_sharing(alloc.sharing)
    if mechanism is None or mechanism.name not in allowed or not getattr(mechanism, "writes_claims", False):
        return None
    return alloc if mechanism.not_applied(alloc) is None and alloc.share != held.share else None


_TASK = re.compile(r"spec\.tasks\[(\d+)\]\.template")
VOLCANO_JOB_NOTE = ("a Volcano Job's pod template change reaches only pods created after it: running tasks keep "
                    "their vGPUs until they are recreated")


def task_templates(template_path: str | None) -> tuple[str, ...] | None:
    """The JSON pointers of a Volcano Job's task templates that ``template_path`` names (``spec.tasks[1].template``,
    comma-separated); None where one of them is not a task template."""
    found = [_TASK.fullmatch(p.strip()) for p in (template_path or "").split(",") if p.strip()]
    if not found or any(m is None for m in found):
        return None
    return tuple(dict.fromkeys(f"/spec/tasks/{m.group(1)}/template" for m in found if m is not None))


def _volcano_job(rec: Recommendation, allowed: Sequence[str]) -> Desired:
    """A Volcano Job: only its tasks' vGPU resources (a running job's tasks are not scaled, no engine flag is
    set); the template pointers from the workload's ``template_path``."""
    why = [VOLCANO_JOB_NOTE]
    if "replicas" in allowed:
        why.append("replicas: a Volcano Job's tasks are not scaled by the controller")
    alloc, templates = rec.recommended, task_templates(rec.workload.template_path)
    if alloc is None or alloc.sharing is not Sharing.VOLCANO or rec.workload.allocation.sharing is not Sharing.VOLCANO:
        why.append("on a Volcano Job only Volcano vGPU resources are written")
        return Desired(reasons=tuple(why))
    if templates is None:
        why.append(f"the pod template path {rec.workload.template_path!r} names no task of the job")
        return Desired(reasons=tuple(why))
    edits = _edits(alloc, rec.workload.allocation, allowed, {}, why)
    return Desired(edits=edits, templates=templates, reasons=tuple(why))


def _edits(alloc: Allocation, held: Allocation, allowed: Sequence[str], exclusive_nodes: Mapping[str, str],
           why: list[str]) -> PodEdits:
    """The pod edits of ``alloc``'s share where the policy allows its mechanism, with why not in ``why``. Whole
    GPUs in place of ``held``'s share are that share's way out (:meth:`Mechanism.leave`); whole GPUs already
    held change nothing."""
    mechanism = for_sharing(alloc.sharing)
    if mechanism is None or mechanism.name not in allowed:
        return PodEdits()
    if alloc.sharing is not Sharing.EXCLUSIVE:
        blocked = mechanism.not_applied(alloc)
        if blocked is not None:
            why.append(blocked)
            return PodEdits()
        return mechanism.pod_edits(alloc)
    if held.sharing is Sharing.EXCLUSIVE:
        return PodEdits()
    leaving = for_sharing(held.sharing)
    if leaving is None:
        why.append(f"exclusive: whole GPUs in place of {held.sharing.value} are not applied")
        return PodEdits()
    if leaving.node_wide and not exclusive_nodes:
        why.append(f"exclusive: whole GPUs in place of {held.sharing.value} are not applied: the node's device "
                   "plugin shares every GPU, and no node selector of unshared GPU nodes is set "
                   "(mechanisms.exclusive_node_selector)")
        return PodEdits()
    edits = leaving.leave(max(1, alloc.gpus))
    return replace(edits, node_selector=tuple(sorted(exclusive_nodes.items()))) if leaving.node_wide else edits


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


def plan_changes(obj: Mapping[str, Any], desired: Desired, *, replicas_owned_by_keda: bool = False) -> ChangeSet:
    """The change set that makes ``obj`` (a Deployment or StatefulSet as read) what ``desired`` says."""
    meta = obj.get("metadata") or {}
    ref = ObjectRef(owner_kind(str(obj.get("apiVersion") or ""), str(obj.get("kind"))), str(meta.get("namespace", "")),
                    str(meta.get("name", "")))
    if ref.kind not in ACTUATED_KINDS:
        return ChangeSet(ref, skipped=(f"{ref.kind} is not actuated (only {', '.join(sorted(ACTUATED_KINDS))})",))
    if ref.kind == VOLCANO_JOB:
        return _task_changes(obj, ref, desired)
    b = Builder(obj)
    if desired.replicas is not None and not replicas_owned_by_keda:
        b.replace(REPLICAS, "replicas", (obj.get("spec") or {}).get("replicas", 1), desired.replicas)
    template = (obj.get("spec") or {}).get("template") or {}
    containers = template.get("spec", {}).get("containers") or []
    edits = desired.edits
    gpu_i = gpu_container(containers)
    if gpu_i is None and edits.share_container:  # a share no GPU resource shows (KAI's): the container it names
        gpu_i = named_container(template, containers, edits.share_container)
    vllm_i = vllm_container(containers)
    vllm_i = gpu_i if vllm_i is None else vllm_i
    if desired.gpu_memory_utilization is not None or desired.max_num_seqs is not None:
        if vllm_i is None:
            b.skipped.append("vllm: no container runs vLLM")
        else:
            flags = {GPU_MEM_UTIL: desired.gpu_memory_utilization, MAX_NUM_SEQS: desired.max_num_seqs}
            b.flags(vllm_i, containers[vllm_i], {f: _fmt(v) for f, v in flags.items() if v is not None})
    b.pod_edits(template, gpu_i, edits)
    return b.build(ref)


def _task_changes(obj: Mapping[str, Any], ref: ObjectRef, desired: Desired) -> ChangeSet:
    """The share's resource edits on the GPU container of each task template ``desired`` names (a Volcano Job):
    that container is the first whose limits hold a GPU resource or one the edits set; each task is guarded by
    its name, each container by its name and the resource sections changed. Nothing else of the job."""
    b = Builder(obj)
    edits = PodEdits(resources=desired.edits.resources, drop_resources=desired.edits.drop_resources)
    if not edits.resources:
        return b.build(ref)
    tasks = (obj.get("spec") or {}).get("tasks")
    wanted = {k for k, _ in edits.resources}
    for pointer in desired.templates:
        i = int(pointer.split("/")[3])
        task = tasks[i] if isinstance(tasks, list) and i < len(tasks) and isinstance(tasks[i], Mapping) else {}
        template = task.get("template")
        spec = template.get("spec") if isinstance(template, Mapping) else None
        containers = spec.get("containers") if isinstance(spec, Mapping) else None
        if not isinstance(containers, list) or not all(isinstance(c, Mapping) for c in containers):
            b.skipped.append(f"spec.tasks[{i}]: no pod template with containers; not changed")
            continue
        c = next((j for j, c in enumerate(containers) if _holds(c, wanted)), None)
        if c is None:
            b.skipped.append(f"spec.tasks[{i}]: no container holds a GPU resource; not changed")
            continue
        before = len(b.changes)
        b.base = pointer
        b.resources(c, containers[c], dict(edits.resources), edits.drops)
        if len(b.changes) > before and "name" in task:
            b.guards[f"/spec/tasks/{i}/name"] = task["name"]
    return b.build(ref)


def _holds(c: Mapping[str, Any], wanted: set[str]) -> bool:
    """Whether container ``c``'s limits hold a GPU resource or one of ``wanted`` (and its resources are maps)."""
    res = c.get("resources")
    if not isinstance(res, Mapping) or not all(isinstance(res.get(s) or {}, Mapping) for s in ("limits", "requests")):
        return False
    return any(is_gpu(str(k)) or k in wanted for k in res.get("limits") or {})


def _fmt(value: float | int) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"
