"""``rightsizer serve``: plan once (or every ``--every``), then serve KEDA, the HPA and Prometheus.

Thin: settings from flags, the APIService ownership check, ``start_servers``, the pipeline, and a
wait for SIGTERM/SIGINT that stops the servers gracefully. Expected failures end with one line.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from recommender.cli.options import build_settings, fail, parse_duration, parse_time, pick_source, source_options
from recommender.core.errors import RightsizerError
from recommender.core.stopping import on_signals, wait

if TYPE_CHECKING:
    import threading

    from recommender.core.settings import Settings

log = logging.getLogger("recommender.serve")
_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)
FIRST_RETRY_S = 60.0  # until the first plan exists, try at least this often (Prometheus starting with us)


@click.command()
@source_options
@click.option("--forecast-horizon", default="24h", show_default=True, help="How far ahead to forecast demand.")
@click.option("--forecast-max", type=click.IntRange(min=0), default=100, show_default=True,
              help="Forecast at most this many workloads.")
@click.option("--host", default="0.0.0.0", show_default=True,
              help="Address the servers bind (0.0.0.0: every interface; gRPC and HTTP are plain text unless "
                   "--tls-cert).")
@click.option("--grpc-port", type=click.IntRange(0, 65535), default=9090, show_default=True,
              help="KEDA external scaler (gRPC).")
@click.option("--http-port", type=click.IntRange(0, 65535), default=8080, show_default=True,
              help="/healthz, /readyz, /metrics and the KEDA metrics-api endpoint.")
@click.option("--external-metrics", is_flag=True,
              help="Also serve external.metrics.k8s.io/v1beta1 over HTTPS (only where KEDA does not own it).")
@click.option("--https-port", type=click.IntRange(0, 65535), default=6443, show_default=True,
              help="Port of the external metrics API.")
@click.option("--tls-cert", type=_FILE, help="Server certificate (PEM): TLS for gRPC and HTTPS.")
@click.option("--tls-key", type=_FILE, help="Server private key (PEM).")
@click.option("--client-ca", type=_FILE, help="Require gRPC client certificates signed by this CA (mTLS).")
@click.option("--http-tls", is_flag=True, help="Serve the HTTP port over TLS too.")
@click.option("--requestheader-client-ca", type=_FILE,
              help="Serve the external metrics API only to the API server's front-proxy certificate signed by "
                   "this CA (its --requestheader-client-ca-file).")
@click.option("--requestheader-allowed-names", default="",
              help="Comma-separated CNs that front-proxy certificate may carry (empty: any).")
@click.option("--requestheader-from-cluster", is_flag=True,
              help="Read the front-proxy CA and settings from kube-system/extension-apiserver-authentication.")
@click.option("--stale-after", default="30m", show_default=True, help="Plan age that logs a staleness warning.")
@click.option("--fallback-after", default="2h", show_default=True,
              help="Plan age after which the scaler serves safe values (never zero).")
@click.option("--every", help="Re-run the pipeline this often (e.g. 10m); default: once.")
@click.option("--rate", type=float, default=20.0, show_default=True, help="Requests per second per client.")
@click.option("--burst", type=int, default=100, show_default=True, help="Requests a client may make at once.")
@click.option("--rate-per-workload", type=float, default=0.5, show_default=True,
              help="Requests per second per client added for each workload the plan scales (KEDA asks for all).")
@click.option("--metrics-max-age", type=click.FloatRange(min=0), default=5.0, show_default=True,
              help="Reuse a rendered /metrics for this many seconds of plan age (0: render every scrape).")
@click.option("--service", default=None,
              help="NAMESPACE/NAME of our Service (the APIService must point at it) "
                   "[default: $POD_NAMESPACE or gpu-rightsizer, /gpu-rightsizer].")
@click.option("--ports-file", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the bound ports here as JSON (useful with port 0).")
def serve(**opts: Any) -> None:
    """Serve forecasts and recommendations to KEDA (gRPC, metrics-api), the HPA and Prometheus."""
    from recommender.pipeline.planstore import PlanStore
    from recommender.serve import start_servers

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    serve_settings = _serve_settings(opts)
    settings = build_settings(opts)
    source, path = pick_source(opts)
    if serve_settings.external_metrics:
        _check_apiservice(settings, serve_settings.service_name, serve_settings.service_namespace)
    every = parse_duration(opts["every"]) if opts.get("every") else None
    store = PlanStore()
    try:
        kube_api = _kube_api(settings) if serve_settings.requestheader_from_cluster else None
        servers = start_servers(store, serve_settings, kube_api=kube_api)
    except RightsizerError as exc:
        fail(str(exc))
        return
    stop = on_signals()
    try:
        _first_plan(store, source, path, settings, opts, every)
        if opts.get("ports_file"):  # before the "serving" line, which tells a watcher the ports are known
            opts["ports_file"].write_text(json.dumps(servers.ports), encoding="utf-8")
        click.echo("serving " + " ".join(f"{k}={v}" for k, v in sorted(servers.ports.items())), err=True)
        until_stopped(stop, store, every, lambda: _replan(store, source, path, settings, opts))
    except RightsizerError as exc:
        fail(str(exc))
    finally:
        servers.stop(5.0)
    click.echo("stopped", err=True)


def _serve_settings(opts: dict[str, Any]) -> Any:
    from pydantic import ValidationError

    from recommender.serve import ServeSettings

    namespace, _, name = (opts.get("service") or f"{os.environ.get('POD_NAMESPACE', 'gpu-rightsizer')}/"
                          "gpu-rightsizer").partition("/")
    if not (namespace and name):
        fail(f"--service {opts.get('service')!r} is not NAMESPACE/NAME")
    try:
        return ServeSettings(
            host=opts["host"], grpc_port=opts["grpc_port"], http_port=opts["http_port"],
            external_metrics=opts["external_metrics"], https_port=opts["https_port"], tls_cert=opts.get("tls_cert"),
            tls_key=opts.get("tls_key"), client_ca=opts.get("client_ca"), http_tls=opts["http_tls"],
            requestheader_client_ca=opts.get("requestheader_client_ca"),
            requestheader_allowed_names=tuple(n.strip() for n in opts.get("requestheader_allowed_names", "").split(",")
                                              if n.strip()),
            requestheader_from_cluster=opts.get("requestheader_from_cluster", False),
            stale_after_s=parse_duration(opts["stale_after"]), fallback_after_s=parse_duration(opts["fallback_after"]),
            rate_per_s=opts["rate"], rate_burst=opts["burst"], rate_per_workload_s=opts["rate_per_workload"],
            metrics_max_age_s=opts["metrics_max_age"],
            service_name=name, service_namespace=namespace)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        fail(f"invalid serve setting{' ' + where if where else ''}: {err['msg'].removeprefix('Value error, ')}")
        raise AssertionError from exc  # unreachable: fail() exits


def _kube_api(settings: Settings) -> Any:
    from collectors.kubernetes import make_api_client

    return make_api_client(settings.kubernetes)


def _check_apiservice(settings: Settings, name: str, namespace: str) -> None:
    """Refuse to start when another provider owns external.metrics.k8s.io; go on when no cluster answers."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    from collectors.kubernetes import make_api_client
    from recommender.serve.apiservice import conflict, read_apiservice

    if not settings.kubernetes.enabled:
        log.warning("--no-kubernetes: not checking who owns external.metrics.k8s.io")
        return
    try:
        obj = read_apiservice(make_api_client(settings.kubernetes), settings.kubernetes.timeout_s)
    except (RightsizerError, ApiException, HTTPError, OSError) as exc:
        log.warning("could not read the APIService (%s): not checking who owns external.metrics.k8s.io",
                    str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        return
    why = conflict(obj, name, namespace)
    if why is not None:
        fail(why)


def _plan(store: Any, source: str, path: str | None, settings: Settings, opts: dict[str, Any]) -> None:
    from recommender.cli.app import collect
    from recommender.pipeline.run import run_once

    snap = collect(source, path, settings, parse_time(opts.get("end_time")))
    plan = run_once(snap, settings, snap.end)
    store.publish(plan)
    scaled = sum(r.scaling is not None for r in plan.recommendations)
    log.info("published a plan: %d workloads, %d with a scaling plan", len(plan.recommendations), scaled)


def _first_plan(store: Any, source: str, path: str | None, settings: Settings, opts: dict[str, Any],
                every: float | None) -> None:
    """Plan once before serving. With ``--every`` a failure (Prometheus not up yet) is a warning: the
    servers answer not ready (/readyz and the scaler 503/UNAVAILABLE) until a later run makes a plan;
    without it there is nothing to serve, so the failure ends the command."""
    if every is None:
        _plan(store, source, path, settings, opts)
        return
    try:
        _plan(store, source, path, settings, opts)
    except RightsizerError as exc:
        log.warning("no plan yet, serving not ready (503/UNAVAILABLE); trying again in %g s: %s",
                    _next_run_s(store, every), exc)


def until_stopped(stop: threading.Event, store: Any, every: float | None, replan: Callable[[], None]) -> None:
    """Run ``replan`` every ``every`` seconds (sooner while no plan exists; never without ``every``)
    until ``stop`` is set."""
    while not wait(stop, _next_run_s(store, every)):
        replan()


def _next_run_s(store: Any, every: float | None) -> float | None:
    """Seconds to the next run: ``every``, or sooner while no plan exists (at most FIRST_RETRY_S)."""
    if every is None or store.latest() is not None:
        return every
    return min(every, FIRST_RETRY_S)


def _replan(store: Any, source: str, path: str | None, settings: Settings, opts: dict[str, Any]) -> None:
    """A later run; a failure keeps the last plan (it goes stale, then falls back to safe values)."""
    try:
        _plan(store, source, path, settings, {**opts, "end_time": None} if source == "prometheus" else opts)
    except RightsizerError as exc:
        kept = "still serving the last plan" if store.latest() is not None else "no plan yet, serving not ready"
        log.warning("pipeline run failed, %s: %s", kept, exc)


