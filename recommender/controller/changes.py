"""Pure: what a recommendation changes on a live workload — the :class:`Desired` state a policy allows, and the
:class:`~recommender.controller.changeset.ChangeSet` that makes a Deployment or StatefulSet so.

The share's pod edits come from its mechanism's plugin (:meth:`~recommender.mechanisms.base.Mechanism.pod_edits`;
whole GPUs in place of another share: that share's :meth:`~recommender.mechanisms.base.Mechanism.leave`), so
nothing here branches on a mechanism. The records are :mod:`~recommender.controller.changeset`, the patches
:mod:`~recommender.controller.patch`, the walk :mod:`~recommender.controller.builder` and an autoscaler's changes
:mod:`~recommender.controller.autoscaling`; their names are importable from here too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from policies.replicas import trigger_thresholds
from recommender.controller.autoscaling import hpa_changes, scaledobject_changes
from recommender.controller.builder import Builder, gpu_container, named_container, vllm_container
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
    ref = ObjectRef(str(obj.get("kind")), str(meta.get("namespace", "")), str(meta.get("name", "")))
    if ref.kind not in ACTUATED_KINDS:
        return ChangeSet(ref, skipped=(f"{ref.kind} is not actuated (only {', '.join(sorted(ACTUATED_KINDS))})",))
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


def _fmt(value: float | int) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"
