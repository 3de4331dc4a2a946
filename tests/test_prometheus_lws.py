"""A LeaderWorkerSet without the Kubernetes API, through a real Prometheus.

kube-state-metrics names no LeaderWorkerSet: its leader pods (``big-0``, ``big-1``) are the leader StatefulSet's
(``big``), each group's worker pods (``big-0-1``) a StatefulSet named after the group's leader pod (``big-0``).
Read as StatefulSets, one multi-node inference service was three workloads, each sized (and scaled) on its own,
and a group's replica was one pod. It reads as the Kubernetes API says: one workload whose replica is a group.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from collectors.prometheus import collect_workload_replicas
from recommender.cli.app import make_report
from recommender.core.inventory import WorkloadRef
from recommender.core.progress import RecordingProgress
from recommender.core.settings import Settings
from recommender.core.settings_sources import KubernetesSettings, PrometheusSettings
from tests import promcluster as pc
from tests.kubefixture import KubeEmulator, container, gpu_node, manifest, pod_from, template
from tests.promfixture import PromServer, Series, prometheus_binaries, tsdb_of

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(prometheus_binaries() is None,
                       reason="Debian's prometheus/promtool not installed (apt-get install -y prometheus)"),
]
NS = "llm"
GROUPS = {"0": ("GPU-a1", "GPU-a2"), "1": ("GPU-b1", "GPU-t1")}  # a leader's and a worker's GPU per group
PODS = tuple(pod for g, (lead, work) in GROUPS.items() for pod in (
    pc.Pod(NS, f"big-{g}", ("StatefulSet", "big"), uuid=lead, vllm="new", requests={"nvidia_com_gpu": 1.0}),
    pc.Pod(NS, f"big-{g}-1", ("StatefulSet", f"big-{g}"), uuid=work, requests={"nvidia_com_gpu": 1.0})))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, datetime]]:
    """The pods' series, and kube-state-metrics' replica counts: the leader StatefulSet's (the groups) at 2, each
    group's workers' at 1."""
    end_s = int(time.time()) // 3600 * 3600
    ts = pc.timestamps(end_s)
    counts = [Series("kube_statefulset_status_replicas", {"namespace": NS, "statefulset": name}, ts,
                     np.full(ts.size, n)) for name, n in (("big", 2.0), ("big-0", 1.0), ("big-1", 1.0))]
    tsdb = tsdb_of([*pc.cluster_series(end_s, PODS), *counts], tmp_path_factory.mktemp("lws") / "lws", pc.TYPES)
    with PromServer.from_tsdb(tsdb) as prom:
        yield prom.url, datetime.fromtimestamp(end_s, UTC)


def _api() -> list[dict[str, Any]]:
    """The API's view: LeaderWorkerSet big, two groups of a leader and a worker, one GPU each."""
    pod_t = template({"app": "big"}, container("vllm", "vllm/vllm-openai:v0.8.5", {"nvidia.com/gpu": "1"}))
    lws = manifest("LeaderWorkerSet", NS, "big", {"replicas": 2, "leaderWorkerTemplate": {
        "size": 2, "leaderTemplate": pod_t, "workerTemplate": pod_t}})
    leader_sts = manifest("StatefulSet", NS, "big", {"replicas": 2, "template": pod_t}, owner=lws)
    out = [lws, leader_sts, *(gpu_node(f"a100-{i}", "NVIDIA-A100-SXM4-80GB", 81920) for i in range(2))]
    for g in GROUPS:
        leader = pod_from(leader_sts, NS, f"big-{g}", pod_t, f"a100-{g}")
        workers = manifest("StatefulSet", NS, f"big-{g}", {"replicas": 1, "template": pod_t}, owner=leader)
        out += [leader, workers, pod_from(workers, NS, f"big-{g}-1", pod_t, f"a100-{g}")]
    return out


def _report(url: str, end: datetime, kube: str | None) -> dict[str, Any]:
    s = Settings(namespaces=(NS,), history_s=pc.HOURS * 3600, prometheus=PrometheusSettings(url=url, retries=0),
                 kubernetes=KubernetesSettings(host=kube) if kube else KubernetesSettings(enabled=False))
    return dict(json.loads(re.sub(r"http://127\.0\.0\.1:\d+", "URL", make_report("prometheus", None, s, end, "json"))))


def test_without_the_api_a_leader_worker_set_is_one_workload_of_groups(server: tuple[str, datetime]) -> None:
    url, end = server
    alone = _report(url, end, None)
    with KubeEmulator(_api()) as kube:
        listed = _report(url, end, kube.url)
    (got,), (want,) = alone["workloads"], listed["workloads"]
    assert (got["kind"], got["name"]) == (want["kind"], want["name"]) == ("LeaderWorkerSet", "big")
    for field in ("replicas", "gpus", "gpu_equivalents", "sharing"):
        assert got["current"][field] == want["current"][field], field
    assert (got["current"]["replicas"], got["current"]["gpus"]) == (2, 2)
    assert any(r.startswith("LeaderWorkerSet: one replica is a group of 2 pods") for r in got["reasons"])


def test_its_replica_counts_are_its_leader_statefulsets(server: tuple[str, datetime]) -> None:
    """A step it spent at zero groups reads as idle, as a Deployment's does: kube-state-metrics counts its groups
    as the pods of its leader StatefulSet."""
    url, end = server
    s = Settings(history_s=pc.HOURS * 3600, prometheus=PrometheusSettings(url=url, retries=0))
    ref = WorkloadRef(NS, "LeaderWorkerSet", "big")
    got = collect_workload_replicas(s, [ref], end - timedelta(hours=pc.HOURS), end, RecordingProgress())
    assert got is not None and list(got.columns) == [ref.key] and set(got[ref.key].dropna()) == {2.0}
