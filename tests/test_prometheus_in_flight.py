"""Queries in flight matched to the server's cores (``prometheus.match_server_cores``), against a real Prometheus,
and the servers that do not say how many cores they have."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler

import pytest

from collectors.prometheus import PromClient, QueryStats, collect_pod_usage
from recommender.core.progress import RecordingProgress
from recommender.core.settings import Settings
from recommender.core.settings_sources import PrometheusSettings
from tests import promcluster as pc
from tests.promcluster import Cluster
from tests.promfixture import loopback_http

MOST = 32  # max_workers' upper bound: more than the cores of any machine these tests run on


class CountingClient(PromClient):
    """A real client that also counts the range queries it has in flight at once."""

    def __init__(self, p: PrometheusSettings) -> None:
        super().__init__(p, QueryStats())
        self._lock = threading.Lock()
        self.now = self.most = 0

    def query_range(self, promql: str, start_s: float, end_s: float, step_s: float) -> list:  # type: ignore[type-arg]
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)
        try:
            time.sleep(0.01)  # holds each query open a little, so the ones the pool sends together overlap
            return super().query_range(promql, start_s, end_s, step_s)
        finally:
            with self._lock:
                self.now -= 1


def collect(cluster: Cluster, **prom: object) -> tuple[CountingClient, RecordingProgress]:
    s = Settings(history_s=pc.HOURS * 3600,
                 prometheus=PrometheusSettings(**{"url": cluster.url, "retries": 0, **prom}))  # type: ignore[arg-type]
    client, progress = CountingClient(s.prometheus), RecordingProgress()
    collect_pod_usage(s, cluster.end - timedelta(hours=pc.HOURS), cluster.end, progress, client=client)
    return client, progress


def server_cores(url: str) -> int:
    with urllib.request.urlopen(f"{url}/api/v1/status/runtimeinfo", timeout=30) as r:
        return int(json.loads(r.read())["data"]["GOMAXPROCS"])


@pytest.mark.prometheus
def test_the_queries_in_flight_are_at_most_the_servers_cores(cluster: Cluster) -> None:
    cores = server_cores(cluster.url)
    client, progress = collect(cluster, max_workers=MOST)
    assert client.in_flight == min(MOST, cores)
    assert 1 <= client.most <= client.in_flight
    line = next(msg for msg in progress.messages if " queries over " in msg)
    assert f"{client.in_flight} at a time" in line
    assert ("(the server's cores)" in line) == (cores < MOST)


@pytest.mark.prometheus
def test_without_matching_the_queries_in_flight_are_max_workers(cluster: Cluster) -> None:
    client, progress = collect(cluster, max_workers=3, match_server_cores=False)
    assert client.in_flight == 3 and client.most <= 3
    assert not any("(the server's cores)" in msg for msg in progress.messages)


@pytest.fixture
def status_server(request: pytest.FixtureRequest) -> Iterator[str]:
    """A bare HTTP server that answers the connection check like Prometheus and ``/api/v1/status/runtimeinfo``
    with ``request.param``: (status, body), as a Thanos, a VictoriaMetrics or a proxy in front of one might."""
    status, body = request.param

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.startswith("/api/v1/status/runtimeinfo"):
                code, text = status, body
            else:
                code, text = 200, json.dumps({"status": "success", "data": {
                    "resultType": "vector", "result": [{"metric": {}, "value": [0, "1"]}]}})
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(text.encode())

        def log_message(self, *args: object) -> None:
            pass

    with loopback_http(Handler) as url:
        yield url


def runtime(cores: object) -> tuple[int, str]:
    return 200, json.dumps({"status": "success", "data": {"GOMAXPROCS": cores, "goroutineCount": 20}})


@pytest.mark.parametrize("status_server", [
    (404, "404 page not found"), (500, "oops"), (200, "not json"), (200, json.dumps({"status": "success"})),
    runtime("2"), runtime(0), runtime(-3), runtime(True), runtime(2.5), runtime(None),
], indirect=True, ids=["missing", "error", "not-json", "no-data", "string", "zero", "negative", "bool", "float",
                       "null"])
def test_a_server_that_does_not_say_its_cores_gets_max_workers(status_server: str) -> None:
    client = PromClient(PrometheusSettings(url=status_server, max_workers=5, retries=0, timeout_s=10))
    client.check()
    assert client.server_cores() is None
    assert client.in_flight == 5


@pytest.mark.parametrize(("status_server", "cores", "want"), [(runtime(2), 2, 2), (runtime(64), 64, 5)],
                         indirect=["status_server"], ids=["fewer", "more"])
def test_a_server_that_says_its_cores_caps_the_queries_in_flight(status_server: str, cores: int, want: int) -> None:
    client = PromClient(PrometheusSettings(url=status_server, max_workers=5, retries=0, timeout_s=10))
    assert client.server_cores() == cores
    assert client.in_flight == want
