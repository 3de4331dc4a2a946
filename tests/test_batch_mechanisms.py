"""Volcano vGPU and Run:ai fractions as mechanisms, batch and training jobs' templates, and what the controller
leaves alone: table-driven, no server. Tenants write every field read here: hostile input gets one note and
the best valid reading, never an exception."""

from __future__ import annotations

from typing import Any

import pytest

from collectors.kubernetes.jobs import parse_job
from collectors.kubernetes.parse import parse_pod_spec, with_node
from recommender.controller.modes import report_only
from recommender.core.catalogue import load_catalogue
from recommender.core.inventory import Allocation, Sharing, WorkloadRef
from recommender.core.plan import Recommendation
from recommender.core.resources import VOLCANO_JOB, owner_kind
from recommender.mechanisms import MECHANISMS
from recommender.mechanisms.base import Need, NoFit, Sized
from recommender.mechanisms.runai import RunaiShare
from recommender.mechanisms.volcano import VolcanoShare
from tests.builders import workload

A100 = load_catalogue().gpus["A100-80GB"]
NODE = {"nvidia.com/gpu.product": "NVIDIA A100-SXM4-80GB", "nvidia.com/gpu.memory": "81920"}


def pod(limits: dict[str, Any] | None = None, annotations: dict[str, str] | None = None,
        scheduler: str | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"limits": limits or {}}}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    return spec, annotations or {}


# --- Volcano vGPU ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("limits", "share", "gpus", "note"), [
    ({"volcano.sh/vgpu-number": "2", "volcano.sh/vgpu-memory": "10240", "volcano.sh/vgpu-cores": "30"},
     VolcanoShare(10240, 30), 2, None),
    ({"volcano.sh/vgpu-memory": "10240"}, VolcanoShare(10240, None), 1, "read as one vGPU"),
    ({"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-cores": "150"}, VolcanoShare(None, None), 1,
     "vgpu-cores=150 is outside (0, 100]"),
    ({"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "lots"}, VolcanoShare(None, None), 1,
     "could not parse volcano.sh/vgpu-memory=lots"),
    ({"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "-5"}, VolcanoShare(None, None), 1,
     "vgpu-memory=-5 is not a memory size"),
])
def test_volcano_reads_its_resources(limits: dict[str, str], share: VolcanoShare, gpus: int, note: str | None
                                     ) -> None:
    got = parse_pod_spec(*pod(limits))
    assert (got.allocation.sharing, got.allocation.share, got.allocation.gpus) == (Sharing.VOLCANO, share, gpus)
    assert sum(note in n for n in got.notes) == (1 if note else 0) and (note or not got.notes)


def test_a_vgpu_larger_than_the_device_is_one_reason_and_the_whole_device() -> None:
    parsed = with_node(parse_pod_spec(*pod({"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "100000"})),
                       NODE)
    assert parsed.allocation.volcano_vgpu_memory_mib == 81920  # the most a vGPU of this device can hold
    assert [n for n in parsed.notes if "larger than the device" in n] == [
        "volcano.sh/vgpu-memory=100000 MiB is larger than the device (81920 MiB): no such vGPU can be granted; "
        "read as the whole device"]


def test_volcano_sizes_memory_in_mib_and_cores_in_percent() -> None:
    got = MECHANISMS.get("volcano-vgpu").size(Need(memory_mib=10_000, compute_frac=0.22), A100)
    assert isinstance(got, Sized)
    # 10,000 MiB → 40 × 256 = 10,240 MiB; 22 % → 25 % (5 % steps); held: max(10240/81920, 0.25) = 0.25
    assert got.share == VolcanoShare(10240, 25) and got.gpu_equivalents == 0.25
    too_big = MECHANISMS.get("volcano-vgpu").size(Need(memory_mib=90_000, compute_frac=0.2), A100)
    assert isinstance(too_big, NoFit) and "whole GPU" in too_big.reason


def test_volcano_pod_edits_replace_whole_gpus() -> None:
    alloc = Allocation(Sharing.VOLCANO, gpus=1, share=VolcanoShare(10240, 25))
    edits = MECHANISMS.get("volcano-vgpu").pod_edits(alloc)
    assert dict(edits.resources) == {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "10240",
                                     "volcano.sh/vgpu-cores": "25"}
    assert edits.drops("nvidia.com/gpu") and edits.drops("nvidia.com/mig-1g.10gb")


# --- Run:ai -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("annotations", "scheduler", "sharing", "fraction", "note"), [
    ({"gpu-fraction": "0.25"}, "runai-scheduler", Sharing.RUNAI, 0.25, None),
    ({"gpu-fraction": "0.25"}, "kai-scheduler", Sharing.KAI, None, None),  # same annotation, KAI's scheduler
    ({"gpu-fraction": "0"}, "runai-scheduler", Sharing.RUNAI, None, "gpu-fraction=0 is outside (0, 1]"),
    ({"gpu-fraction": "-0.5"}, "runai-scheduler", Sharing.RUNAI, None, "gpu-fraction=-0.5 is outside (0, 1]"),
    ({"gpu-fraction": "nan"}, "runai-scheduler", Sharing.RUNAI, None, "could not parse gpu-fraction=nan"),
    ({"gpu-fraction": "½"}, "runai-scheduler", Sharing.RUNAI, None, "could not parse gpu-fraction=½"),
    ({"gpu-memory": "0x10"}, "runai-scheduler", Sharing.RUNAI, None, "could not parse gpu-memory=0x10"),
])
def test_runai_reads_its_annotations_under_its_scheduler(annotations: dict[str, str], scheduler: str,
                                                          sharing: Sharing, fraction: float | None,
                                                          note: str | None) -> None:
    got = parse_pod_spec(*pod(annotations=annotations, scheduler=scheduler))
    assert got.allocation.sharing is sharing
    if sharing is Sharing.RUNAI:
        assert got.allocation.runai_gpu_fraction == fraction
    assert sum(note in n for n in got.notes) == (1 if note else 0)


@pytest.mark.parametrize(("memory", "fraction", "note"), [
    ("20480", 0.25, "gpu-memory=20480 MiB of 81920 MiB read as a fraction"),
    ("163840", 1.0, "gpu-memory=163840 MiB is larger than the device (81920 MiB): read as the whole GPU"),
])
def test_runai_gpu_memory_becomes_a_fraction_on_a_node(memory: str, fraction: float, note: str) -> None:
    parsed = with_node(parse_pod_spec(*pod(annotations={"gpu-memory": memory}, scheduler="runai-scheduler")), NODE)
    assert parsed.allocation.runai_gpu_fraction == fraction and note in " ".join(parsed.notes)


def test_runai_is_report_only() -> None:
    runai = MECHANISMS.get("runai")
    alloc = Allocation(Sharing.RUNAI, gpus=1, share=RunaiShare(0.3), gpu_equivalents=0.3)
    assert runai.pod_edits(alloc).empty
    how = runai.how_to_apply(alloc)
    assert how["annotations"] == {"gpu-fraction": "0.3"} and how["report_only"].startswith("report-only")


def test_the_controller_never_applies_report_only_or_kubeflow_templates() -> None:
    alloc = Allocation(Sharing.RUNAI, gpus=1, share=RunaiShare(0.3), gpu_equivalents=0.3)
    chat = workload("chat", Allocation(Sharing.RUNAI, gpus=1, share=RunaiShare(0.5)))
    assert "report-only" in (report_only(Recommendation(chat, alloc, (), 0.9)) or "")
    job = workload("ft", alloc, kind=VOLCANO_JOB, template_path="spec.tasks[1].template")
    volcano = Allocation(Sharing.VOLCANO, gpus=1, share=VolcanoShare(10240, 25))
    assert report_only(Recommendation(job, volcano, (), 0.9)) is None  # its task's vGPU resources: actuated
    bert = workload("bert", alloc, kind="PyTorchJob", template_path="spec.pytorchReplicaSpecs.Worker.template")
    held = report_only(Recommendation(bert, volcano, (), 0.9)) or ""
    assert "spec.pytorchReplicaSpecs.Worker.template" in held and "PyTorchJob" in held
    plain = workload("web", Allocation(Sharing.EXCLUSIVE, gpus=1))
    assert report_only(Recommendation(plain, Allocation(Sharing.EXCLUSIVE, gpus=1), (), 0.9)) is None


# --- jobs' templates ------------------------------------------------------------------------------

def gpu_template(limits: dict[str, str] | None) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "c", "resources": {"limits": limits or {}}}]}}


def test_mpijob_is_sized_by_its_workers_not_its_launcher() -> None:
    job = {"spec": {"mpiReplicaSpecs": {"Launcher": {"replicas": 1, "template": gpu_template(None)},
                                        "Worker": {"replicas": 4, "template": gpu_template({"nvidia.com/gpu": "2"})}}}}
    got = parse_job("MPIJob", job)
    assert (got.allocation.gpus, got.allocation.replicas) == (2, 4)
    assert got.template_path == "spec.mpiReplicaSpecs.Worker.template"


def test_a_role_with_another_gpu_shape_is_named_not_counted() -> None:
    job = {"spec": {"pytorchReplicaSpecs": {
        "Master": {"replicas": 1, "template": gpu_template({"nvidia.com/gpu": "1"})},
        "Worker": {"replicas": 3, "template": gpu_template({"nvidia.com/gpu": "2"})}}}}
    got = parse_job("PyTorchJob", job)
    assert (got.allocation.gpus, got.allocation.replicas) == (2, 3)
    assert [n for n in got.notes if "role Master holds another GPU allocation" in n]


@pytest.mark.parametrize(("kind", "spec", "note"), [
    (VOLCANO_JOB, {"tasks": [{"name": "w", "replicas": "many", "template": gpu_template({"nvidia.com/gpu": "1"})}]},
     "spec.tasks[0].replicas='many' is not a replica count; read as 1"),
    (VOLCANO_JOB, {"tasks": [{"name": "w", "replicas": -2, "template": gpu_template({"nvidia.com/gpu": "1"})}]},
     "spec.tasks[0].replicas=-2 is not a replica count; read as 1"),
    ("PyTorchJob", {"pytorchReplicaSpecs": {"Worker": {"replicas": True, "template": gpu_template(
        {"nvidia.com/gpu": "1"})}}}, "spec.pytorchReplicaSpecs.Worker.replicas=True is not a replica count"),
    # more digits than int() converts (a traceback before), and an int32 no cluster runs (above 10^6)
    (VOLCANO_JOB, {"tasks": [{"name": "w", "replicas": "9" * 5000, "template": gpu_template({"nvidia.com/gpu": "1"})}]},
     f"spec.tasks[0].replicas='{'9' * 40}'… is not a replica count; read as 1"),
    (VOLCANO_JOB, {"tasks": [{"name": "w", "replicas": 2**31 - 1, "template": gpu_template({"nvidia.com/gpu": "1"})}]},
     "spec.tasks[0].replicas=2147483647 is not a replica count; read as 1"),
])
def test_hostile_replica_counts_are_one_note_and_a_default(kind: str, spec: dict[str, Any], note: str) -> None:
    got = parse_job(kind, {"spec": spec})
    assert got.allocation.replicas == 1 and sum(note in n for n in got.notes) == 1


@pytest.mark.parametrize("spec", [{"tasks": "nope"}, {"tasks": [None, 3, "x"]}, {"tasks": [{"template": "x"}]},
                                  {"pytorchReplicaSpecs": ["Worker"]}, None, "garbage"])
def test_malformed_jobs_hold_no_gpu_and_do_not_raise(spec: Any) -> None:
    for kind in (VOLCANO_JOB, "PyTorchJob", "MPIJob", "JobSet", "TrainJob", "PodGroup"):
        assert parse_job(kind, {"spec": spec}).allocation.sharing is Sharing.NONE


def test_trainjob_resources_per_node_and_jobset_replicated_jobs() -> None:
    train = parse_job("TrainJob", {"spec": {"trainer": {"numNodes": 4, "resourcesPerNode": {
        "limits": {"nvidia.com/gpu": "8"}}}}})
    assert (train.allocation.gpus, train.allocation.replicas, train.template_path) == (
        8, 4, "spec.trainer.resourcesPerNode")
    jobset = parse_job("JobSet", {"spec": {"replicatedJobs": [{"name": "node", "replicas": 2, "template": {
        "spec": {"parallelism": 3, "template": gpu_template({"nvidia.com/gpu": "1"})}}}]}})
    assert (jobset.allocation.replicas, jobset.template_path) == (6, "spec.replicatedJobs[0].template.spec.template")


@pytest.mark.parametrize(("api_version", "kind", "key"), [
    ("batch.volcano.sh/v1alpha1", "Job", VOLCANO_JOB), ("batch/v1", "Job", "Job"), ("apps/v1", "ReplicaSet",
     "ReplicaSet"), ("kubeflow.org/v1", "PyTorchJob", "PyTorchJob"), ("example.com/v1", "Job", "Job"),
    ("v1", "Pod", "Pod")])
def test_owner_references_name_their_group_where_a_kind_is_shared(api_version: str, kind: str, key: str) -> None:
    assert owner_kind(api_version, kind) == key


def test_workload_key_is_distinct_from_a_batch_job() -> None:
    assert WorkloadRef("ns", VOLCANO_JOB, "x").key != WorkloadRef("ns", "Job", "x").key


def test_snapshot_files_keep_volcano_and_runai_shares_and_the_template_path(tmp_path: Any) -> None:
    from collectors.files import read_snapshot, write_snapshot
    from tests.builders import snapshot

    job = workload("ft", Allocation(Sharing.VOLCANO, gpus=1, share=VolcanoShare(10240, 25), gpu_equivalents=0.25),
                   kind=VOLCANO_JOB, template_path="spec.tasks[1].template")
    chat = workload("chat", Allocation(Sharing.RUNAI, gpus=1, share=RunaiShare(0.3), gpu_equivalents=0.3))
    write_snapshot(snapshot([job, chat], {"fb_used_mib": {"ft": 1.0, "chat": 1.0}}, days=1), tmp_path)
    back = {w.ref.name: w for w in read_snapshot(tmp_path).workloads}
    assert back["ft"].allocation.share == VolcanoShare(10240, 25) and back["ft"].template_path == job.template_path
    assert back["chat"].allocation.share == RunaiShare(0.3) and back["ft"].ref.kind == VOLCANO_JOB
