"""Serve the latest plan to KEDA (gRPC external scaler, metrics-api), the HPA (external metrics API) and
Prometheus (``/metrics``).

:func:`start_servers` runs every server on one asyncio loop in a background thread, so the CLI and
the controller can keep their own main thread; ``Servers.stop`` shuts them down gracefully. Nothing
slow runs on that loop: ``/metrics`` renders on a worker thread (metricspage.py), and connections that
send nothing, or too much, are closed (listen.py and the gRPC options).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
from aiohttp import web
from prometheus_client.registry import CollectorRegistry

from recommender.core.errors import ConfigError
from recommender.pipeline.planstore import PlanStore, Published
from recommender.serve import http, listen
from recommender.serve.exporter import PlanCollector
from recommender.serve.lookup import Lookup, log
from recommender.serve.metricspage import MetricsPage
from recommender.serve.proto import externalscaler_pb2_grpc as pb_grpc
from recommender.serve.ratelimit import RateLimiter, budget
from recommender.serve.scaler import PlanSignal, ScalerServicer
from recommender.serve.settings import ServeSettings
from recommender.serve.tls import TlsReloader, load_front_proxy

__all__ = ["ServeSettings", "Servers", "start_servers"]
_START_TIMEOUT_S = 30.0


@dataclass
class Servers:
    """Running servers. ``ports`` maps ``grpc``/``http``/``https`` to the bound port (for port 0)."""

    ports: dict[str, int]
    registry: CollectorRegistry
    _loop: asyncio.AbstractEventLoop
    _thread: threading.Thread
    _stoppers: list[Callable[[float], Any]] = field(default_factory=list)
    _signal: PlanSignal | None = None

    def stop(self, grace_s: float = 5.0) -> None:
        """Stop accepting, let calls in flight finish for up to ``grace_s``, then end the thread."""
        if not self._thread.is_alive():
            return

        async def shutdown() -> None:
            if self._signal is not None:
                self._signal.close()  # open streams end instead of holding the grace period
            for stop in reversed(self._stoppers):
                await stop(grace_s)

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(grace_s + _START_TIMEOUT_S)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(_START_TIMEOUT_S)


def start_servers(store: PlanStore, settings: ServeSettings, *, health: Callable[[], bool] | None = None,
                  ready: Callable[[], bool] | None = None, registry: CollectorRegistry | None = None,
                  kube_api: Any = None) -> Servers:
    """Start the servers ``settings`` enables; raises ConfigError (one line) when one cannot start.

    ``health``/``ready`` back ``/healthz``/``/readyz`` (default: always healthy; ready once a plan is
    published). ``registry`` receives the plan collector (default: a fresh one, never the global).
    ``kube_api`` (a ``kubernetes`` ApiClient) is read only for ``requestheader_from_cluster``."""
    front = load_front_proxy(settings, kube_api) if settings.external_metrics else None
    tls = TlsReloader(settings, front, kube_api)
    if settings.external_metrics and front is None:
        log.warning("external metrics API: no requestheader client CA, so any client that reaches port %d "
                    "is served; set requestheader_client_ca or requestheader_from_cluster", settings.https_port)
    registry = registry if registry is not None else CollectorRegistry()
    lookup = Lookup(store, settings)
    registry.register(PlanCollector(lookup))
    checks = {"health": health or (lambda: True), "ready": ready or (lambda: store.latest() is not None)}
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="rightsizer-serve", daemon=True)
    thread.start()
    servers = Servers({}, registry, loop, thread)
    try:
        asyncio.run_coroutine_threadsafe(_start(servers, store, lookup, checks, tls),
                                         loop).result(_START_TIMEOUT_S)
    except BaseException:
        servers.stop(0.0)
        raise
    return servers


async def _start(servers: Servers, store: PlanStore, lookup: Lookup, checks: dict[str, http.Check],
                 tls: TlsReloader) -> None:
    settings = lookup.settings
    limiter = RateLimiter(settings.rate_per_s, settings.rate_burst)
    signal = PlanSignal(asyncio.get_running_loop())
    servers._signal = signal

    def published(latest: Published) -> None:
        limiter.resize(*budget(settings.rate_per_s, settings.rate_burst, settings.rate_per_workload_s,
                               sum(rec.scaling is not None for rec in latest.plan.recommendations)))
        with contextlib.suppress(RuntimeError):  # the loop closed after stop(): nothing left to wake
            signal.notify_threadsafe()

    store.subscribe(published)
    if (latest := store.latest()) is not None:
        published(latest)
    if settings.grpc_port is not None:
        servers.ports["grpc"] = await _grpc(servers, ScalerServicer(lookup, signal, limiter), settings,
                                            tls.grpc_credentials())
    if settings.http_port is not None:
        page = MetricsPage(servers.registry, store, settings.metrics_max_age_s)
        servers._stoppers.append(lambda _grace_s: _async(page.close))
        app = http.main_app(lookup, page, limiter, checks, settings.max_request_bytes)
        context = tls.context(fronted=False) if settings.http_tls else None
        servers.ports["http"] = await _site(servers, app, settings.http_port, context, settings)
    if settings.external_metrics:
        front = tls.front_proxy if tls.front is not None else None
        app = http.external_app(lookup, limiter, checks, settings.max_request_bytes, front)
        servers.ports["https"] = await _site(servers, app, settings.https_port, tls.context(fronted=True), settings)
    if settings.tls:
        _every(servers, settings.tls_reload_s, tls.reload)


def _every(servers: Servers, period_s: float, work: Callable[[], object]) -> None:
    """Run blocking ``work`` off the loop every ``period_s`` until the servers stop; a bug in one run is
    logged and the next run still comes (an exception would otherwise end the task unseen)."""
    async def loop() -> None:
        while True:
            await asyncio.sleep(period_s)
            try:
                await asyncio.get_running_loop().run_in_executor(None, work)
            except Exception:
                log.exception("periodic %s failed; trying again in %g s", getattr(work, "__qualname__", work), period_s)

    task = asyncio.get_running_loop().create_task(loop())

    async def stop(_grace_s: float) -> None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    servers._stoppers.append(stop)


async def _grpc(servers: Servers, servicer: ScalerServicer, settings: ServeSettings,
                credentials: grpc.ServerCredentials | None) -> int:
    size = settings.max_request_bytes
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", size),
                                      ("grpc.max_send_message_length", 4 * 1024 * 1024), *_grpc_limits(settings)])
    pb_grpc.add_ExternalScalerServicer_to_server(servicer, server)
    address = f"{settings.host}:{settings.grpc_port}"
    try:
        port = server.add_secure_port(address, credentials) if credentials else server.add_insecure_port(address)
    except RuntimeError as exc:
        raise ConfigError(f"gRPC cannot listen on {address}: {exc}") from None
    await server.start()
    servers._stoppers.append(server.stop)
    return port


async def _async(work: Callable[[], None]) -> None:
    work()


def _grpc_limits(settings: ServeSettings) -> list[tuple[str, int]]:
    """Handshake and idle timeouts, and keepalive pings that find peers gone without a word (a stream
    KEDA opened would otherwise be held for good)."""
    return [("grpc.server_handshake_timeout_ms", round(settings.idle_timeout_s * 1000)),
            ("grpc.max_connection_idle_ms", round(settings.grpc_idle_timeout_s * 1000)),
            ("grpc.keepalive_time_ms", 60_000), ("grpc.keepalive_timeout_ms", 20_000),
            ("grpc.http2.max_pings_without_data", 0), ("grpc.keepalive_permit_without_calls", 1)]


async def _site(servers: Servers, app: web.Application, port: int, tls: Any, settings: ServeSettings) -> int:
    """Listen on ``settings.host:port`` with the timeouts and connection cap of listen.py."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    try:
        server = await listen.listen(runner, settings.host, port, tls, settings)
    except OSError as exc:
        await runner.cleanup()
        raise ConfigError(f"HTTP cannot listen on {settings.host}:{port}: {exc.strerror or exc}") from None

    async def stop(_grace_s: float) -> None:
        server.close()
        await runner.cleanup()

    servers._stoppers.append(stop)
    return int(server.sockets[0].getsockname()[1])
