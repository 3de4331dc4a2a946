"""Pods of two clusters with one name, behind one Prometheus-compatible API, through a real Prometheus.

Thanos, Mimir or a federating Prometheus in front of several clusters adds a ``cluster`` label (an external
label) to each cluster's series. Clusters deployed from one repository run StatefulSet pods of the same namespace
and name (``inference/vllm-0`` in each), and summed per (namespace, pod) their request rates, queues, power and
requested GPUs added up across clusters: the report sized a pod for the load of several. Such a pod is left out,
named in a warning that says how to select one cluster; every other pod reads as before.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from collectors.pods import PodUsage
from collectors.prometheus import collect_pod_usage
from collectors.prometheus.cache import UsageCache
from recommender.cli.main import main
from recommender.core import usage as m
from recommender.core.progress import RecordingProgress
from recommender.core.settings import Settings
from recommender.core.settings_sources import PrometheusSettings
from tests import promcluster as pc
from tests.promfixture import PromServer, Series, prometheus_binaries, tsdb_of

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(prometheus_binaries() is None,
                       reason="Debian's prometheus/promtool not installed (apt-get install -y prometheus)"),
]
BOTH = next(p for p in pc.PODS if p.name.startswith("old-vllm-"))  # runs in cluster "a" and, so named, in "b"
CHAT = next(p for p in pc.PODS if p.name.startswith("llama-chat-"))
ELSEWHERE = replace(CHAT, name=f"llama-chat-{pc.RS}-bbbbb")  # llama-chat's pod in "b": another name, one owner
SPANNING = {"inference/Deployment/old-vllm", "inference/Deployment/llama-chat"}


def _in(cluster: str, series: list[Series]) -> list[Series]:
    return [replace(s, labels={**s.labels, "cluster": cluster}) for s in series]


def _free_mig(end_s: int) -> list[Series]:
    """A free A100 on b's node of a's node's name (``a100-0``), at a's free MIG GPU's index, split into
    seven 1g.10gb instances (a's is two 3g.40gb)."""
    node, index, _ = pc.FREE_GPUS[1]
    ts = pc.timestamps(end_s)
    base = {"gpu": index, "UUID": "GPU-free-b", "modelName": "NVIDIA A100-SXM4-80GB", "Hostname": node,
            "GPU_I_PROFILE": "1g.10gb"}
    return [Series("DCGM_FI_DEV_FB_FREE", {**base, "GPU_I_ID": str(7 + k)}, ts, np.full(ts.size, 9_728.0))
            for k in range(7)]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, datetime]]:
    """(URL of cluster "a" alone, URL of "a" and of BOTH's namesake and ELSEWHERE in "b", the window's end)."""
    end_s = int(time.time()) // 3600 * 3600
    a = _in("a", pc.cluster_series(end_s))
    pods = (replace(BOTH, level=0.7, rate_per_s=6.0, fb_mib=40_000), ELSEWHERE)
    b = _in("b", [s for s in pc.cluster_series(end_s, pods) if s.labels.get("pod") in {p.name for p in pods}])
    b += _in("b", _free_mig(end_s))
    assert {s.name for s in b} >= {"DCGM_FI_DEV_FB_USED", "vllm:num_requests_running", "kube_pod_owner",
                                   "kube_pod_container_resource_requests"}
    work = tmp_path_factory.mktemp("clusters")
    tsdbs = [tsdb_of(a, work / "a", pc.TYPES), tsdb_of(a + b, work / "ab", pc.TYPES)]
    with PromServer.from_tsdb(tsdbs[0]) as alone, PromServer.from_tsdb(tsdbs[1]) as both:
        yield alone.url, both.url, datetime.fromtimestamp(end_s, UTC)


def _collect(url: str, end: datetime, cache: UsageCache | None = None, **p: Any) -> tuple[PodUsage, list[str]]:
    s = Settings(history_s=pc.HOURS * 3600, prometheus=PrometheusSettings(url=url, retries=0, **p))
    progress = RecordingProgress()
    usage = collect_pod_usage(s, end - timedelta(hours=pc.HOURS), end, progress, with_ksm=True, cache=cache)
    return usage, progress.messages


def _same(got: PodUsage, want: PodUsage) -> None:
    assert sorted(got.series) == sorted(want.series)
    for metric, frame in want.series.items():
        pd.testing.assert_frame_equal(got.series[metric], frame, obj=metric)
    for field in ("devices", "owners", "requests", "vllm"):
        assert sorted(map(repr, getattr(got, field))) == sorted(map(repr, getattr(want, field))), field


def test_the_collection_says_which_clusters_each_pods_series_come_from(servers: tuple[str, str, datetime]) -> None:
    alone_url, both_url, end = servers
    (alone, _), (both, _) = _collect(alone_url, end), _collect(both_url, end)
    assert alone.clusters == {}  # one cluster: no workload can span two, nothing to check
    a, b = ("cluster", "a"), ("cluster", "b")
    assert both.clusters[BOTH.key] == (a, b) and both.clusters[ELSEWHERE.key] == (b,)
    assert {k: v for k, v in both.clusters.items() if k not in (BOTH.key, ELSEWHERE.key)} == \
        dict.fromkeys(sorted({c for f in alone.series.values() for c in f.columns} - {BOTH.key}), (a,))


def test_a_warm_read_keeps_what_the_full_read_listed(servers: tuple[str, str, datetime]) -> None:
    _, both_url, end = servers
    cache = UsageCache()
    cold, _ = _collect(both_url, end - timedelta(hours=3), cache)
    warm, said = _collect(both_url, end, cache)
    assert any("earlier steps from the last collection" in x for x in said)  # read from the cache
    assert warm.clusters == cold.clusters and warm.clusters[BOTH.key] == (("cluster", "a"), ("cluster", "b"))


def test_one_cluster_selected_reads_as_that_cluster_alone(servers: tuple[str, str, datetime]) -> None:
    alone_url, both_url, end = servers
    picked, _ = _collect(both_url, end, extra_selector='cluster="a"')
    alone, _ = _collect(alone_url, end)
    assert picked.clusters == {}
    _same(picked, alone)


def test_no_cluster_label_checks_nothing_and_sums_what_it_should_not(servers: tuple[str, str, datetime]) -> None:
    alone_url, both_url, end = servers
    summed, _ = _collect(both_url, end, cluster_labels=())
    alone, _ = _collect(alone_url, end)
    assert summed.clusters == {}
    # what the check is for: the pod's requests are the two clusters' (2 + 6 a second), not its own
    rate = summed.series[m.REQUEST_RATE].loc[:, BOTH.key].median()
    assert rate == pytest.approx(alone.series[m.REQUEST_RATE].loc[:, BOTH.key].median() + 6.0, rel=0.05)


def _report(url: str, end: datetime, *extra: str) -> dict[str, Any]:
    res = CliRunner().invoke(main, ["report", "--prometheus-url", url, "--history", "2d", "--min-history", "12h",
                                    "--end", end.isoformat(), "-o", "json", "--no-cache", *extra],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return dict(json.loads(re.sub(r"http://127\.0\.0\.1:\d+", "URL", res.stdout)))


_WARNING = re.compile(r"2 workloads have pods in more than one cluster \(cluster: a, b\): (\S+), (\S+) left out, "
                      r"since their usage would add up across clusters; to size one cluster, set "
                      r'prometheus.extra_selector, e.g. cluster="a" \(or, where one cluster\'s cluster was renamed '
                      r"within the window, prometheus.cluster_labels: \[\]\)$")


def test_the_report_leaves_out_each_workload_of_two_clusters_and_says_so(servers: tuple[str, str, datetime]
                                                                        ) -> None:
    alone_url, both_url, end = servers
    alone, both = _report(alone_url, end, "--no-kubernetes"), _report(both_url, end, "--no-kubernetes")
    assert not any("cluster" in w for w in alone["warnings"])
    (line,) = [w for w in both["warnings"] if "pods in more than one cluster" in w]
    match = _WARNING.match(line)
    assert match and set(match.groups()) == SPANNING, line
    rows = {f"{w['namespace']}/{w['kind']}/{w['name']}": w for w in both["workloads"]}
    kept = {f"{w['namespace']}/{w['kind']}/{w['name']}": w for w in alone["workloads"]}
    assert kept.keys() >= SPANNING and not SPANNING & rows.keys()
    assert rows == {k: w for k, w in kept.items() if k not in SPANNING}  # every other workload as before


def test_with_the_kubernetes_api_the_workload_stays_listed_unsized(servers: tuple[str, str, datetime]) -> None:
    """The API lists one cluster's llama-chat; the other cluster's pod of it is attributed to it by name."""
    from tests.test_prometheus_report import inference_report

    alone_url, both_url, end = servers
    alone, both = inference_report(alone_url, end), inference_report(both_url, end)
    ((was,), (now,)) = alone["workloads"], both["workloads"]
    assert (was["name"], now["name"]) == ("llama-chat", "llama-chat")
    assert was["recommended"] is not None and not any("more than one cluster" in r for r in was["reasons"])
    assert now["recommended"] is None and now["history_s"] == 0.0  # nothing read from the sum
    assert any(r.startswith("its pods' series come from more than one cluster (cluster: a, b)")
               for r in now["reasons"])
    assert any(_WARNING.match(w) for w in both["warnings"])


def test_gpu_nodes_of_one_name_in_two_clusters_are_left_out_of_the_mig_plan(servers: tuple[str, str, datetime]
                                                                           ) -> None:
    """Without the API the GPU nodes are DCGM's, named by node: b's a100-0 and h100-0 read as a's would add their
    GPUs' MIG devices up (two 3g.40gb and seven 1g.10gb on one A100). They are left out, and said once."""
    alone_url, both_url, end = servers
    (alone, _), (both, _) = _collect(alone_url, end), _collect(both_url, end)
    a, b = ("cluster", "a"), ("cluster", "b")
    assert {n.name: n.clusters for n in both.gpu_nodes} == {"a100-0": (a, b), "a100-1": (a,), "foo-0": (a,),
                                                              "h100-0": (a, b)}
    assert [n for n in both.gpu_nodes if n.name in ("a100-1", "foo-0")] == \
        [n for n in alone.gpu_nodes if n.name in ("a100-1", "foo-0")]
    report = _report(both_url, end, "--no-kubernetes")
    (line,) = [w for w in report["warnings"] if w.startswith("2 GPU nodes")]
    assert line.startswith("2 GPU nodes have one name in more than one cluster (cluster: a, b): a100-0, h100-0 "
                           "left out of the per-node MIG plan, since their GPUs would add up across clusters; ")
    planned = {n["node"] for n in report["mig_nodes"]}
    assert planned and not planned & {"a100-0", "h100-0"}
    assert {n["node"] for n in _report(alone_url, end, "--no-kubernetes")["mig_nodes"]} >= {"a100-0"}
