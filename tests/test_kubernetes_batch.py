"""Batch and training jobs and batch schedulers' GPU fractions, end to end on the Kubernetes API emulator: a
Volcano Job with vGPU requests, a PyTorchJob (Master + Workers), a Run:ai-annotated Deployment, a TrainJob
without a template, a standalone PodGroup, and the hostile inputs among them. Each is discovered with its own
owner, classified batch (Volcano, Kubeflow) and reported with its allocation and a recommendation or a reason."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import numpy as np
import pandas as pd
import pytest

from collectors.kubernetes.discover import discover_cluster
from collectors.snapshot import normalize
from recommender.core import usage as m
from recommender.core.catalogue import load_catalogue
from recommender.core.inventory import Sharing, Workload
from recommender.core.progress import NullProgress
from recommender.core.settings import ForecastSettings, Settings
from recommender.core.usage import Snapshot
from recommender.outputs import jsondoc
from recommender.pipeline.run import run_once
from tests.builders import END, index
from tests.kubefixture import KubeEmulator, container, gpu_node, manifest, pod_from, template

NS = "train"
A100 = ("NVIDIA A100-SXM4-80GB", 81920)
VGPU = {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "40960", "volcano.sh/vgpu-cores": "50"}
TOO_BIG = {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "200000", "volcano.sh/vgpu-cores": "50"}
BATCH_CRDS = ("Job.batch.volcano.sh", "PodGroup", "PyTorchJob", "MPIJob", "TrainJob", "JobSet", "LeaderWorkerSet")


def _volcano_job(name: str, limits: dict[str, str], workers: int) -> list[dict[str, Any]]:
    worker = template({"app": name}, container("trainer", "pytorch/pytorch", limits), schedulerName="volcano")
    ps = template({"app": name}, container("ps", "pytorch/pytorch"), schedulerName="volcano")
    job = manifest("Job.batch.volcano.sh", NS, name, {
        "schedulerName": "volcano", "minAvailable": workers + 1,
        "tasks": [{"name": "ps", "replicas": 1, "template": ps}, {"name": "worker", "replicas": workers,
                                                                   "template": worker}]})
    group = manifest("PodGroup", NS, f"{name}-pg", {"minMember": workers + 1}, owner=job)
    pods = [pod_from(job, NS, f"{name}-worker-{i}", worker, "a100-0") for i in range(workers)]
    return [job, group, pod_from(job, NS, f"{name}-ps-0", ps, "a100-0"), *pods]


def _pytorch_job() -> list[dict[str, Any]]:
    tmpl = template({"app": "bert"}, container("pytorch", "pytorch/pytorch", {"nvidia.com/gpu": "1"}))
    job = manifest("PyTorchJob", NS, "bert", {"pytorchReplicaSpecs": {
        "Master": {"replicas": 1, "template": tmpl}, "Worker": {"replicas": 3, "template": tmpl}}})
    pods = [pod_from(job, NS, f"bert-{role}-{i}", tmpl, "a100-0") for role, n in (("master", 1), ("worker", 3))
            for i in range(n)]
    return [job, *pods]


def _runai(name: str, annotations: dict[str, str]) -> list[dict[str, Any]]:
    tmpl = template({"app": name}, container("server", "vllm/vllm-openai"), annotations=annotations,
                    schedulerName="runai-scheduler")
    deploy = manifest("Deployment", NS, name, {"replicas": 1, "template": tmpl})
    rs = manifest("ReplicaSet", NS, f"{name}-5c9f", {"replicas": 1, "template": tmpl}, owner=deploy)
    return [deploy, rs, pod_from(rs, NS, f"{name}-5c9f-abcde", tmpl, "a100-0", {"pod-template-hash": "5c9f"})]


def _trainjob() -> list[dict[str, Any]]:
    """A TrainJob with no template of its own: runtime → JobSet → Job → pods."""
    train = manifest("TrainJob", NS, "llama-sft", {"runtimeRef": {"name": "torch-distributed"}})
    jobset = manifest("JobSet", NS, "llama-sft", {"replicatedJobs": []}, owner=train)
    tmpl = template({"app": "sft"}, container("node", "pytorch/pytorch", {"nvidia.com/gpu": "2"}))
    job = manifest("Job", NS, "llama-sft-node-0", {"template": tmpl}, owner=jobset)
    return [train, jobset, job, *(pod_from(job, NS, f"llama-sft-node-0-{i}", tmpl, "a100-0") for i in range(2))]


def _pod_group() -> list[dict[str, Any]]:
    """A PodGroup with bare pods that name it (no controller of their own)."""
    group = manifest("PodGroup", NS, "sweep", {"minMember": 2})
    tmpl = template({"app": "sweep"}, container("trial", "pytorch/pytorch", VGPU), schedulerName="volcano",
                    annotations={"scheduling.k8s.io/group-name": "sweep"})
    return [group, *(pod_from(None, NS, f"sweep-{i}", tmpl, "a100-0") for i in range(2))]


def objects() -> list[dict[str, Any]]:
    same_name = template({"app": "finetune"}, container("t", "pytorch/pytorch", {"nvidia.com/gpu": "1"}))
    batch_job = manifest("Job", NS, "finetune", {"template": same_name})  # a batch/v1 Job of the same name
    return [
        gpu_node("a100-0", *A100),
        *_volcano_job("finetune", VGPU, 2), *_volcano_job("too-big", TOO_BIG, 1),
        batch_job, pod_from(batch_job, NS, "finetune-x1", same_name, "a100-0"),
        *_pytorch_job(), *_runai("chat", {"gpu-fraction": "0.5"}), *_runai("bad-fraction", {"gpu-fraction": "1.5"}),
        *_runai("junk", {"gpu-fraction": "half", "gpu-memory": "lots"}), *_trainjob(), *_pod_group(),
    ]


@pytest.fixture(scope="module")
def found() -> Iterator[dict[str, Workload]]:
    with KubeEmulator(objects(), crds=BATCH_CRDS) as kube:
        workloads, _ = discover_cluster(kube.settings([NS]), NullProgress(), load_catalogue(), kube.api_client())
    yield {w.ref.key: normalize(w, load_catalogue()) for w in workloads}


@pytest.fixture(scope="module")
def report(found: dict[str, Workload]) -> dict[str, dict[str, Any]]:
    """The JSON report's workloads after 3 days of a steady 20 GB and 30 % engine activity per replica."""
    idx = index(3)
    usage = {metric: pd.DataFrame({k: np.full(len(idx), v) for k in found}, index=idx)
             for metric, v in ((m.FB_USED_MIB, 20_000.0), (m.GR_ENGINE_ACTIVE_FRAC, 0.3))}
    snap = Snapshot(tuple(found.values()), usage, idx[0].to_pydatetime() - timedelta(seconds=600),
                    idx[-1].to_pydatetime(), 600.0, (), "test")
    plan = run_once(snap, Settings(forecast=ForecastSettings(enabled=False)), END)
    return {r.ref.key: jsondoc.workload(r) for r in plan.recommendations}


def test_each_job_is_a_workload_with_its_own_owner(found: dict[str, Workload]) -> None:
    assert set(found) == {
        f"{NS}/Job.batch.volcano.sh/finetune", f"{NS}/Job.batch.volcano.sh/too-big", f"{NS}/Job/finetune",
        f"{NS}/PyTorchJob/bert", f"{NS}/Deployment/chat", f"{NS}/Deployment/bad-fraction", f"{NS}/Deployment/junk",
        f"{NS}/TrainJob/llama-sft", f"{NS}/PodGroup/sweep"}
    assert found[f"{NS}/Job/finetune"].allocation.sharing is Sharing.EXCLUSIVE  # not the Volcano Job's vGPU


def test_volcano_job_reads_its_worker_task_vgpu(found: dict[str, Workload]) -> None:
    w = found[f"{NS}/Job.batch.volcano.sh/finetune"]
    a = w.allocation
    assert (a.sharing, a.gpus, a.replicas) == (Sharing.VOLCANO, 1, 2)  # the ps task holds no GPU
    assert (a.volcano_vgpu_memory_mib, a.volcano_vgpu_cores_pct) == (40960, 50)
    assert a.gpu_equivalents == 0.5  # max(40960 / 81920, 50 %)
    assert w.template_path == "spec.tasks[1].template"
    assert w.pods == ("finetune-ps-0", "finetune-worker-0", "finetune-worker-1")  # every pod of the job


def test_pytorchjob_counts_master_and_workers(found: dict[str, Workload]) -> None:
    w = found[f"{NS}/PyTorchJob/bert"]
    assert (w.allocation.sharing, w.allocation.gpus, w.allocation.replicas) == (Sharing.EXCLUSIVE, 1, 4)
    assert w.template_path == ("spec.pytorchReplicaSpecs.Master.template, "
                               "spec.pytorchReplicaSpecs.Worker.template")
    assert len(w.pods) == 4 and w.allocation.gpu_model == "A100-80GB"


def test_trainjob_and_pod_group_are_read_from_their_pods(found: dict[str, Workload]) -> None:
    train = found[f"{NS}/TrainJob/llama-sft"]
    assert (train.allocation.gpus, train.allocation.replicas) == (2, 2)
    assert any("no pod template holding a GPU: allocation read from its pods" in n for n in train.notes)
    sweep = found[f"{NS}/PodGroup/sweep"].allocation
    assert (sweep.sharing, sweep.replicas, sweep.volcano_vgpu_memory_mib) == (Sharing.VOLCANO, 2, 40960)


def test_runai_fraction_read_under_its_scheduler(found: dict[str, Workload]) -> None:
    a = found[f"{NS}/Deployment/chat"].allocation
    assert (a.sharing, a.runai_gpu_fraction, a.gpu_equivalents) == (Sharing.RUNAI, 0.5, 0.5)


@pytest.mark.parametrize(("name", "why"), [
    ("bad-fraction", "gpu-fraction=1.5 is outside (0, 1]"),
    ("junk", "could not parse gpu-fraction=half"),
])
def test_hostile_runai_annotations_one_reason_and_a_whole_gpu(found: dict[str, Workload], name: str, why: str
                                                              ) -> None:
    w = found[f"{NS}/Deployment/{name}"]
    assert w.allocation.sharing is Sharing.RUNAI and w.allocation.gpu_equivalents == 1.0  # the best valid reading
    assert sum(why in n for n in w.notes) == 1


def test_a_vgpu_larger_than_its_device_is_read_as_the_device(found: dict[str, Workload]) -> None:
    a = found[f"{NS}/Job.batch.volcano.sh/too-big"]
    notes = [n for n in a.notes if "larger than the device" in n]
    assert len(notes) == 1 and "200000 MiB" in notes[0] and "81920 MiB" in notes[0]
    assert a.allocation.volcano_vgpu_memory_mib == 81920 and a.allocation.gpu_equivalents == 1.0


@pytest.mark.parametrize("key", ["Job.batch.volcano.sh/finetune", "Job.batch.volcano.sh/too-big", "PyTorchJob/bert",
                                 "TrainJob/llama-sft", "PodGroup/sweep"])
def test_jobs_are_reported_batch_with_a_recommendation(report: dict[str, dict[str, Any]], key: str) -> None:
    w = report[f"{NS}/{key}"]
    assert (w["kind"], w["name"]) == tuple(key.split("/"))
    assert w["class"]["name"] == "batch" and w["class"]["source"] == "rule"
    assert w["current"]["gpus"] >= 1 and w["recommended"] is not None


def test_volcano_recommendation_stays_volcano_on_its_task_template(report: dict[str, dict[str, Any]]) -> None:
    w = report[f"{NS}/Job.batch.volcano.sh/finetune"]
    rec = w["recommended"]
    assert rec["sharing"] == "volcano-vgpu" and rec["replicas"] == 2
    # 20,000 MiB in use + margin, rounded up to 256 MiB: under the 40,960 held
    assert 20_000 < rec["volcano_vgpu_memory_mib"] < 40_960 and rec["volcano_vgpu_memory_mib"] % 256 == 0
    assert w["apply"]["template"] == "spec.tasks[1].template"
    assert w["apply"]["resources"]["volcano.sh/vgpu-memory"] == f"{rec['volcano_vgpu_memory_mib']:.0f}"
    assert w["gpus_needed"] < w["gpus_held"]


def test_runai_is_recommended_report_only(report: dict[str, dict[str, Any]]) -> None:
    w = report[f"{NS}/Deployment/chat"]
    assert w["current"]["sharing"] == "runai" and w["current"]["runai_gpu_fraction"] == 0.5
    assert w["recommended"]["sharing"] == "runai"
    assert "report-only" in w["apply"]["report_only"] and "gpu-fraction" in w["apply"]["annotations"]
