"""One replica's allocation from a controller's pod template: a Deployment's, StatefulSet's, Job's or
CronJob's template with its replica count (parallelism for Jobs), and a LeaderWorkerSet's group of a leader
and ``size - 1`` workers, their GPUs added up. Pure: the pod spec itself is read by ``parse.parse_pod_spec``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from collectors.kubernetes.jobs import JOB_KINDS, count, parse_job
from collectors.kubernetes.parse import ParsedSpec, parse_pod_spec
from recommender.core.inventory import Sharing
from recommender.mechanisms.base import Claim
from recommender.mechanisms.mig import MigShare


def parse_controller(kind: str, obj: Mapping[str, Any], claims: Sequence[Claim] = ()) -> ParsedSpec:
    """One replica's allocation from a controller's pod template, with its replica count and the DRA claims its
    template asks for, as resolved (``collectors.kubernetes.claims``)."""
    if kind in JOB_KINDS:  # Volcano, Kubeflow, JobSet: several pod templates (collectors.kubernetes.jobs)
        return parse_job(kind, obj)
    spec = obj.get("spec") or {}
    notes: list[str] = []
    if kind == "CronJob":
        job = (spec.get("jobTemplate") or {}).get("spec") or {}
        parsed = template_spec(job.get("template"), count(job.get("parallelism"), 1, "spec.jobTemplate.spec."
                                                                                     "parallelism", notes), claims)
    elif kind == "Job":
        parsed = template_spec(spec.get("template"), count(spec.get("parallelism"), 1, "spec.parallelism", notes),
                               claims)
    elif kind == "LeaderWorkerSet":
        parsed = leader_worker_set(spec)
    else:  # 0 replicas is valid
        parsed = template_spec(spec.get("template"), count(spec.get("replicas"), 1, "spec.replicas", notes), claims)
    return replace(parsed, notes=(*notes, *parsed.notes)) if notes else parsed


def pod_template(kind: str, obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """The pod template of a controller (a LeaderWorkerSet's worker template); {} where it has none."""
    spec = obj.get("spec") or {}
    if kind == "CronJob":
        return ((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}
    if kind == "LeaderWorkerSet":
        return (spec.get("leaderWorkerTemplate") or {}).get("workerTemplate") or {}
    return spec.get("template") or {}


def template_spec(template: Mapping[str, Any] | None, replicas: int, claims: Sequence[Claim] = ()) -> ParsedSpec:
    t = template or {}
    return parse_pod_spec(t.get("spec") or {}, (t.get("metadata") or {}).get("annotations") or {}, replicas, claims)


def leader_worker_set(spec: Mapping[str, Any]) -> ParsedSpec:
    """One LeaderWorkerSet replica is a group: a leader plus ``size - 1`` workers, GPUs added up. A size or
    replica count no cluster runs is read as 1, with a note."""
    lwt = spec.get("leaderWorkerTemplate") or {}
    said: list[str] = []
    size = count(lwt.get("size"), 1, "spec.leaderWorkerTemplate.size", said)
    replicas = count(spec.get("replicas"), 1, "spec.replicas", said)
    worker = template_spec(lwt.get("workerTemplate"), replicas)
    leader = template_spec(lwt.get("leaderTemplate"), replicas) if lwt.get("leaderTemplate") else worker
    base = worker if worker.allocation.sharing is not Sharing.NONE else leader
    slices = leader.allocation.mig_count + (size - 1) * worker.allocation.mig_count
    share = base.allocation.share
    group = replace(
        base.allocation,
        gpus=leader.allocation.gpus + (size - 1) * worker.allocation.gpus,
        share=replace(share, count=slices) if isinstance(share, MigShare) else share,
        vllm=leader.allocation.vllm or worker.allocation.vllm,
    )
    notes = (*said, *leader.notes, *worker.notes, f"LeaderWorkerSet: one replica is a group of {size} pods")
    return replace(base, allocation=group, served_model=leader.served_model or worker.served_model,
                   notes=tuple(dict.fromkeys(notes)))
