"""No client stalls the servers: /metrics renders off the event loop, half-open and idle connections are
closed, connections beyond the cap are refused, and oversized headers are one log line and a 431.

Real servers on loopback; a slow render is a collector that blocks on an Event the test releases, so
nothing here asserts a duration: only what is answered, and what is closed.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
import requests
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from recommender.pipeline.planstore import PlanStore
from recommender.serve import Servers, ServeSettings, start_servers
from recommender.serve.metricspage import MetricsPage
from recommender.serve.proto import externalscaler_pb2 as pb
from recommender.serve.proto import externalscaler_pb2_grpc as pb_grpc
from tests import servefixture as sf

WAIT_S = 20.0  # a bound on waiting for something that should happen, never a measured duration
LOOP_THREAD = "rightsizer-serve"


class Blocking(Collector):
    """Records the thread each render runs on; blocks a render until ``release`` is set when asked to."""

    def __init__(self, block: bool = False) -> None:
        self.threads: list[str] = []
        self.entered, self.release = threading.Event(), threading.Event()
        if not block:
            self.release.set()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        self.threads.append(threading.current_thread().name)
        self.entered.set()
        assert self.release.wait(WAIT_S)
        yield GaugeMetricFamily("test_slow_render", "A collector that took its time", value=1.0)


class Running:
    def __init__(self, collector: Collector | None = None, **kw: object) -> None:
        self.store = PlanStore(sf.FakeClock())
        self.store.publish(sf.plan())
        registry = CollectorRegistry()
        if collector is not None:
            registry.register(collector)
        settings = ServeSettings(host="127.0.0.1", grpc_port=0, http_port=0, **kw)  # type: ignore[arg-type]
        self.servers: Servers = start_servers(self.store, settings, registry=registry)
        self.http = f"http://127.0.0.1:{self.servers.ports['http']}"

    def get(self, path: str, **kw: object) -> requests.Response:
        return requests.get(self.http + path, timeout=WAIT_S, **kw)  # type: ignore[arg-type]

    def get_metrics(self) -> pb.GetMetricsResponse:
        with grpc.insecure_channel(f"127.0.0.1:{self.servers.ports['grpc']}") as channel:
            ref = pb.ScaledObjectRef(name="so", namespace="llm", scalerMetadata={"workload": "llama-3-8b-chat"})
            request = pb.GetMetricsRequest(scaledObjectRef=ref, metricName="request_rate_per_s")
            response: pb.GetMetricsResponse = pb_grpc.ExternalScalerStub(channel).GetMetrics(request, timeout=WAIT_S)
            return response


@pytest.fixture
def running(request: pytest.FixtureRequest) -> Iterator[Running]:
    r = Running(**getattr(request, "param", {}))
    yield r
    r.servers.stop(0.5)


def test_metrics_render_off_the_event_loop() -> None:
    collector = Blocking()
    r = Running(collector)
    try:
        assert "test_slow_render 1.0" in r.get("/metrics").text
        assert collector.threads and LOOP_THREAD not in collector.threads
    finally:
        r.servers.stop(0.5)


def test_every_endpoint_answers_while_metrics_render() -> None:
    collector = Blocking(block=True)
    r = Running(collector, metrics_max_age_s=0)
    try:
        with ThreadPoolExecutor(1) as pool:
            scrape = pool.submit(r.get, "/metrics")
            assert collector.entered.wait(WAIT_S)  # the render is under way, and stays so until released
            assert r.get("/healthz").status_code == 200
            assert r.get("/readyz").status_code == 200
            assert r.get("/api/v1/keda/llm/llama-3-8b-chat").json()["value"] == 14.0
            assert r.get_metrics().metricValues[0].metricValueFloat == 14.0
            assert not scrape.done()
            collector.release.set()
            assert "test_slow_render 1.0" in scrape.result(WAIT_S).text
    finally:
        collector.release.set()
        r.servers.stop(0.5)


def _page(collector: Collector, max_age_s: float) -> tuple[MetricsPage, PlanStore, sf.FakeClock]:
    clock = sf.FakeClock()
    store, registry = PlanStore(clock), CollectorRegistry()
    store.publish(sf.plan())
    registry.register(collector)
    return MetricsPage(registry, store, max_age_s), store, clock


def test_scrapes_in_flight_share_one_render() -> None:
    collector = Blocking(block=True)
    page, _, _ = _page(collector, 0.0)

    async def four_scrapes() -> list[bytes]:
        scrapes = [asyncio.create_task(page.body()) for _ in range(4)]
        await asyncio.sleep(0)  # each has asked for the body and now waits on the render in flight
        assert await asyncio.to_thread(collector.entered.wait, WAIT_S)
        collector.release.set()
        return await asyncio.gather(*scrapes)

    try:
        bodies = asyncio.run(four_scrapes())
    finally:
        collector.release.set()
        page.close()
    assert len(collector.threads) == 1 and len(set(bodies)) == 1 and b"test_slow_render 1.0" in bodies[0]


def test_a_body_is_reused_until_the_plan_ages_or_changes() -> None:
    collector = Blocking()
    page, store, clock = _page(collector, 5.0)

    async def scrape() -> None:
        await page.body()

    try:
        asyncio.run(scrape())
        clock.t += 4.9  # plan age 4.9 s < 5 s: the same body
        asyncio.run(scrape())
        assert len(collector.threads) == 1
        clock.t += 0.1  # 5 s: rendered again
        asyncio.run(scrape())
        assert len(collector.threads) == 2
        store.publish(sf.plan())  # a new plan, at once
        asyncio.run(scrape())
        assert len(collector.threads) == 3
    finally:
        page.close()


def test_a_new_plan_is_rendered_at_once() -> None:
    r = Running(metrics_max_age_s=3600)
    try:
        assert "rightsizer_plan_available 1.0" in r.get("/metrics").text
        r.store.publish(sf.plan(recommended_replicas=7))  # same clock: only the plan changed
        assert 'bound="recommended",kind="Deployment",namespace="llm",workload="llama-3-8b-chat"} 7.0' \
            in r.get("/metrics").text
    finally:
        r.servers.stop(0.5)


def _closed_by_server(sock: socket.socket) -> bool:
    """Read until the server closes (True) or ``WAIT_S`` passes with the connection still open (False)."""
    sock.settimeout(WAIT_S)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True
    return True


@pytest.mark.parametrize("running", [{"idle_timeout_s": 0.5}], indirect=True)
@pytest.mark.parametrize("sent", [b"", b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: "])
def test_half_open_http_connections_are_closed(running: Running, sent: bytes) -> None:
    with socket.create_connection(("127.0.0.1", running.servers.ports["http"])) as sock:
        sock.sendall(sent)
        assert _closed_by_server(sock)
    assert running.get("/healthz").status_code == 200


@pytest.mark.parametrize("running", [{"idle_timeout_s": 0.5}], indirect=True)
def test_half_open_grpc_connections_are_closed(running: Running) -> None:
    with socket.create_connection(("127.0.0.1", running.servers.ports["grpc"])) as sock:
        assert _closed_by_server(sock)  # no HTTP/2 preface ever comes
    assert running.get_metrics().metricValues[0].metricValueFloat == 14.0


@pytest.mark.parametrize("running", [{"max_connections": 2}], indirect=True)
def test_connections_beyond_the_cap_are_refused(running: Running, caplog: pytest.LogCaptureFixture) -> None:
    address = ("127.0.0.1", running.servers.ports["http"])
    with caplog.at_level(logging.WARNING, logger="recommender.serve"):
        held = [socket.create_connection(address) for _ in range(2)]
        assert sf.eventually(lambda: _refused(address))
        for sock in held:
            sock.close()
        assert sf.eventually(lambda: requests.get(running.http + "/healthz", timeout=WAIT_S).status_code == 200)
    assert sum("connection limit" in r.getMessage() for r in caplog.records) == 1


def _refused(address: tuple[str, int]) -> bool:
    with socket.create_connection(address) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.settimeout(WAIT_S)
        try:
            return sock.recv(65536) == b""
        except ConnectionResetError:
            return True


@pytest.mark.parametrize("headers", [{"X-Big": "a" * 20_000}, {f"X-{i}": "a" for i in range(200)}])
def test_oversized_headers_are_one_line_and_431(running: Running, caplog: pytest.LogCaptureFixture,
                                               headers: dict[str, str]) -> None:
    with caplog.at_level(logging.DEBUG):
        r = running.get("/healthz", headers=headers)
    assert r.status_code == 431
    errors = [rec for rec in caplog.records if rec.levelno >= logging.INFO and rec.name.startswith(("aiohttp",
                                                                                                    "recommender"))]
    assert len(errors) == 1 and errors[0].exc_info is None and "\n" not in errors[0].getMessage()
    assert "431" in errors[0].getMessage()
    assert running.get("/healthz").status_code == 200


def test_a_tls_handshake_that_never_comes_is_closed(tmp_path: Path) -> None:
    pki = sf.make_pki(tmp_path)
    r = Running(idle_timeout_s=0.5, external_metrics=True, https_port=0, tls_cert=pki.server_cert,
                tls_key=pki.server_key)
    try:
        with socket.create_connection(("127.0.0.1", r.servers.ports["https"])) as sock:
            assert _closed_by_server(sock)
        assert requests.get(f"https://127.0.0.1:{r.servers.ports['https']}/healthz", verify=str(pki.ca),
                            timeout=WAIT_S).status_code == 200
    finally:
        r.servers.stop(0.5)
