"""Pure: whether one more pod of a template could be scheduled somewhere, asked before a change moves a
workload onto other nodes (whole GPUs in place of MPS or time-slicing, which only nodes whose device plugin
does not share can give). The scheduler's own filters that decide it here: the node selector, required
node affinity, taints, cordons, free ``nvidia.com/gpu`` and room for the pod's other requests (CPU, memory,
other extended resources, the node's pod count). Not checked: inter-pod affinity and anti-affinity, topology
spread constraints, volumes' zones, host ports. Nothing here reads a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

from collectors.kubernetes.parse import pod_resources
from recommender.mechanisms.base import GPU, GPU_SHARED

BLOCKING = ("NoSchedule", "NoExecute")
DONE = ("Succeeded", "Failed")
# every kubelet reports these; a node object without one (a hand-written fixture, say) is not judged on it.
# A resource not reported that is not one of these is an extended resource the node does not have: 0.
STANDARD = ("cpu", "memory", "ephemeral-storage", "pods")
MOVED = (GPU, GPU_SHARED)  # what the move itself changes: its GPUs are the ``gpus`` asked for
BYTES = ("memory", "ephemeral-storage")


def unplaceable(template: Mapping[str, Any], selector: Mapping[str, str], gpus: int,
                nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]) -> str | None:
    """Why no node could run one more pod of ``template`` with ``selector`` added to its node selector and
    ``gpus`` whole GPUs free; None when one could. Free is the node's allocatable (``nvidia.com/gpu``, and
    every other resource the template requests) less what its running and pending pods request, as the
    scheduler counts it; a quantity that does not parse is one line, never a traceback."""
    spec = template.get("spec") or {}
    wanted = {**(spec.get("nodeSelector") or {}), **selector}
    shown = ",".join(f"{k}={v}" for k, v in sorted(wanted.items()))
    labelled = [n for n in nodes if _labels_match(_labels(n), wanted)]
    if not labelled:
        return f"no node is labelled {shown}: its pods would stay Pending"
    notes: list[str] = []
    need = {k: v for k, v in pod_resources(spec, notes, _any).items() if k not in MOVED}
    held = _held(pods, notes)
    if notes:
        return f"a resource quantity does not parse ({notes[0]}): placement cannot be judged"
    why: list[str] = []
    for node in labelled:
        name = str((node.get("metadata") or {}).get("name", ""))
        try:
            problem = _node_problem(node, spec, gpus, need, held.get(name, {}))
        except (ValueError, ArithmeticError) as exc:
            problem = f"allocatable does not parse ({exc})"
        if problem is None:
            return None
        why.append(f"{name}: {problem}")
    more = f"; {len(why) - 3} more" if len(why) > 3 else ""
    return f"no node labelled {shown} can take a pod of {gpus} whole GPU(s) ({'; '.join(why[:3])}{more})"


def _node_problem(node: Mapping[str, Any], spec: Mapping[str, Any], gpus: int, need: Mapping[str, Decimal],
                  held: Mapping[str, Decimal]) -> str | None:
    if (node.get("spec") or {}).get("unschedulable"):
        return "cordoned"
    if not _affinity_match(node, spec):
        return "the pod's required node affinity excludes it"
    tolerations = spec.get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in BLOCKING and not any(_tolerates(t, taint) for t in tolerations):
            return f"taint {taint.get('key')}={taint.get('value', '')}:{taint.get('effect')} not tolerated"
    status = node.get("status") or {}
    allocatable = status.get("allocatable") or status.get("capacity") or {}
    whole = int(_quantity(allocatable.get(GPU)))
    free = whole - int(held.get(GPU, 0))
    if free < gpus:
        return f"{max(free, 0)} of {whole} {GPU} free"
    for resource, amount in sorted({**need, "pods": Decimal(1)}.items()):
        if resource not in allocatable and resource in STANDARD:
            continue
        have = _quantity(allocatable.get(resource))
        left = have - held.get(resource, Decimal(0))
        if left < amount:
            return (f"{resource}: {_show(resource, max(left, Decimal(0)))} free of {_show(resource, have)}, "
                    f"the pod requests {_show(resource, amount)}")
    return None


def _any(name: str) -> bool:
    return True


def _labels(node: Mapping[str, Any]) -> Mapping[str, str]:
    return (node.get("metadata") or {}).get("labels") or {}


def _labels_match(labels: Mapping[str, str], wanted: Mapping[str, str]) -> bool:
    return all(labels.get(k) == str(v) for k, v in wanted.items())


def _affinity_match(node: Mapping[str, Any], spec: Mapping[str, Any]) -> bool:
    """``requiredDuringSchedulingIgnoredDuringExecution``: any term, all of its expressions and fields."""
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return True
    labels = _labels(node)
    fields = {"metadata.name": str((node.get("metadata") or {}).get("name", ""))}
    return any(all(_expression(labels, e) for e in t.get("matchExpressions") or [])
               and all(_expression(fields, e) for e in t.get("matchFields") or [])
               and (t.get("matchExpressions") or t.get("matchFields")) for t in terms)


def _expression(labels: Mapping[str, str], e: Mapping[str, Any]) -> bool:
    key, op, values = e.get("key", ""), e.get("operator", ""), [str(v) for v in e.get("values") or []]
    have = labels.get(key)
    if op == "In":
        return have in values
    if op == "NotIn":
        return have not in values
    if op == "Exists":
        return have is not None
    if op == "DoesNotExist":
        return have is None
    if op in ("Gt", "Lt") and have is not None and len(values) == 1:
        try:
            a, b = int(have), int(values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def _tolerates(t: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    if t.get("effect") and t.get("effect") != taint.get("effect"):
        return False
    if t.get("operator") == "Exists":
        return not t.get("key") or t.get("key") == taint.get("key")
    return t.get("key") == taint.get("key") and str(t.get("value", "")) == str(taint.get("value", ""))


def _held(pods: Sequence[Mapping[str, Any]], notes: list[str]) -> dict[str, dict[str, Decimal]]:
    """Node name → what its running and pending pods request, per resource, and their count (``pods``)."""
    out: dict[str, dict[str, Decimal]] = {}
    for p in pods:
        node = (p.get("spec") or {}).get("nodeName")
        if not node or (p.get("status") or {}).get("phase") in DONE:
            continue
        held = out.setdefault(node, {})
        for k, v in {**pod_resources(p.get("spec") or {}, notes, _any), "pods": Decimal(1)}.items():
            held[k] = held.get(k, Decimal(0)) + v
    return out


def _quantity(value: Any) -> Decimal:
    """A Kubernetes quantity ("500m", "16Gi", 2); 0 when absent. ValueError when it does not parse."""
    return Decimal(0) if value is None else Decimal(parse_quantity(value))


def _show(resource: str, amount: Decimal) -> str:
    return f"{float(amount) / 2**30:.3g}Gi" if resource in BYTES else f"{float(amount):g}"
