"""``rightsizer report`` end to end on a real Prometheus: kube-state-metrics inventory, the Kubernetes API
(kmock) with Prometheus usage, and the one-line failures a user sees."""

from __future__ import annotations

import json
import re
import socket
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner

from recommender.cli.app import collect, make_report
from recommender.cli.controller import Cycle
from recommender.cli.main import main
from recommender.core.settings import Settings
from recommender.core.settings_sources import KubernetesSettings, PrometheusSettings
from recommender.pipeline.planstore import PlanStore
from tests import promcluster as pc
from tests.kubefixture import KubeEmulator, container, gpu_node, manifest, pod_from, template
from tests.promcluster import Cluster, report_json

pytestmark = pytest.mark.prometheus


def run(*args: str) -> Any:
    return CliRunner().invoke(main, ["report", *args], catch_exceptions=False)


@pytest.fixture(scope="module")
def doc(cluster: Cluster) -> dict[str, Any]:
    return report_json(cluster)


def by_key(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{w['namespace']}/{w['kind']}/{w['name']}": w for w in doc["workloads"]}


def test_every_workload_found_from_kube_state_metrics(doc: dict[str, Any]) -> None:
    assert set(by_key(doc)) == {
        "inference/Deployment/llama-chat", "inference/Deployment/old-vllm", "mig/Deployment/embedder",
        "mig/Deployment/tiny", "batch/CronJob/nightly-eval", "batch/Deployment/ts-a", "batch/Deployment/ts-b",
        "sparse/Deployment/no-activity", "sparse/Deployment/util-only", "sparse/Pod/debug-shell",
    }
    assert doc["source"].startswith("prometheus") and doc["window"]["step_s"] == 120


def test_vllm_deployment_sized_from_kv_in_use(doc: dict[str, Any]) -> None:
    llama = by_key(doc)["inference/Deployment/llama-chat"]
    assert llama["current"]["replicas"] == 2 and llama["current"]["gpu_model"] == "A100-80GB"
    assert llama["recommended"] is not None
    assert any("KV in use" in r for r in llama["reasons"])
    # KV pool 27,000 blocks x 16 tokens from vllm:cache_config_info; the need is far below the 73 GB framebuffer
    assert llama["memory_need_mib"]["target"] < 73_000


def test_old_vllm_names_still_give_kv(doc: dict[str, Any]) -> None:
    old = by_key(doc)["inference/Deployment/old-vllm"]
    assert old["current"]["gpu_model"] == "H100-80GB"
    assert not any("KV usage (vllm:kv_cache_usage_perc)" in r for r in old["reasons"])


def test_mig_and_time_slicing_as_held(doc: dict[str, Any]) -> None:
    w = by_key(doc)
    assert w["mig/Deployment/embedder"]["current"]["mig_profile"] == "3g.40gb"
    assert w["mig/Deployment/embedder"]["gpus_held"] == 0.5  # max(3/7, 4/8) of an A100-80GB
    ts = w["batch/Deployment/ts-a"]
    assert ts["current"]["sharing"] == "time-slicing"
    assert ts["gpus_held"] == 0.5  # dcgm-exporter saw ts-a and ts-b on one GPU at the same time
    assert any("1/2" in r for r in ts["reasons"])


def test_mig_plan_per_node_from_dcgm_labels_without_the_api(doc: dict[str, Any]) -> None:
    nodes = {n["node"]: n for n in doc["mig_nodes"]}
    # the nodes DCGM names, no "node unknown" GPUs of their own; a100-0 and a100-1 hold MIG and time-slicing
    assert {"a100-0", "a100-1"} <= set(nodes) <= {node for node, _ in pc.GPU_AT.values()}
    a100 = nodes["a100-0"]
    assert set(a100["workloads"]) == {"mig/Deployment/embedder", "mig/Deployment/tiny"}
    gpus = {i for node, i in pc.GPU_AT.values() if node == "a100-0"} | {i for n, i, _ in pc.FREE_GPUS if n == "a100-0"}
    assert a100["gpus_total"] == len(gpus)
    # the free GPU's two 3g.40gb instances (no pod, so only DCGM knows them) are kept, not re-planned
    assert a100["layouts"][4] == {"3g.40gb": 2} and a100["reconfigured_gpus"] == 1


def test_missing_metric_and_unknown_gpu_are_per_workload_reasons(doc: dict[str, Any]) -> None:
    w = by_key(doc)
    assert any("metric missing" in r and "GR_ENGINE_ACTIVE" in r for r in w["sparse/Deployment/no-activity"]["reasons"])
    debug = w["sparse/Pod/debug-shell"]
    assert debug["recommended"] is None and debug["reasons"][0].startswith("no recommendation: unknown GPU model")
    assert any("bare pod" in r for r in debug["reasons"])


def test_snapshot_taken_from_prometheus_gives_the_same_report(cluster: Cluster, doc: dict[str, Any],
                                                               tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["snapshot", "--prometheus-url", cluster.url, "--no-kubernetes", "--history", "2d",
                                    "--end", cluster.end.isoformat(), "--output-dir", str(tmp_path / "snap")])
    assert res.exit_code == 0, res.output
    res = run("--snapshot", str(tmp_path / "snap"), "--min-history", "12h", "-o", "json")
    offline = json.loads(res.stdout)
    assert offline["summary"] == doc["summary"]
    assert [(w["name"], w["recommended"], w["reasons"]) for w in offline["workloads"]] == \
        [(w["name"], w["recommended"], w["reasons"]) for w in doc["workloads"]]


def test_namespace_selection(cluster: Cluster) -> None:
    doc = report_json(cluster, "-n", "mig")
    assert {w["name"] for w in doc["workloads"]} == {"embedder", "tiny"}


def test_empty_namespace_is_one_line_and_exit_2(cluster: Cluster) -> None:
    res = run("--prometheus-url", cluster.url, "--no-kubernetes", "--history", "2d", "--end", cluster.end.isoformat(),
              "-n", "nothing-here")
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines()[-1] == "error: no GPU workloads found in nothing-here"


def test_dead_prometheus_is_one_line_and_exit_2() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    res = run("--prometheus-url", f"http://127.0.0.1:{port}", "--no-kubernetes", "--timeout", "2")
    assert res.exit_code == 2
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: cannot reach Prometheus at http://127.0.0.1:{port} (connection refused)")


def _vllm_template(gpu_memory_utilization: str = "0.9") -> dict[str, Any]:
    args = ["--model", "meta-llama/Meta-Llama-3-8B-Instruct", "--gpu-memory-utilization", gpu_memory_utilization,
            "--max-model-len", "8192"]
    return template({"app": "llama-chat"}, container("vllm", "vllm/vllm-openai:v0.8.5", {"nvidia.com/gpu": "1"},
                                                     args=args))


def _inference_cluster(changed_at: datetime | None = None) -> list[dict[str, Any]]:
    """The API's view of namespace inference: llama-chat (2 replicas on A100 nodes); old-vllm is gone. With
    ``changed_at``, its current ReplicaSet rolled out then, after one with another ``--gpu-memory-utilization``."""
    vllm = _vllm_template()
    dep = manifest("Deployment", "inference", "llama-chat", {"replicas": 2, "template": vllm}, {"app": "llama-chat"})
    rs = manifest("ReplicaSet", "inference", f"llama-chat-{pc.RS}", {"replicas": 2, "template": vllm},
                  {"app": "llama-chat"}, owner=dep)
    pods = [pod_from(rs, "inference", f"llama-chat-{pc.RS}-{s}", vllm, f"a100-{i}") for i, s in
            enumerate(("x2k4p", "q8w7z"))]
    nodes = [gpu_node(f"a100-{i}", "NVIDIA-A100-SXM4-80GB", 81920) for i in range(2)]
    if changed_at is None:
        return [dep, rs, *pods, *nodes]
    old = manifest("ReplicaSet", "inference", "llama-chat-5f6c7d8b9a", {"replicas": 0, "template": _vllm_template(
        "0.95")}, {"app": "llama-chat"}, {"deployment.kubernetes.io/revision": "1"}, owner=dep)
    old["metadata"]["creationTimestamp"] = (changed_at - timedelta(days=30)).isoformat()
    rs["metadata"]["annotations"] = {"deployment.kubernetes.io/revision": "2"}
    rs["metadata"]["creationTimestamp"] = changed_at.isoformat()
    return [dep, rs, old, *pods, *nodes]


def inference_report(url: str, end: datetime) -> dict[str, Any]:
    """The JSON report of namespace ``inference`` from the Prometheus at ``url`` and the API of
    :func:`_inference_cluster` (URLs masked)."""
    with KubeEmulator(_inference_cluster()) as kube:
        s = Settings(namespaces=("inference",), history_s=pc.HOURS * 3600,
                     prometheus=PrometheusSettings(url=url, retries=0), kubernetes=KubernetesSettings(host=kube.url))
        return dict(json.loads(re.sub(r"http://127\.0\.0\.1:\d+", "URL", make_report("prometheus", None, s, end,
                                                                                     "json"))))


def test_kubernetes_inventory_with_prometheus_usage(cluster: Cluster) -> None:
    doc = inference_report(cluster.url, cluster.end)
    (llama,) = doc["workloads"]
    assert (llama["kind"], llama["name"], llama["current"]["replicas"]) == ("Deployment", "llama-chat", 2)
    # the engine arguments come from the pod spec, the KV capacity from vllm:cache_config_info
    assert llama["current"]["vllm"]["max_model_len"] == 8192
    assert any("KV in use" in r for r in llama["reasons"])
    assert any("not in the cluster now" in w and "old-vllm" in w for w in doc["warnings"])


def test_capacity_is_read_from_the_rollout_that_gave_the_replicas_their_shape(cluster: Cluster) -> None:
    """The Kubernetes API's ReplicaSets say when the replicas took their shape; the replica plan reads the
    Prometheus history from then on."""
    changed_at = cluster.end - timedelta(hours=pc.HOURS / 2)
    s = Settings(namespaces=("inference",), history_s=pc.HOURS * 3600,
                 prometheus=PrometheusSettings(url=cluster.url, retries=0))
    for since, reads_part in ((changed_at, True), (None, False)):
        with KubeEmulator(_inference_cluster(since)) as kube:
            settings = s.model_copy(update={"kubernetes": KubernetesSettings(host=kube.url)})
            doc = json.loads(make_report("prometheus", None, settings, cluster.end, "json"))
        (llama,) = doc["workloads"]
        reasons = llama["scaling"]["reasons"]
        note = f"capacity and error budget read from {changed_at:%Y-%m-%d %H:%M} UTC on"
        assert any(r.startswith(note) for r in reasons) == reads_part, reasons


def test_controller_cycles_after_the_first_read_only_new_steps_and_plan_as_a_fresh_collection(
        cluster: Cluster) -> None:
    s = Settings(history_s=2 * 86_400, prometheus=PrometheusSettings(url=cluster.url),
                 kubernetes=KubernetesSettings(enabled=False))
    cycle = Cycle("prometheus", None, s, PlanStore())
    cycle(cluster.end - timedelta(hours=3), lambda _: {})
    full_at = cycle.cache.full_s
    plan, snap = cycle(cluster.end, lambda _: {})
    assert cycle.cache.full_s == full_at < cycle.cache.last_s  # the second cycle joined new steps to kept ones
    fresh = collect("prometheus", None, s, cluster.end)
    assert set(snap.usage) == set(fresh.usage)
    for metric, frame in fresh.usage.items():
        pd.testing.assert_frame_equal(snap.usage[metric], frame, check_freq=False)
    assert [r.ref for r in plan.recommendations] and {w.ref for w in snap.workloads} == {w.ref for w in fresh.workloads}


def test_controller_cycles_log_a_standing_note_once_and_the_query_counts_every_cycle(
        cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    s = Settings(history_s=86_400, prometheus=PrometheusSettings(url=cluster.url),
                 kubernetes=KubernetesSettings(enabled=False))
    cycle = Cycle("prometheus", None, s, PlanStore())
    cycle(cluster.end - timedelta(hours=1), lambda _: {})
    first = capsys.readouterr().err
    cycle(cluster.end, lambda _: {})
    second = capsys.readouterr().err
    note = "no replica counts"  # the shared cluster has owners but no kube-state-metrics replica counts
    assert note in first and note not in second
    assert "prometheus: " in second and "queries" in second  # lines that change each cycle are still logged
    assert any(note in line for line in cycle.said)
