"""dcgm-exporter scraped without ``honorLabels``, through a real Prometheus.

dcgm-exporter labels each GPU's series with the pod, namespace and container using it. A scrape that does not
honour those labels (``honorLabels: false`` on a ServiceMonitor, the dcgm-exporter Helm chart's default; Prometheus'
``honor_labels: false``) renames them ``exported_pod``, ``exported_namespace`` and ``exported_container``, and
sets ``pod`` and ``namespace`` to the target's: the exporter's own pod on each node. Read by ``pod``, every GPU's
memory and activity was the exporter's, one DaemonSet holding all the cluster's GPUs, and no workload had any. Such
series are not read; the report says what to set.
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

from collectors.pods import PodUsage, pod_key
from collectors.prometheus import collect_pod_usage
from collectors.prometheus.cache import UsageCache
from recommender.cli.main import main
from recommender.core import usage as m
from recommender.core.progress import RecordingProgress
from recommender.core.settings import Settings
from recommender.core.settings_sources import PrometheusSettings
from tests import promcluster as pc
from tests.promfixture import PromServer, Series, dishonoured, gateway, prometheus_binaries, tsdb_of

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(prometheus_binaries() is None,
                       reason="Debian's prometheus/promtool not installed (apt-get install -y prometheus)"),
]
EXPORTER_NS = "gpu-operator"


def _renamed(s: Series) -> Series:
    """``s`` as a scrape that does not honour its labels stores it: dcgm-exporter's pod labels renamed where it
    sent them, and the target's (the exporter's own pod on the GPU's node) on every series, a free GPU's too."""
    if not s.name.startswith("DCGM_"):
        return s
    return dishonoured(s, {"namespace": EXPORTER_NS, "pod": f"nvidia-dcgm-exporter-{s.labels['Hostname']}",
                           "container": "nvidia-dcgm-exporter"})


def _cluster(end_s: int) -> list[Series]:
    """The cluster's series, dcgm-exporter's with its scrape's job, and a node whose GPU is free (its exporter's
    pod is on no series that names a GPU's pod)."""
    ts = pc.timestamps(end_s)
    idle = {"gpu": "0", "UUID": "GPU-idle", "modelName": "NVIDIA A100-SXM4-80GB", "Hostname": "a100-idle"}
    series = [*pc.cluster_series(end_s), Series("DCGM_FI_DEV_FB_USED", idle, ts, np.zeros(ts.size)),
              Series("DCGM_FI_DEV_FB_FREE", idle, ts, np.full(ts.size, 81_920.0))]
    return [replace(s, labels={**s.labels, "job": "nvidia-dcgm-exporter"}) if s.name.startswith("DCGM_") else s
            for s in series]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, datetime]]:
    """(URL with dcgm-exporter's labels honoured, URL with them renamed, the window's end): ``_cluster``."""
    end_s = int(time.time()) // 3600 * 3600
    series = _cluster(end_s)
    work = tmp_path_factory.mktemp("renamed")
    tsdbs = [tsdb_of(series, work / "honoured", pc.TYPES), tsdb_of(map(_renamed, series), work / "renamed", pc.TYPES)]
    with PromServer.from_tsdb(tsdbs[0]) as honoured, PromServer.from_tsdb(tsdbs[1]) as renamed:
        yield honoured.url, renamed.url, datetime.fromtimestamp(end_s, UTC)


def _collect(url: str, end: datetime, **p: Any) -> tuple[PodUsage, list[str]]:
    s = Settings(history_s=pc.HOURS * 3600, prometheus=PrometheusSettings(url=url, retries=0, **p))
    progress = RecordingProgress()
    return collect_pod_usage(s, end - timedelta(hours=pc.HOURS), end, progress, with_ksm=True), progress.messages


def _pods(usage: PodUsage) -> set[str]:
    found = {c for frame in usage.series.values() for c in frame.columns}
    return found | {pod_key(d.namespace, d.pod) for d in usage.devices}


def test_renamed_pod_labels_read_as_honoured_ones(servers: tuple[str, str, datetime]) -> None:
    honoured_url, renamed_url, end = servers
    (honoured, _), (renamed, said) = _collect(honoured_url, end), _collect(renamed_url, end)
    assert not any(p.startswith(f"{EXPORTER_NS}/") for p in _pods(renamed))  # the exporter holds no GPU
    assert sorted(renamed.series) == sorted(honoured.series)
    for metric, frame in honoured.series.items():
        pd.testing.assert_frame_equal(renamed.series[metric], frame, obj=metric)
    for field in ("devices", "owners", "requests", "vllm", "gpu_nodes", "warnings"):
        assert sorted(map(repr, getattr(renamed, field))) == sorted(map(repr, getattr(honoured, field))), field
    assert any(x.startswith("note: dcgm-exporter's series name the pods using each GPU in exported_namespace")
               for x in said)
    assert not any("dcgm-exporter's series name" in x for x in _collect(honoured_url, end)[1])


def _report(url: str, end: datetime) -> dict[str, Any]:
    res = CliRunner().invoke(main, ["report", "--prometheus-url", url, "--no-kubernetes", "--history", "2d",
                                    "--min-history", "12h", "--end", end.isoformat(), "-o", "json", "--no-cache"],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return dict(json.loads(re.sub(r"http://127\.0\.0\.1:\d+", "URL", res.stdout)))


def test_the_report_is_the_honoured_clusters(servers: tuple[str, str, datetime]) -> None:
    honoured_url, renamed_url, end = servers
    assert _report(renamed_url, end) == _report(honoured_url, end)


def test_a_namespace_selected_reads_the_workloads_namespace_not_the_exporters(
        servers: tuple[str, str, datetime]) -> None:
    honoured_url, renamed_url, end = servers
    s = Settings(namespaces=("mig",), history_s=pc.HOURS * 3600,
                 prometheus=PrometheusSettings(url=renamed_url, retries=0))
    renamed = collect_pod_usage(s, end - timedelta(hours=pc.HOURS), end, RecordingProgress(), with_ksm=True)
    honoured = collect_pod_usage(s.model_copy(update={"prometheus": PrometheusSettings(url=honoured_url, retries=0)}),
                                 end - timedelta(hours=pc.HOURS), end, RecordingProgress(), with_ksm=True)
    assert {c.split("/")[0] for c in renamed.series[m.FB_USED_MIB].columns} == {"mig"}
    for metric, frame in honoured.series.items():
        pd.testing.assert_frame_equal(renamed.series[metric], frame, obj=metric)


def _warm(url: str, end: datetime, exporter: tuple[str, str], **p: Any) -> tuple[PodUsage, UsageCache]:
    """A collection 3 h before ``end``, then one to ``end`` from its cache, which holds where dcgm-exporter names
    its pods (``exporter``): the second read and the cache."""
    cache = UsageCache()
    s = Settings(history_s=pc.HOURS * 3600, prometheus=PrometheusSettings(url=url, retries=0, **p))
    collect_pod_usage(s, end - timedelta(hours=pc.HOURS + 3), end - timedelta(hours=3), RecordingProgress(),
                      with_ksm=True, cache=cache)
    assert cache.exporter == exporter
    progress = RecordingProgress()
    warm = collect_pod_usage(s, end - timedelta(hours=pc.HOURS), end, progress, with_ksm=True, cache=cache)
    assert any("earlier steps from the last collection" in x for x in progress.messages)
    return warm, cache


def test_a_warm_read_keeps_reading_the_renamed_labels(servers: tuple[str, str, datetime], tmp_path: Any) -> None:
    from collectors.prometheus import cachefile

    honoured_url, renamed_url, end = servers
    warm, cache = _warm(renamed_url, end, ("exported_namespace", "exported_pod"))
    honoured, _ = _collect(honoured_url, end)
    for metric, frame in honoured.series.items():
        pd.testing.assert_frame_equal(warm.series[metric], frame, obj=metric)
    # the file says so, for the census sent before the collector loads (ahead)
    from collectors.prometheus import store
    path = tmp_path / "usage.cache"
    path.write_bytes(store.dumps(cache))
    mark = cachefile.peek(path)
    assert mark is not None and mark.exporter == store.loads(path.read_bytes()).exporter == cache.exporter


def test_a_server_that_lists_no_series_is_asked_by_a_count(servers: tuple[str, str, datetime]) -> None:
    """Behind a gateway that passes only the query endpoints, whether the labels were renamed is counted at the
    window's end."""
    honoured_url, renamed_url, end = servers
    with gateway(lambda: renamed_url, ("/api/v1/query", "/api/v1/status/")) as url:
        behind, said = _collect(url, end)
    honoured, _ = _collect(honoured_url, end)
    assert any("dcgm-exporter's series name the pods" in x for x in said)
    for metric in (m.FB_USED_MIB, m.GR_ENGINE_ACTIVE_FRAC, m.REQUEST_RATE):
        pd.testing.assert_frame_equal(behind.series[metric], honoured.series[metric], obj=metric)


def test_a_scrape_changed_between_reads_reads_everything_again(servers: tuple[str, str, datetime]) -> None:
    """One URL whose server turns from honouring dcgm-exporter's labels to renaming them (and back): the cached
    steps were read by the other labels, so the next read takes none of them."""
    honoured_url, renamed_url, end = servers
    target = [honoured_url]

    honoured, _ = _collect(honoured_url, end)
    with gateway(lambda: target[0]) as url:
        s = Settings(history_s=pc.HOURS * 3600, prometheus=PrometheusSettings(url=url, retries=0))
        cache = UsageCache()
        renamed = ("exported_namespace", "exported_pod")
        for server, exporter in ((honoured_url, None), (renamed_url, renamed), (honoured_url, None)):
            target[0] = server
            progress = RecordingProgress()
            got = collect_pod_usage(s, end - timedelta(hours=pc.HOURS), end, progress, with_ksm=True, cache=cache)
            assert cache.exporter == exporter
            assert not any("earlier steps from the last collection" in x for x in progress.messages[1:])
            for metric, frame in honoured.series.items():
                pd.testing.assert_frame_equal(got.series[metric], frame, obj=metric)
        again = RecordingProgress()
        collect_pod_usage(s, end - timedelta(hours=pc.HOURS), end, again, with_ksm=True, cache=cache)
        assert any("earlier steps from the last collection" in x for x in again.messages)  # unchanged: cached


def test_with_the_kubernetes_api_the_report_is_the_honoured_clusters(servers: tuple[str, str, datetime]) -> None:
    from tests.test_prometheus_report import inference_report

    honoured_url, renamed_url, end = servers
    honoured, renamed = inference_report(honoured_url, end), inference_report(renamed_url, end)
    assert renamed == honoured and honoured["workloads"][0]["memory_need_mib"] is not None


KSM_PODS = ("kube-state-metrics-6d9f8-x7k2p", "kube-state-metrics-6d9f8-m3n4q")  # two replicas, each scraped


def _ksm(series: list[Series], renamed: bool) -> list[Series]:
    """``series`` with kube-state-metrics' scraped from ``KSM_PODS`` (as one target where its labels are
    honoured, as both where they are not: each copy then names its replica's pod)."""
    out = [s for s in series if not s.name.startswith("kube_")]
    for s in (s for s in series if s.name.startswith("kube_")):
        if not renamed:
            out.append(replace(s, labels={**s.labels, "instance": "10.0.0.5:8080"}))
            continue
        for i, pod in enumerate(KSM_PODS):
            copy = replace(s, labels={**s.labels, "instance": f"10.0.0.{5 + i}:8080"})
            out.append(dishonoured(copy, {"namespace": "monitoring", "pod": pod, "container": "kube-state-metrics"}))
    return out


@pytest.fixture(scope="module")
def ksm_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, datetime]]:
    """(URL with kube-state-metrics' labels honoured, URL with them renamed, the window's end). One pod also
    requests a GPU for a second container."""
    end_s = int(time.time()) // 3600 * 3600
    series = pc.cluster_series(end_s)
    first = pc.PODS[0]
    series.append(Series("kube_pod_container_resource_requests",
                         {"namespace": first.ns, "pod": first.name, "container": "sidecar",
                          "resource": "nvidia_com_gpu", "unit": "integer"},
                         series[0].timestamps_s, np.ones(series[0].timestamps_s.size)))
    work = tmp_path_factory.mktemp("ksm")
    honoured = tsdb_of(_ksm(series, False), work / "honoured", pc.TYPES)
    renamed = tsdb_of(_ksm(series, True), work / "renamed", pc.TYPES)
    with PromServer.from_tsdb(honoured) as a, PromServer.from_tsdb(renamed) as b:
        yield a.url, b.url, datetime.fromtimestamp(end_s, UTC)


def test_kube_state_metrics_scraped_without_its_labels_reads_as_honoured(
        ksm_servers: tuple[str, str, datetime]) -> None:
    """Its owners and GPU requests are read from the renamed labels (each container's, each replica's once):
    nothing is put on its own pod, and a note says what to set."""
    honoured_url, renamed_url, end = ksm_servers
    (honoured, _), (renamed, said) = _collect(honoured_url, end), _collect(renamed_url, end)
    first = pc.PODS[0]
    assert dict(next(r for r in honoured.requests if r.pod == first.name).resources) == {"nvidia.com/gpu": 2.0}
    assert len(honoured.owners) == sum(p.owner is not None for p in pc.PODS)
    for field in ("owners", "requests", "warnings"):
        assert sorted(map(repr, getattr(renamed, field))) == sorted(map(repr, getattr(honoured, field))), field
    assert any(x.startswith("note: kube-state-metrics' series name their pods in exported_namespace") for x in said)
    assert "honorLabels: true" in next(x for x in said if "kube-state-metrics' series name" in x)
    assert not any("kube-state-metrics' series name" in x for x in _collect(honoured_url, end)[1])
    assert _report(renamed_url, end) == _report(honoured_url, end)


OLD_STYLE = {"namespace_label": "kubernetes_namespace", "pod_label": "kubernetes_pod_name"}


def _old_style(s: Series) -> Series:
    """``s`` as a scrape whose target labels are the old example configuration's (``kubernetes_namespace``,
    ``kubernetes_pod_name``, what the settings then name) stores it: vLLM's pods named in those; dcgm-exporter's
    series keep the pod labels it gives them (``namespace``, ``pod``: no conflict, nothing renamed) beside its own
    pod's in those, a free GPU's too."""
    if s.name.startswith("vllm:"):
        labels = {k: v for k, v in s.labels.items() if k not in ("namespace", "pod")}
        return replace(s, labels={**labels, "kubernetes_namespace": s.labels["namespace"],
                                  "kubernetes_pod_name": s.labels["pod"]})
    if s.name.startswith("DCGM_"):
        return replace(s, labels={**s.labels, "kubernetes_namespace": EXPORTER_NS,
                                  "kubernetes_pod_name": f"nvidia-dcgm-exporter-{s.labels['Hostname']}"})
    return s


@pytest.fixture(scope="module")
def old_style(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, datetime]]:
    end_s = int(time.time()) // 3600 * 3600
    tsdb = tsdb_of(map(_old_style, _cluster(end_s)), tmp_path_factory.mktemp("old") / "old", pc.TYPES)
    with PromServer.from_tsdb(tsdb) as prom:
        yield prom.url, datetime.fromtimestamp(end_s, UTC)


def test_other_target_labels_read_dcgm_exporters_pods_by_its_own(old_style: tuple[str, datetime],
                                                                  servers: tuple[str, str, datetime]) -> None:
    """Settings that name the scrape's pod labels (``kubernetes_pod_name``) name the exporter's own pod on its
    series: each GPU's pod is in the labels dcgm-exporter gives it, read from there. The cluster reads as the one
    scraped with the usual labels."""
    url, end = old_style
    (got, _), (want, _) = _collect(url, end, **OLD_STYLE), _collect(servers[0], servers[2])
    assert end == servers[2]
    assert not any(p.startswith(f"{EXPORTER_NS}/") for p in _pods(got))
    assert sorted(got.series) == sorted(want.series)
    for metric, frame in want.series.items():
        pd.testing.assert_frame_equal(got.series[metric], frame, obj=metric)
    for field in ("devices", "owners", "requests", "vllm", "gpu_nodes", "warnings"):
        assert sorted(map(repr, getattr(got, field))) == sorted(map(repr, getattr(want, field))), field
    assert any(x.startswith("note: dcgm-exporter's series name the pods using each GPU in namespace and pod, and "
                            "kubernetes_namespace and kubernetes_pod_name") for x in _collect(url, end, **OLD_STYLE)[1])

    def report(url: str, **p: str) -> dict[str, Any]:
        from recommender.cli.app import make_report
        from recommender.core.settings_sources import KubernetesSettings

        s = Settings(history_s=pc.HOURS * 3600, kubernetes=KubernetesSettings(enabled=False),
                     prometheus=PrometheusSettings(url=url, retries=0, **p))
        return dict(json.loads(re.sub(r"http://127\.0\.0\.1:\d+", "URL", make_report("prometheus", None, s, end,
                                                                                     "json"))))

    assert report(url, **OLD_STYLE) == report(servers[0])


def test_a_warm_read_keeps_reading_dcgm_exporters_own_labels(old_style: tuple[str, datetime],
                                                              servers: tuple[str, str, datetime]) -> None:
    url, end = old_style
    warm, _ = _warm(url, end, ("namespace", "pod"), **OLD_STYLE)
    want, _ = _collect(servers[0], servers[2])
    for metric, frame in want.series.items():
        pd.testing.assert_frame_equal(warm.series[metric], frame, obj=metric)


IDLE_H = 4.0  # the last hours of the idle cluster's window: no pod holds a GPU


def _idle(series: list[Series], end_s: int) -> list[Series]:
    """``series`` with every pod gone for the last ``IDLE_H`` hours: dcgm-exporter then exports each GPU without
    pod labels, and the exporters of pods say nothing."""
    cut = end_s - IDLE_H * 3600
    out: dict[tuple[str, tuple[tuple[str, str], ...]], Series] = {}
    for s in series:
        before = s.timestamps_s < cut
        if not s.labels.get("pod"):
            out[(s.name, tuple(sorted(s.labels.items())))] = s
            continue
        out[(s.name, tuple(sorted(s.labels.items())))] = replace(s, timestamps_s=s.timestamps_s[before],
                                                                  values=s.values[before])
        if s.name.startswith("DCGM_"):
            free = {k: v for k, v in s.labels.items() if k not in ("pod", "namespace", "container")}
            after = s.timestamps_s[~before]
            out.setdefault((s.name, tuple(sorted(free.items()))),
                           Series(s.name, free, after, np.zeros(after.size)))
    return [s for s in out.values() if s.timestamps_s.size]


@pytest.fixture(scope="module")
def idle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, datetime]]:
    """(URL with dcgm-exporter's labels honoured, URL with them renamed, the window's end) of a cluster none of
    whose pods holds a GPU for the last ``IDLE_H`` hours."""
    end_s = int(time.time()) // 3600 * 3600
    series = _idle(pc.cluster_series(end_s), end_s)
    work = tmp_path_factory.mktemp("idle")
    tsdbs = [tsdb_of(series, work / "honoured", pc.TYPES), tsdb_of(map(_renamed, series), work / "renamed", pc.TYPES)]
    with PromServer.from_tsdb(tsdbs[0]) as honoured, PromServer.from_tsdb(tsdbs[1]) as renamed:
        yield honoured.url, renamed.url, datetime.fromtimestamp(end_s, UTC)


def test_a_warm_read_of_an_idle_cluster_keeps_the_renamed_labels(idle: tuple[str, str, datetime]) -> None:
    """The new steps have no renamed series, since no pod holds a GPU, but the free GPUs' series name the same
    exporter pods as before: nothing changed, and the cache serves its steps (it read everything again each time,
    as a controller would every cycle through an idle night)."""
    honoured_url, renamed_url, end = idle
    cache = UsageCache()
    s = Settings(history_s=pc.HOURS * 3600, prometheus=PrometheusSettings(url=renamed_url, retries=0))
    collect_pod_usage(s, end - timedelta(hours=pc.HOURS + 2), end - timedelta(hours=2), RecordingProgress(),
                      with_ksm=True, cache=cache)
    assert cache.exporter == ("exported_namespace", "exported_pod")
    progress = RecordingProgress()
    warm = collect_pod_usage(s, end - timedelta(hours=pc.HOURS), end, progress, with_ksm=True, cache=cache)
    assert any("earlier steps from the last collection" in x for x in progress.messages), progress.messages
    assert cache.exporter == ("exported_namespace", "exported_pod")
    honoured, _ = _collect(honoured_url, end)
    assert sorted(warm.series) == sorted(honoured.series)
    for metric, frame in honoured.series.items():
        pd.testing.assert_frame_equal(warm.series[metric], frame, obj=metric)


def _tenants(end_s: int) -> list[Series]:
    """What a tenant's exporter says of another namespace's pod, scraped (as a PodMonitor's default is) without
    honouring its labels: another owner, and eight GPUs requested by its container."""
    ts = pc.timestamps(end_s)
    victim = pc.PODS[0]
    target = {"namespace": "tenant", "pod": "spoof-7d9f8-abcde", "container": "spoof", "job": "tenant/spoof"}
    lies = [Series("kube_pod_owner", {"namespace": victim.ns, "pod": victim.name, "owner_kind": "Deployment",
                                      "owner_name": "evil", "owner_is_controller": "true"}, ts, np.ones(ts.size)),
            Series("kube_pod_container_resource_requests", {"namespace": victim.ns, "pod": victim.name,
                                                            "container": "main", "resource": "nvidia_com_gpu",
                                                            "unit": "integer"}, ts, np.full(ts.size, 8.0)),
            Series("kube_deployment_status_replicas", {"namespace": victim.ns, "deployment": "llama-chat"}, ts,
                   np.full(ts.size, 9.0)),
            Series("DCGM_FI_DEV_FB_USED", {"gpu": "0", "UUID": "GPU-spoof", "modelName": "NVIDIA A100-SXM4-80GB",
                                           "Hostname": "a100-0", "namespace": victim.ns, "pod": victim.name,
                                           "container": "main"}, ts, np.full(ts.size, 80_000.0))]
    return [dishonoured(s, target) for s in lies]


@pytest.fixture(scope="module")
def spoofed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, datetime]]:
    """(URL of the honoured cluster, URL of it with a tenant's renamed series about another namespace's pod, the
    window's end)."""
    end_s = int(time.time()) // 3600 * 3600
    series = _cluster(end_s)
    ts = pc.timestamps(end_s)
    series.append(Series("kube_deployment_status_replicas", {"namespace": "inference", "deployment": "llama-chat"},
                         ts, np.full(ts.size, 2.0)))
    work = tmp_path_factory.mktemp("spoof")
    tsdbs = [tsdb_of(series, work / "plain", pc.TYPES), tsdb_of(series + _tenants(end_s), work / "spoof", pc.TYPES)]
    with PromServer.from_tsdb(tsdbs[0]) as plain, PromServer.from_tsdb(tsdbs[1]) as spoof:
        yield plain.url, spoof.url, datetime.fromtimestamp(end_s, UTC)


def test_a_tenants_renamed_series_say_nothing_of_what_kube_state_metrics_says(
        spoofed: tuple[str, str, datetime]) -> None:
    """kube-state-metrics' renamed labels are read back only for what its honoured series do not say: a tenant's
    exporter cannot give another namespace's pod an owner, GPUs or replicas kube-state-metrics reports otherwise."""
    from collectors.prometheus import collect_workload_replicas
    from recommender.core.inventory import WorkloadRef

    plain_url, spoof_url, end = spoofed
    (plain, _), (spoof, _) = _collect(plain_url, end), _collect(spoof_url, end)
    for field in ("owners", "requests"):
        assert sorted(map(repr, getattr(spoof, field))) == sorted(map(repr, getattr(plain, field))), field
    ref = WorkloadRef("inference", "Deployment", "llama-chat")
    s = Settings(history_s=pc.HOURS * 3600, prometheus=PrometheusSettings(url=spoof_url, retries=0))
    replicas = collect_workload_replicas(s, [ref], end - timedelta(hours=pc.HOURS), end, RecordingProgress())
    assert replicas is not None and set(replicas[ref.key].dropna()) == {2.0}


def test_a_tenants_renamed_dcgm_series_do_not_turn_the_fleets_reading(spoofed: tuple[str, str, datetime]) -> None:
    """One series with dcgm-exporter's renamed labels, beside series that name pods in its own: a second target
    (here a tenant's exporter) scraped without honouring them, not dcgm-exporter's scrape. Read as the renamed
    scrape it turned every GPU's reading to those labels, and no other pod had any; its renamed series are not
    read, and a warning says so."""
    plain_url, spoof_url, end = spoofed
    (plain, _), (spoof, said) = _collect(plain_url, end), _collect(spoof_url, end)
    for metric, frame in plain.series.items():
        pd.testing.assert_frame_equal(spoof.series[metric][[c for c in spoof.series[metric].columns
                                                            if not c.startswith("tenant/")]], frame, obj=metric)
    (line,) = [w for w in spoof.warnings if "exported_namespace" in w]
    assert line.startswith("1 dcgm-exporter series name their pods in exported_namespace and exported_pod, beside ")
    assert not any("dcgm-exporter's series name the pods using each GPU" in x for x in said)
