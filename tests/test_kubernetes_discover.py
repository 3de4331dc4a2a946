"""discover_workloads against kmock's emulator seeded with a realistic GPU cluster (real HTTP, real client)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from collectors.kubernetes import discover_workloads
from collectors.kubernetes.discover import Listing, build_workloads
from collectors.kubernetes.revisions import revision_of, shape_since
from collectors.kubernetes.templates import parse_controller
from recommender.core.inventory import Sharing, VllmArgs, Workload
from recommender.core.progress import NullProgress, RecordingProgress
from tests.kubefixture import KubeEmulator, container, gpu_node, manifest, pod_from, template

A100 = "NVIDIA-A100-SXM4-80GB"
VLLM = "vllm/vllm-openai:v0.8.5"
GPU1 = {"nvidia.com/gpu": "1", "cpu": "8", "memory": "64Gi"}


def _nodes() -> list[dict[str, Any]]:
    none = {"nvidia.com/mig.strategy": "none", "nvidia.com/gpu.replicas": "1",
            "nvidia.com/gpu.sharing-strategy": "none"}
    mixed = {"nvidia.com/mig.strategy": "mixed", "nvidia.com/mig.config": "all-balanced",
             "nvidia.com/mig-3g.40gb.count": "2", "nvidia.com/mig-3g.40gb.memory": "40192",
             "nvidia.com/mig-1g.10gb.count": "2", "nvidia.com/mig-1g.10gb.memory": "9728"}
    sliced = {"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing"}
    return [
        gpu_node("gpu-a100-0", A100, 81920, labels=none),
        gpu_node("gpu-a100-1", A100, 81920, labels=none),
        gpu_node("gpu-a100-mig-0", A100, 81920, labels=mixed),
        gpu_node("gpu-t4-0", "Tesla-T4-SHARED", 15360, count=1, labels=sliced),
        manifest("Node", None, "cpu-0", {}, {"kubernetes.io/hostname": "cpu-0"}),
    ]


def _deployment(ns: str, name: str, tmpl: dict[str, Any], replicas: int, template_hash: str,
                nodes: list[str | None]) -> list[dict[str, Any]]:
    """A Deployment, its ReplicaSet ``<name>-<hash>`` and one pod per entry of ``nodes``."""
    dep = manifest("Deployment", ns, name, {"replicas": replicas, "template": tmpl}, {"app": name},
                   {"deployment.kubernetes.io/revision": "3", "kubectl.kubernetes.io/last-applied-configuration": "{}"})
    rs = manifest("ReplicaSet", ns, f"{name}-{template_hash}", {"replicas": replicas, "template": tmpl},
                  {"app": name, "pod-template-hash": template_hash}, owner=dep)
    pods = [pod_from(rs, ns, f"{name}-{template_hash}-{suffix}", tmpl, node, {"pod-template-hash": template_hash})
            for suffix, node in zip(("x2k4p", "q8r7m", "b5n3v"), nodes, strict=False)]
    return [dep, rs, *pods]


def _revised(objects: list[dict[str, Any]], tmpl: dict[str, Any]) -> list[dict[str, Any]]:
    """A Deployment that ran on whole GPUs (revision 1) before its MIG slices (revision 2, the current one)."""
    dep, rs = objects[0], objects[1]
    rs["metadata"]["annotations"] = {"deployment.kubernetes.io/revision": "2"}
    rs["metadata"]["creationTimestamp"] = "2026-11-10T08:00:00Z"
    whole = {**tmpl, "spec": {**tmpl["spec"], "containers": [
        {**tmpl["spec"]["containers"][0], "resources": {"limits": dict(GPU1), "requests": dict(GPU1)}}]}}
    old = manifest("ReplicaSet", "llm", "qwen-7b-8d6b5c4f7", {"replicas": 0, "template": whole},
                   {"app": "qwen-7b"}, {"deployment.kubernetes.io/revision": "1"}, owner=dep)
    old["metadata"]["creationTimestamp"] = "2026-11-01T00:00:00Z"
    return [*objects, old]


def _llm() -> list[dict[str, Any]]:
    llama = template({"app": "llama-8b"}, container("vllm", VLLM, GPU1, args=[
        "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu-memory-utilization", "0.90",
        "--max-model-len=8192", "--max-num-seqs", "256", "--served-model-name", "llama-8b"]))
    qwen = template({"app": "qwen-7b"}, container("vllm", VLLM, {"nvidia.com/mig-3g.40gb": "1"}, command=[
        "vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--gpu-memory-utilization", "0.85", "--max-model-len", "16K"]))
    mps = template({"app": "embedder"}, container("tei", "ghcr.io/huggingface/text-embeddings-inference:1.5", GPU1,
                                                  env={"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30",
                                                       "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=10G"}))
    idle = template({"app": "gemma-idle"}, container("vllm", VLLM, GPU1, args=["google/gemma-2-9b-it"]),
                    nodeSelector={"nvidia.com/gpu.product": A100})
    mistral = template({"app": "mistral"}, container(
        "vllm", "vllm/vllm-openai:v0.6.3", {"nvidia.com/gpu": "2"}, command=["/bin/sh", "-c"],
        args=["exec python3 -m vllm.entrypoints.openai.api_server --model mistralai/Mistral-7B-Instruct-v0.3 "
              "--tensor-parallel-size 2 --max-model-len 32k"]))
    sts = manifest("StatefulSet", "llm", "mistral", {"replicas": 1, "serviceName": "mistral", "template": mistral},
                   {"app": "mistral"})
    shorter = template({"app": "mistral"}, container(
        "vllm", "vllm/vllm-openai:v0.6.3", {"nvidia.com/gpu": "2"}, command=["/bin/sh", "-c"],
        args=["exec python3 -m vllm.entrypoints.openai.api_server --model mistralai/Mistral-7B-Instruct-v0.3 "
              "--tensor-parallel-size 2 --max-model-len 16k"]))
    revisions = sts_revisions(sts, (1, shorter, "2026-11-02T00:00:00Z"), (2, mistral, "2026-11-12T09:30:00Z"))
    orphan = template({"app": "llama-old"}, container("vllm", VLLM, GPU1, args=["meta-llama/Llama-2-7b-chat-hf"]))
    gone_rs = {"kind": "ReplicaSet", "metadata": {"name": "llama-old-6f7c8d9e5b", "uid": "uid-gone"}}
    return [
        *_deployment("llm", "llama-8b", llama, 2, "7d4b9c6f5d", ["gpu-a100-0", "gpu-a100-1"]),
        *_revised(_deployment("llm", "qwen-7b", qwen, 1, "5c9f7b8d4", ["gpu-a100-mig-0"]), qwen),
        *_deployment("llm", "embedder", mps, 1, "6b8c9d7f5", ["gpu-a100-1"]),
        *_deployment("llm", "gemma-idle", idle, 0, "85f6d9c7b", []),
        sts, *revisions,
        pod_from(sts, "llm", "mistral-0", mistral, "gpu-a100-0", {"apps.kubernetes.io/pod-index": "0"}),
        pod_from(gone_rs, "llm", "llama-old-6f7c8d9e5b-h7j2k", orphan, "gpu-a100-1",
                 {"pod-template-hash": "6f7c8d9e5b"}),
    ]


def sts_revisions(sts: dict[str, Any], *records: tuple[int, dict[str, Any], str]) -> list[dict[str, Any]]:
    """A StatefulSet's ControllerRevisions: (number, pod template, creation time) each, its ``data`` the patch
    that restores the template, as the StatefulSet controller writes it."""
    out = []
    for number, tmpl, created in records:
        cr = manifest("ControllerRevision", str(sts["metadata"]["namespace"]), f"{sts['metadata']['name']}-{number}",
                      owner=sts)
        del cr["spec"]
        cr |= {"revision": number, "data": {"spec": {"template": {**tmpl, "$patch": "replace"}}}}
        cr["metadata"]["creationTimestamp"] = created
        out.append(cr)
    return out

def _batch_and_research() -> list[dict[str, Any]]:
    embed = template({"job": "nightly-embed"}, container("embed", "ghcr.io/acme/embed-batch:2.1", GPU1),
                     restartPolicy="OnFailure")
    cron = manifest("CronJob", "batch", "nightly-embed", {"schedule": "0 2 * * *", "jobTemplate": {
        "spec": {"parallelism": 1, "completions": 1, "template": embed}}})
    job = manifest("Job", "batch", "nightly-embed-29000000", {"parallelism": 1, "template": embed}, owner=cron)
    notebook = template({"app": "notebook"}, container("jupyter", "quay.io/jupyter/pytorch-notebook:cuda12", GPU1))
    hami = template({"app": "hami"}, container("train", "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime", {
        "nvidia.com/gpu": "1", "nvidia.com/gpumem": "20000", "nvidia.com/gpucores": "30"}))
    kai = template({"app": "kai", "kai.scheduler/queue": "research"},
                   container("infer", "ghcr.io/acme/small-llm:0.3", {"cpu": "2"}),
                   annotations={"gpu-fraction": "0.5"}, schedulerName="kai-scheduler")
    web = template({"app": "frontend"}, container("web", "nginx:1.27", {"cpu": "500m", "memory": "256Mi"}))
    return [
        cron, job, pod_from(job, "batch", "nightly-embed-29000000-abcde", embed, "gpu-t4-0"),
        pod_from(None, "research", "notebook-gpu", notebook, "gpu-a100-0"),
        pod_from(None, "research", "hami-train", hami, "gpu-a100-1"),
        pod_from(None, "research", "kai-infer", kai, "gpu-a100-1"),
        *_deployment("web", "frontend", web, 3, "79c5d8f6b4", ["cpu-0", "cpu-0"]),
        *_deployment("empty", "static", web, 1, "6d5f8c7b9", ["cpu-0"]),
    ]


def _leader_worker_set() -> list[dict[str, Any]]:
    leader_t = template({"role": "leader"}, container("vllm", VLLM, {"nvidia.com/gpu": "8"}, command=["sh", "-c"],
                        args=["ray start --head && vllm serve meta-llama/Llama-3.1-70B-Instruct "
                              "--tensor-parallel-size 8 --pipeline-parallel-size 2"]))
    worker_t = template({"role": "worker"}, container("vllm", VLLM, {"nvidia.com/gpu": "8"},
                                                      command=["sh", "-c", "ray start --block"]))
    lws = manifest("LeaderWorkerSet", "llm", "llama-70b", {"replicas": 1, "leaderWorkerTemplate": {
        "size": 2, "leaderTemplate": leader_t, "workerTemplate": worker_t}})
    revisions = []  # its groups were 3 pods (size 3) before revision 2 made them 2
    for number, size, created in ((1, 3, "2026-11-03T00:00:00Z"), (2, 2, "2026-11-14T12:00:00Z")):
        cr = manifest("ControllerRevision", "llm", f"llama-70b-{number}", owner=lws)
        del cr["spec"]
        cr |= {"revision": number, "data": {"spec": {"networkConfig": {"subdomainPolicy": "Shared"},
                                                      "leaderWorkerTemplate": {"size": size, "leaderTemplate": leader_t,
                                                                               "workerTemplate": worker_t,
                                                                               "$patch": "replace"}}}}
        cr["metadata"]["creationTimestamp"] = created
        revisions.append(cr)
    leader_sts = manifest("StatefulSet", "llm", "llama-70b", {"replicas": 1, "template": leader_t}, owner=lws)
    leader = pod_from(leader_sts, "llm", "llama-70b-0", leader_t, "gpu-a100-0")
    worker_sts = manifest("StatefulSet", "llm", "llama-70b-0", {"replicas": 1, "template": worker_t}, owner=leader)
    worker = pod_from(worker_sts, "llm", "llama-70b-0-1", worker_t, "gpu-a100-1")
    return [lws, *revisions, leader_sts, leader, worker_sts, worker]


@pytest.fixture(scope="module")
def kube() -> Iterator[KubeEmulator]:
    with KubeEmulator([*_nodes(), *_llm(), *_batch_and_research(), *_leader_worker_set()]) as emulator:
        yield emulator


@pytest.fixture(scope="module")
def found(kube: KubeEmulator) -> dict[str, Workload]:
    workloads = discover_workloads(kube.settings(), NullProgress(), kube.api_client())
    return {w.ref.key: w for w in workloads}


def test_only_gpu_workloads_sorted(found: dict[str, Workload]) -> None:
    assert list(found) == [
        "batch/CronJob/nightly-embed",
        "llm/Deployment/embedder",
        "llm/Deployment/gemma-idle",
        "llm/Deployment/llama-8b",
        "llm/Deployment/llama-old",
        "llm/Deployment/qwen-7b",
        "llm/LeaderWorkerSet/llama-70b",
        "llm/StatefulSet/mistral",
        "research/Pod/hami-train",
        "research/Pod/kai-infer",
        "research/Pod/notebook-gpu",
    ]  # web/Deployment/frontend and empty/Deployment/static hold no GPU


def test_vllm_deployment_on_a100(found: dict[str, Workload]) -> None:
    w = found["llm/Deployment/llama-8b"]
    assert w.allocation.sharing is Sharing.EXCLUSIVE
    assert (w.allocation.gpus, w.allocation.replicas) == (1, 2)
    assert (w.allocation.gpu_product, w.allocation.device_memory_mib) == (A100, 81920.0)
    assert (w.allocation.gpu_model, w.allocation.gpu_equivalents) == (None, 0.0)  # the core normalises
    assert w.allocation.vllm == VllmArgs("meta-llama/Llama-3.1-8B-Instruct", 0.90, 8192, 256, 1)
    assert w.served_model == "llama-8b"
    assert w.pods == ("llama-8b-7d4b9c6f5d-q8r7m", "llama-8b-7d4b9c6f5d-x2k4p")
    assert (w.source, w.notes, w.labels) == ("kubernetes", (), {"app": "llama-8b"})
    assert w.annotations == {"deployment.kubernetes.io/revision": "3"}  # last-applied-configuration dropped


def test_mig_slice_memory_from_the_profile_label(found: dict[str, Workload]) -> None:
    a = found["llm/Deployment/qwen-7b"].allocation
    assert (a.sharing, a.mig_profile, a.mig_count, a.gpus) == (Sharing.MIG, "3g.40gb", 1, 0)
    assert a.device_memory_mib == 40192.0  # nvidia.com/mig-3g.40gb.memory, not the 81920 of the GPU
    assert a.vllm is not None and a.vllm.max_model_len == 16_384  # 16K = 16 × 1024


def test_the_shape_a_controller_took_last_from_its_revisions(found: dict[str, Workload]) -> None:
    """qwen-7b ran on whole GPUs (its revision 1) before its slices: the slices' capacity starts at revision 2.
    mistral (a StatefulSet) served with a shorter --max-model-len before its ControllerRevision 2, and llama-70b
    (a LeaderWorkerSet) in groups of three pods."""
    assert found["llm/Deployment/qwen-7b"].shape_since == datetime(2026, 11, 10, 8, tzinfo=UTC)
    assert found["llm/StatefulSet/mistral"].shape_since == datetime(2026, 11, 12, 9, 30, tzinfo=UTC)
    assert found["llm/LeaderWorkerSet/llama-70b"].shape_since == datetime(2026, 11, 14, 12, tzinfo=UTC)
    assert found["llm/Deployment/llama-8b"].shape_since is None  # one ReplicaSet: no other shape known


SVC = manifest("Deployment", "llm", "svc")


def _rs(revision: str | None, created: str | None, gpu: dict[str, str], image: str = VLLM) -> dict[str, Any]:
    rs = manifest("ReplicaSet", "llm", f"svc-{revision}", {"template": template({}, container("vllm", image, gpu))},
                  annotations={"deployment.kubernetes.io/revision": revision} if revision else None, owner=SVC)
    if created:
        rs["metadata"]["creationTimestamp"] = created
    return rs


MIG3 = {"nvidia.com/mig-3g.40gb": "1"}


@pytest.mark.parametrize(("replica_sets", "since"), [
    # whole GPUs, then the slice, then a new image on the slice: the slice since its first rollout
    ([_rs("1", "2026-11-01T00:00:00Z", GPU1), _rs("2", "2026-11-05T00:00:00Z", MIG3),
      _rs("3", "2026-11-09T00:00:00Z", MIG3, "vllm/vllm-openai:v0.9.0")], datetime(2026, 11, 5, tzinfo=UTC)),
    # rolled back to the slice's old ReplicaSet (revision 3 now, created first): not before the whole GPUs left
    ([_rs("3", "2026-11-01T00:00:00Z", MIG3), _rs("2", "2026-11-05T00:00:00Z", GPU1)],
     datetime(2026, 11, 5, tzinfo=UTC)),
    ([_rs("1", "2026-11-01T00:00:00Z", MIG3), _rs("2", "2026-11-05T00:00:00Z", MIG3)], None),  # never another
    ([_rs(None, "2026-11-01T00:00:00Z", GPU1), _rs("2", None, GPU1), _rs("x", "2026-11-02T00:00:00Z", GPU1),
      _rs("4", "2026-11-05T00:00:00", MIG3)], None),  # undated or unnumbered ReplicaSets tell nothing
    ([_rs("1", "2026-11-01T00:00:00Z", GPU1), _rs("4", "2026-11-05T00:00:00", MIG3)],
     datetime(2026, 11, 5, tzinfo=UTC)),  # a time without a zone is UTC
    ([], None),
])
def test_shape_since(replica_sets: list[dict[str, Any]], since: datetime | None) -> None:
    current = parse_controller("Deployment", {"spec": {"template": template({}, container("vllm", VLLM, MIG3))}})
    revisions = [r for rs in replica_sets if (r := revision_of("ReplicaSet", rs)) is not None]
    assert shape_since(current, revisions) == since


def test_only_a_controllers_own_records_are_its_revisions() -> None:
    assert revision_of("ReplicaSet", _rs("1", "2026-11-01T00:00:00Z", GPU1)) is not None
    bare = _rs("1", "2026-11-01T00:00:00Z", GPU1)
    del bare["metadata"]["ownerReferences"]
    assert revision_of("ReplicaSet", bare) is None  # a ReplicaSet of its own is a workload, not a revision
    daemon = manifest("ControllerRevision", "llm", "ds-1", owner=manifest("DaemonSet", "llm", "ds"))
    daemon |= {"revision": 1, "data": {"spec": {"template": template({}, container("x", "x", GPU1))}}}
    daemon["metadata"]["creationTimestamp"] = "2026-11-01T00:00:00Z"
    assert revision_of("ControllerRevision", daemon) is None  # a DaemonSet's: not a workload we size
    assert revision_of("Pod", _rs("1", "2026-11-01T00:00:00Z", GPU1)) is None
    odd = manifest("ControllerRevision", "llm", "sts-1", owner=manifest("StatefulSet", "llm", "sts"))
    odd |= {"revision": 1, "data": {"spec": {"replicas": 3}}}  # no template: not read as another shape
    odd["metadata"]["creationTimestamp"] = "2026-11-01T00:00:00Z"
    assert revision_of("ControllerRevision", odd) is None
    assert revision_of("ControllerRevision", odd | {"data": {"spec": {"template": {}}}}) is not None


def test_statefulset_with_shell_command(found: dict[str, Workload]) -> None:
    w = found["llm/StatefulSet/mistral"]
    assert (w.allocation.gpus, w.allocation.replicas, w.pods) == (2, 1, ("mistral-0",))
    assert w.allocation.vllm == VllmArgs("mistralai/Mistral-7B-Instruct-v0.3", None, 32_000, None, 2)


def test_cronjob_owns_job_owns_pod_on_time_sliced_node(found: dict[str, Workload]) -> None:
    w = found["batch/CronJob/nightly-embed"]
    assert w.pods == ("nightly-embed-29000000-abcde",)
    assert (w.allocation.sharing, w.allocation.gpus, w.allocation.replicas) == (Sharing.TIME_SLICING, 1, 1)
    assert (w.allocation.gpu_product, w.allocation.device_memory_mib) == ("Tesla-T4-SHARED", 15360.0)
    assert w.annotations["rightsizer.io/schedule"] == "0 2 * * *"  # the classifier's evidence of batch


def test_bare_pod(found: dict[str, Workload]) -> None:
    w = found["research/Pod/notebook-gpu"]
    assert (w.allocation.sharing, w.pods) == (Sharing.EXCLUSIVE, ("notebook-gpu",))
    assert w.notes == ("bare pod: no controller owns it, so nothing recreates it",)


def test_mps_hami_kai(found: dict[str, Workload]) -> None:
    mps = found["llm/Deployment/embedder"].allocation
    assert (mps.sharing, mps.mps_active_thread_pct, mps.mps_pinned_mem_mib) == (Sharing.MPS, 30.0, 10_240.0)
    hami = found["research/Pod/hami-train"].allocation
    assert (hami.sharing, hami.hami_gpumem_mib, hami.hami_gpucores_pct) == (Sharing.HAMI, 20_000.0, 30.0)
    kai = found["research/Pod/kai-infer"].allocation
    assert (kai.sharing, kai.kai_gpu_fraction, kai.gpu_product) == (Sharing.KAI, 0.5, A100)


def test_scaled_to_zero_takes_the_product_it_selects(found: dict[str, Workload]) -> None:
    w = found["llm/Deployment/gemma-idle"]
    assert (w.allocation.replicas, w.pods) == (0, ())
    assert (w.allocation.gpu_product, w.allocation.device_memory_mib) == (A100, 81920.0)  # from a matching node
    assert w.served_model == "google/gemma-2-9b-it"


def test_pod_whose_replicaset_is_gone(found: dict[str, Workload]) -> None:
    w = found["llm/Deployment/llama-old"]
    assert w.pods == ("llama-old-6f7c8d9e5b-h7j2k",)
    assert w.notes == ("ReplicaSet llama-old-6f7c8d9e5b not found; owner inferred from its name: Deployment llama-old",)
    assert w.allocation.gpus == 1


def test_leader_worker_set_is_one_workload(found: dict[str, Workload]) -> None:
    w = found["llm/LeaderWorkerSet/llama-70b"]
    assert w.pods == ("llama-70b-0", "llama-70b-0-1")  # worker → worker sts → leader pod → leader sts → LWS
    assert (w.allocation.gpus, w.allocation.replicas) == (16, 1)  # 8 (leader) + (2 − 1) × 8 (worker)
    assert w.allocation.vllm is not None and w.allocation.vllm.tensor_parallel_size == 8
    assert "LeaderWorkerSet: one replica is a group of 2 pods" in w.notes


def test_namespaces_are_listed_one_by_one(kube: KubeEmulator) -> None:
    before = len(kube.requests())
    workloads = discover_workloads(kube.settings(["batch", "research"]), NullProgress(), kube.api_client())
    assert [w.ref.key for w in workloads] == [
        "batch/CronJob/nightly-embed", "research/Pod/hami-train", "research/Pod/kai-infer", "research/Pod/notebook-gpu",
    ]
    paths = kube.requests()[before:]
    assert "GET /apis/apps/v1/namespaces/batch/deployments" in paths
    assert "GET /api/v1/namespaces/research/pods" in paths
    assert not any(p.endswith(("/apis/apps/v1/deployments", "/api/v1/pods")) for p in paths)  # no cluster-wide


@pytest.mark.parametrize("namespace", ["empty", "no-such-namespace"])
def test_namespace_without_gpu_workloads(kube: KubeEmulator, namespace: str) -> None:
    assert discover_workloads(kube.settings([namespace]), NullProgress(), kube.api_client()) == ()


def test_progress_counts_every_list_call(kube: KubeEmulator) -> None:
    progress = RecordingProgress()
    discover_workloads(kube.settings(["llm", "web"]), progress, kube.api_client())
    # per namespace: 7 built-in kinds + LeaderWorkerSet, 6 batch/training job kinds (Volcano Job, PodGroup,
    # PyTorchJob, MPIJob, TrainJob, JobSet), HorizontalPodAutoscaler, ScaledObject; then nodes and the DRA
    # objects (resource.k8s.io, at the first version served) once
    assert progress.totals == {"kubernetes: list objects": 2 * 16 + 2}
    assert progress.done == progress.totals


def test_settings_host_alone_builds_the_client(kube: KubeEmulator) -> None:
    assert len(discover_workloads(kube.settings(["batch"]), NullProgress())) == 1


def test_owners_we_do_not_list_without_a_server() -> None:
    """build_workloads is pure: a Listing by hand, no emulator."""
    burn = template({"app": "gpu-burn"}, container("burn", "oguzpastirmaci/gpu-burn:latest", GPU1))
    ds = manifest("DaemonSet", "ops", "gpu-burn", {"template": burn})
    isvc = {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": "granite", "uid": "uid-isvc"}}
    predictor_t = template({"app": "granite"}, container("kserve-container", VLLM, GPU1, args=["ibm/granite-8b"]))
    predictor = manifest("Deployment", "serving", "granite-predictor", {"replicas": 1, "template": predictor_t},
                         owner=isvc)
    kai_t = template({"app": "kai"}, container("infer", "ghcr.io/acme/small-llm:0.3"),
                     annotations={"gpu-memory": "2000"})
    listing = Listing()
    listing.add("Pod", [pod_from(ds, "ops", "gpu-burn-4xk2p", burn, "gpu-a100-0"),
                        pod_from(ds, "ops", "gpu-burn-9mz7q", burn, "gpu-a100-1"),
                        pod_from(None, "research", "kai-pending", kai_t, None)])
    listing.add("Deployment", [predictor])
    by_key = {w.ref.key: w for w in build_workloads(listing)}
    assert list(by_key) == [
        "ops/DaemonSet/gpu-burn", "research/Pod/kai-pending", "serving/Deployment/granite-predictor"]
    burner = by_key["ops/DaemonSet/gpu-burn"]
    assert (burner.allocation.replicas, burner.pods) == (2, ("gpu-burn-4xk2p", "gpu-burn-9mz7q"))
    assert burner.notes == ("owner kind DaemonSet is not read; allocation read from its pods",)
    assert by_key["serving/Deployment/granite-predictor"].notes == (
        "owner InferenceService granite not read; Deployment granite-predictor taken as the workload",)
    kai = by_key["research/Pod/kai-pending"]
    assert (kai.allocation.sharing, kai.allocation.kai_gpu_fraction) == (Sharing.KAI, None)
    assert "KAI gpu-memory=2000 MiB: fraction unknown without GPU memory" in kai.notes


def test_cluster_nodes_and_where_pods_run(kube: KubeEmulator) -> None:
    from collectors.kubernetes import discover_cluster
    from recommender.core.catalogue import load_catalogue

    workloads, nodes = discover_cluster(kube.settings(), NullProgress(), load_catalogue(), kube.api_client())
    by_name = {n.name: n for n in nodes}
    # cpu-0 has no GPU count: not a GPU node; the T4 is not in the catalogue: model unknown, still listed
    assert sorted(by_name) == ["gpu-a100-0", "gpu-a100-1", "gpu-a100-mig-0", "gpu-t4-0"]
    assert (by_name["gpu-a100-mig-0"].gpu_model, by_name["gpu-a100-mig-0"].gpus) == ("A100-80GB", 8)
    assert by_name["gpu-a100-mig-0"].mig_config == "all-balanced"
    assert by_name["gpu-a100-0"].mig_config is None
    lws = {w.ref.key: w for w in workloads}["llm/LeaderWorkerSet/llama-70b"]
    assert lws.nodes == ("gpu-a100-0", "gpu-a100-1")  # leader and worker pods, each on its own node


def test_cold_start_is_the_median_start_to_ready() -> None:
    from collectors.kubernetes.discover import cold_start_s

    def pod(start: str, ready: str | None) -> dict[str, Any]:
        conditions = [{"type": "Ready", "status": "True", "lastTransitionTime": ready}] if ready else []
        return {"status": {"startTime": start, "conditions": conditions}}

    pods = [pod("2026-11-01T10:00:00Z", "2026-11-01T10:02:00Z"),  # 120 s
            pod("2026-11-01T11:00:00Z", "2026-11-01T11:03:30Z"),  # 210 s
            pod("2026-11-01T12:00:00Z", "2026-11-01T12:01:30Z"),  # 90 s → median 120 s
            pod("2026-11-01T13:00:00Z", None)]  # never ready: not counted
    assert cold_start_s(pods) == 120.0
    assert cold_start_s([pod("2026-11-01T13:00:00Z", None), {"status": {}}]) is None
    assert cold_start_s([pod("not a time", "2026-11-01T12:01:30Z")]) is None


def _qwen_statefulset(strategy: str | None, pods_created: list[str]) -> Listing:
    """A StatefulSet on whole GPUs (revision 1) and on 3g.40gb slices since revision 2 (2026-11-10)."""
    new = template({"app": "qwen"}, container("vllm", VLLM, {"nvidia.com/mig-3g.40gb": "1"}, args=["Qwen/Qwen2.5-7B"]))
    old = template({"app": "qwen"}, container("vllm", VLLM, GPU1, args=["Qwen/Qwen2.5-7B"]))
    spec: dict[str, Any] = {"replicas": len(pods_created), "serviceName": "qwen", "template": new}
    if strategy is not None:
        spec["updateStrategy"] = {"type": strategy}
    sts = manifest("StatefulSet", "llm", "qwen", spec, {"app": "qwen"})
    records = sts_revisions(sts, (1, old, "2026-11-02T00:00:00Z"), (2, new, "2026-11-10T00:00:00Z"))
    pods = []
    for i, created in enumerate(pods_created):
        pod = pod_from(sts, "llm", f"qwen-{i}", new, "gpu-a100-mig-0")
        pod["metadata"]["creationTimestamp"] = created
        pods.append(pod)
    listing = Listing()
    listing.add("StatefulSet", [sts])
    listing.add("ControllerRevision", records)
    listing.add("Pod", pods)
    return listing


@pytest.mark.parametrize(("strategy", "pods_created", "since", "noted"), [
    # OnDelete: the last old pod was deleted on the 14th; until then the pool mixed both shapes
    ("OnDelete", ["2026-11-12T00:00:00Z", "2026-11-14T06:00:00Z"], datetime(2026, 11, 14, 6, tzinfo=UTC), True),
    # rolled out by the controller: the revision's time
    ("RollingUpdate", ["2026-11-12T00:00:00Z", "2026-11-14T06:00:00Z"], datetime(2026, 11, 10, tzinfo=UTC), False),
    (None, ["2026-11-14T06:00:00Z"], datetime(2026, 11, 10, tzinfo=UTC), False),  # RollingUpdate is the default
    ("OnDelete", ["2026-11-09T00:00:00Z"], datetime(2026, 11, 10, tzinfo=UTC), False),  # no pod started since
])
def test_an_on_delete_statefulset_takes_its_shape_when_its_pods_were_replaced(
        strategy: str | None, pods_created: list[str], since: datetime, noted: bool) -> None:
    (w,) = build_workloads(_qwen_statefulset(strategy, pods_created))
    assert w.shape_since == since
    assert any("updated OnDelete" in n for n in w.notes) == noted


@pytest.mark.parametrize("count", ["eight", "100000000", "-2", "1e3", "9" * 5000])
def test_a_gpu_count_label_no_node_has_leaves_the_node_out_and_never_stops_the_listing(count: str) -> None:
    """``nvidia.com/gpu.count`` that is not a whole number from 1 to 1,024 (a hand-set label): that node is left
    out, never a ValueError for the whole listing, nor 10^8 GPUs for the MIG planner to lay out."""
    from collectors.kubernetes.discover import gpu_nodes
    from recommender.core.catalogue import load_catalogue

    listing = Listing()
    for node in (gpu_node("odd", "NVIDIA-A100-SXM4-80GB", 81920, labels={"nvidia.com/gpu.count": count}),
                 gpu_node("fine", "NVIDIA-A100-SXM4-80GB", 81920, count=8)):
        listing.node_labels[node["metadata"]["name"]] = node["metadata"]["labels"]
    notes: list[str] = []
    assert [(n.name, n.gpus) for n in gpu_nodes(listing, load_catalogue(), notes)] == [("fine", 8)]
    (note,) = notes
    assert note.startswith("node odd: nvidia.com/gpu.count=") and note.endswith(
        "is not a device count from 0 to 1,024: left out of the MIG plans") and len(note) < 200


@pytest.mark.parametrize(("kind", "spec"), [
    ("Deployment", {"replicas": 2_000_000_000}),
    ("Job", {"parallelism": 2_000_000_000}),
    ("LeaderWorkerSet", {"replicas": 2_000_000_000}),
    ("LeaderWorkerSet", {"replicas": 1, "leaderWorkerTemplate": {"size": 2_000_000_000}}),
    ("Deployment", {"replicas": "9" * 5000}),
])
def test_a_replica_count_no_cluster_runs_is_a_note_not_billions_of_gpus_held(kind: str, spec: dict[str, Any]) -> None:
    """A tenant may scale its own controller to 2·10^9 replicas (a valid int32; no pod runs): read as 1 with a note,
    not 2·10^9 GPUs held in the fleet's report; more digits than int() converts is the same, not a traceback."""
    from collectors.kubernetes.templates import parse_controller

    main = container("vllm", "vllm/vllm-openai:v0.6.3")
    main["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    tmpl = template({"app": "x"}, main)
    body = {**spec, "template": tmpl}
    if kind == "LeaderWorkerSet":
        body = {"replicas": spec["replicas"], "leaderWorkerTemplate": {
            "size": spec.get("leaderWorkerTemplate", {}).get("size", 1), "workerTemplate": tmpl}}
    parsed = parse_controller(kind, manifest(kind, "llm", "huge", body))
    assert parsed.allocation.replicas * max(parsed.allocation.gpus, 1) <= 1_000_000, parsed.allocation
    assert any("is not a replica count" in n and "read as 1" in n and len(n) < 200 for n in parsed.notes), parsed.notes
