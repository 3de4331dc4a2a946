"""Pure: whether one more pod of a template could be scheduled somewhere, asked before a change moves a
workload onto other nodes (whole GPUs in place of MPS or time-slicing, which only nodes whose device plugin
does not share can give). The scheduler's own filters that decide it here: the node selector, required
node affinity, taints, cordons and free ``nvidia.com/gpu``. Nothing here reads a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from recommender.controller.changes import GPU

BLOCKING = ("NoSchedule", "NoExecute")
DONE = ("Succeeded", "Failed")


def unplaceable(template: Mapping[str, Any], selector: Mapping[str, str], gpus: int,
                nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]) -> str | None:
    """Why no node could run one more pod of ``template`` with ``selector`` added to its node selector and
    ``gpus`` whole GPUs free; None when one could. Free GPUs are the node's allocatable ``nvidia.com/gpu``
    less what its running and pending pods hold."""
    spec = template.get("spec") or {}
    wanted = {**(spec.get("nodeSelector") or {}), **selector}
    shown = ",".join(f"{k}={v}" for k, v in sorted(wanted.items()))
    labelled = [n for n in nodes if _labels_match(_labels(n), wanted)]
    if not labelled:
        return f"no node is labelled {shown}: its pods would stay Pending"
    held = _gpus_held(pods)
    why: list[str] = []
    for node in labelled:
        name = str((node.get("metadata") or {}).get("name", ""))
        problem = _node_problem(node, spec, gpus, held.get(name, 0))
        if problem is None:
            return None
        why.append(f"{name}: {problem}")
    more = f"; {len(why) - 3} more" if len(why) > 3 else ""
    return f"no node labelled {shown} can take a pod of {gpus} whole GPU(s) ({'; '.join(why[:3])}{more})"


def _node_problem(node: Mapping[str, Any], spec: Mapping[str, Any], gpus: int, held: int) -> str | None:
    if (node.get("spec") or {}).get("unschedulable"):
        return "cordoned"
    if not _affinity_match(node, spec):
        return "the pod's required node affinity excludes it"
    tolerations = spec.get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in BLOCKING and not any(_tolerates(t, taint) for t in tolerations):
            return f"taint {taint.get('key')}={taint.get('value', '')}:{taint.get('effect')} not tolerated"
    status = node.get("status") or {}
    allocatable = _count((status.get("allocatable") or status.get("capacity") or {}).get(GPU))
    if allocatable - held < gpus:
        return f"{max(allocatable - held, 0)} of {allocatable} {GPU} free"
    return None


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


def _gpus_held(pods: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Node name → whole GPUs its pods hold (extended resources: the limit, which requests must equal)."""
    out: dict[str, int] = {}
    for p in pods:
        node = (p.get("spec") or {}).get("nodeName")
        if not node or (p.get("status") or {}).get("phase") in DONE:
            continue
        for c in (p.get("spec") or {}).get("containers") or []:
            res = c.get("resources") or {}
            out[node] = out.get(node, 0) + _count((res.get("limits") or res.get("requests") or {}).get(GPU))
    return out


def _count(value: Any) -> int:
    try:
        return int(str(value)) if value is not None else 0
    except ValueError:
        return 0
