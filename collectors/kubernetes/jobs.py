"""Batch and training jobs as workloads: a Volcano Job's tasks, a Kubeflow PyTorchJob's or MPIJob's replica
specs, a JobSet's replicated jobs, a TrainJob's trainer. Each names one or more pod templates ("roles"), each
with its replica count; the workload is sized by the GPU role with the most replicas, and its replicas are the
pods of every role holding that same GPU allocation. Pure, and hostile-input safe: these objects are the
tenant's, so a field of the wrong shape is a note, never an exception.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from collectors.kubernetes.parse import ParsedSpec, parse_pod_spec
from recommender.core.annotations import cut, quoted
from recommender.core.inventory import MAX_REPLICAS, Sharing
from recommender.core.resources import VOLCANO_JOB

REPLICA_SPECS = {"PyTorchJob": "pytorchReplicaSpecs", "MPIJob": "mpiReplicaSpecs"}  # role name → {replicas, template}
JOB_KINDS = frozenset({VOLCANO_JOB, "JobSet", "TrainJob", "PodGroup", *REPLICA_SPECS})
# kinds whose objects may carry no pod template holding the GPU: their pods say what they hold
FROM_PODS = frozenset({"TrainJob", "PodGroup", "JobSet", VOLCANO_JOB, *REPLICA_SPECS})


@dataclass(frozen=True)
class Role:
    """One pod template of a job: its name, where it sits, the template and how many pods it makes."""

    name: str
    path: str
    template: Mapping[str, Any] | None
    replicas: int


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list) else []


def count(value: Any, default: int, what: str, notes: list[str]) -> int:
    """A replica count: a whole number from 0 to ``MAX_REPLICAS`` (a tenant may scale its own controller to 2·10^9,
    a valid int32 no cluster runs); anything else is a note and ``default``."""
    if value is None:
        return default
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_REPLICAS:
        return value
    text = value.strip() if isinstance(value, str) else ""
    if text.isascii() and text.isdigit() and len(text) <= 10 and int(text) <= MAX_REPLICAS:
        return int(text)
    notes.append(f"{what}={quoted(value) if isinstance(value, str) else cut(repr(value))} is not a replica count; "
                 f"read as {default}")
    return default


def roles(kind: str, spec: Mapping[str, Any], notes: list[str]) -> list[Role]:
    """The pod templates of a job of ``kind``, in the order its spec lists them."""
    if kind == VOLCANO_JOB:
        return [Role(str(_map(t).get("name") or i), f"spec.tasks[{i}].template", _map(_map(t).get("template")),
                     count(_map(t).get("replicas"), 1, f"spec.tasks[{i}].replicas", notes))
                for i, t in enumerate(_list(spec.get("tasks")))]
    if kind in REPLICA_SPECS:
        field = REPLICA_SPECS[kind]
        return [Role(str(name), f"spec.{field}.{name}.template", _map(_map(r).get("template")),
                     count(_map(r).get("replicas"), 1, f"spec.{field}.{name}.replicas", notes))
                for name, r in _map(spec.get(field)).items()]
    if kind == "JobSet":
        out = []
        for i, rj in enumerate(_list(spec.get("replicatedJobs"))):
            job = _map(_map(_map(rj).get("template")).get("spec"))
            n = count(_map(rj).get("replicas"), 1, f"spec.replicatedJobs[{i}].replicas", notes)
            per = count(job.get("parallelism"), 1, f"spec.replicatedJobs[{i}].template.spec.parallelism", notes)
            out.append(Role(str(_map(rj).get("name") or i), f"spec.replicatedJobs[{i}].template.spec.template",
                            _map(job.get("template")), n * per))
        return out
    if kind == "TrainJob":  # the trainer's resources per node, when the TrainJob sets them (else its runtime does)
        trainer = _map(spec.get("trainer"))
        if not trainer.get("resourcesPerNode"):
            return []
        container = {"name": "trainer", "image": str(trainer.get("image") or ""),
                     "resources": _map(trainer.get("resourcesPerNode"))}
        return [Role("trainer", "spec.trainer.resourcesPerNode", {"spec": {"containers": [container]}},
                     count(trainer.get("numNodes"), 1, "spec.trainer.numNodes", notes))]
    return []  # PodGroup: no template, its pods say


def parse_job(kind: str, obj: Mapping[str, Any]) -> ParsedSpec:
    """One pod's allocation from the GPU role with most replicas, with the pods of every role that holds the
    same; a role holding another GPU allocation is named in a note, not counted."""
    notes: list[str] = []
    parsed = [(r, _template(r)) for r in roles(kind, _map(obj.get("spec")), notes)]
    gpu = [(r, p) for r, p in parsed if p.allocation.sharing is not Sharing.NONE]
    if not gpu:
        return ParsedSpec(parse_pod_spec({}, {}, 0).allocation, notes=tuple(notes))
    main_role, main = max(gpu, key=lambda rp: rp[0].replicas)  # the first of the largest
    shape = _shape(main)
    same = [(r, p) for r, p in gpu if _shape(p) == shape]
    for r, p in gpu:
        if _shape(p) != shape:
            notes.append(f"{kind} role {r.name} holds another GPU allocation ({p.allocation.sharing.value}, "
                         f"{r.replicas} pods): not counted; sized by role {main_role.name}")
    pods = sum(r.replicas for r, _ in same)
    if len(same) > 1:
        notes.append(f"{kind}: {pods} GPU pods across roles {', '.join(r.name for r, _ in same)}")
    extra = tuple(n for _, p in same for n in p.notes)
    return replace(main, allocation=replace(main.allocation, replicas=pods),
                   notes=tuple(dict.fromkeys((*extra, *notes))),
                   template_path=", ".join(r.path for r, _ in same))


def _template(role: Role) -> ParsedSpec:
    t = _map(role.template)
    return parse_pod_spec(_map(t.get("spec")), _map(_map(t.get("metadata")).get("annotations")), role.replicas)


def _shape(p: ParsedSpec) -> tuple[Any, ...]:
    a = p.allocation
    return a.sharing, a.gpus, a.share
