"""A pod's series scraped twice, through a real Prometheus.

A common misconfiguration scrapes one exporter by two jobs (a ServiceMonitor and a PodMonitor, an operator's job
and an annotation-based one): every series of its pods then exists twice, differing only in the labels the
scrape adds (``job``, ``instance``, ...). Summed per pod, that doubled the pod's request rate, queues, tokens,
power and, from kube-state-metrics, the GPUs it requests. The same cluster is served once with each series once
and once with every series of one pod (and kube-state-metrics) twice; both must read the same.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner

from collectors.pods import PodUsage
from collectors.prometheus import collect_pod_usage
from recommender.cli.main import main
from recommender.core.progress import RecordingProgress
from recommender.core.settings import Settings
from recommender.core.settings_sources import PrometheusSettings
from tests import promcluster as pc
from tests.promfixture import PromServer, Series, build_tsdb, prometheus_binaries, tsdb_of, write_openmetrics

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(prometheus_binaries() is None,
                       reason="Debian's prometheus/promtool not installed (apt-get install -y prometheus)"),
]
TWICE = f"llama-chat-{pc.RS}-q8w7z"  # every one of its series (DCGM, vLLM, kube-state-metrics) scraped by two jobs


def _scraped(s: Series, duplicated: bool) -> list[Series]:
    """``s`` as a scrape job labels it, and the same series from a second job where it is duplicated."""
    first = replace(s, labels={**s.labels, "job": "gpu-metrics", "instance": "10.0.0.7:9400"})
    if not duplicated or (s.labels.get("pod") != TWICE and not s.name.startswith("kube_")):
        return [first]
    return [first, replace(s, labels={**s.labels, "job": "gpu-metrics-podmonitor", "instance": "10.0.0.7:9400",
                                      "endpoint": "metrics"})]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, datetime]]:
    """(URL with each series once, URL with TWICE's and kube-state-metrics' series twice, the window's end)."""
    end_s = int(time.time()) // 3600 * 3600
    series = pc.cluster_series(end_s)
    assert any(s.labels.get("pod") == TWICE for s in series)
    work = tmp_path_factory.mktemp("dup")
    tsdbs = []
    for duplicated in (False, True):
        where = work / ("twice" if duplicated else "once")
        where.mkdir()
        write_openmetrics([x for s in series for x in _scraped(s, duplicated)], where / "data.om", pc.TYPES)
        build_tsdb(where / "data.om", where / "tsdb")
        tsdbs.append(where / "tsdb")
    with PromServer.from_tsdb(tsdbs[0]) as once, PromServer.from_tsdb(tsdbs[1]) as twice:
        yield once.url, twice.url, datetime.fromtimestamp(end_s, UTC)


def _collect(url: str, end: datetime) -> tuple[PodUsage, list[str]]:
    s = Settings(history_s=pc.HOURS * 3600, prometheus=PrometheusSettings(url=url, retries=0))
    progress = RecordingProgress()
    return collect_pod_usage(s, end - timedelta(hours=pc.HOURS), end, progress, with_ksm=True), progress.messages


def test_a_pod_scraped_twice_reads_as_scraped_once(servers: tuple[str, str, datetime]) -> None:
    once_url, twice_url, end = servers
    (once, quiet), (twice, said) = _collect(once_url, end), _collect(twice_url, end)
    # the census' listing saw them (TWICE's DCGM and vLLM series; kube-state-metrics' are not in the census)
    assert any(re.match(r"note: [1-9][\d,]* series are another one scraped again by another job", x) for x in said)
    assert not any("scraped again" in line for line in quiet)
    assert sorted(twice.series) == sorted(once.series)
    for metric, frame in once.series.items():
        pd.testing.assert_frame_equal(twice.series[metric], frame, obj=metric)
    # the GPUs each pod requests, from kube-state-metrics (scraped twice as well)
    assert sorted(map(repr, twice.requests)) == sorted(map(repr, once.requests))


def _report(url: str, end: datetime) -> dict[str, Any]:
    res = CliRunner().invoke(main, ["report", "--prometheus-url", url, "--no-kubernetes", "--history", "2d",
                                    "--min-history", "12h", "--end", end.isoformat(), "-o", "json", "--no-cache"],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return json.loads(re.sub(r"http://127\.0\.0\.1:\d+", "URL", res.stdout))


def test_the_report_of_a_cluster_scraped_twice_is_the_report_of_one_scraped_once(
        servers: tuple[str, str, datetime]) -> None:
    once_url, twice_url, end = servers
    assert _report(twice_url, end) == _report(once_url, end)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, datetime]]:
    """(URL of one Prometheus' series, URL of an HA pair's not deduplicated, the window's end): a pair scrapes
    everything twice, and a global view that does not deduplicate (a federation, a Thanos Query without
    ``--query.replica-label``) serves each series twice, differing only in the replica's external label."""
    end_s = int(time.time()) // 3600 * 3600
    series = [x for s in pc.cluster_series(end_s) for x in _scraped(s, False)]
    work = tmp_path_factory.mktemp("ha")
    tsdbs = [tsdb_of([replace(s, labels={**s.labels, "prometheus": "monitoring/k8s", "prometheus_replica": r})
                      for r in replicas for s in series], work / name, pc.TYPES)
             for name, replicas in (("one", ("prometheus-k8s-0",)),
                                    ("pair", ("prometheus-k8s-0", "prometheus-k8s-1")))]
    with PromServer.from_tsdb(tsdbs[0]) as one, PromServer.from_tsdb(tsdbs[1]) as both:
        yield one.url, both.url, datetime.fromtimestamp(end_s, UTC)


def test_an_ha_pair_not_deduplicated_reads_as_one_prometheus(pair: tuple[str, str, datetime]) -> None:
    one_url, pair_url, end = pair
    (one, _), (both, said) = _collect(one_url, end), _collect(pair_url, end)
    assert any(re.match(r"note: [1-9][\d,]* series are another one scraped again", x) for x in said)
    assert sorted(both.series) == sorted(one.series)
    for metric, frame in one.series.items():
        pd.testing.assert_frame_equal(both.series[metric], frame, obj=metric)
    assert sorted(map(repr, both.requests)) == sorted(map(repr, one.requests))
    assert _report(pair_url, end) == _report(one_url, end)
