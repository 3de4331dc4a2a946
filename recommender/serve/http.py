"""aiohttp apps: health, ``/metrics``, KEDA's metrics-api JSON, and external.metrics.k8s.io/v1beta1.

Every route is a GET (nothing here changes state); bodies are capped by ``client_max_size``; each
client has a token bucket (429 when spent). Errors are JSON: ``{"error": ...}`` on our own
routes, a Kubernetes ``Status`` under ``/apis``. With a front proxy configured, every route of the
HTTPS app but the probes answers only the API server's proxy client certificate (frontproxy.py), and
the bucket is the end user's (``X-Remote-User``), not the API server's address: keyed by address, one
user looping on external metrics would spend the bucket the HPA controller reads through.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from recommender.serve import extmetrics, frontproxy
from recommender.serve.frontproxy import FrontProxy
from recommender.serve.lookup import Lookup, log
from recommender.serve.metricspage import MetricsPage
from recommender.serve.ratelimit import RateLimiter
from recommender.serve.targets import TargetError, WorkloadTarget, all_targets

Check = Callable[[], bool]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
LOOKUP: web.AppKey[Lookup] = web.AppKey("lookup", Lookup)
PAGE: web.AppKey[MetricsPage] = web.AppKey("metrics_page", MetricsPage)
CHECKS: web.AppKey[dict[str, Check]] = web.AppKey("checks", dict)
PROBES = frozenset({"/healthz", "/readyz"})  # kubelet probes carry no client certificate
CLIENT: web.RequestKey[str] = web.RequestKey("client", str)  # whom the rate limit counts, when the front proxy said


def _json(body: dict[str, Any], status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(body), status=status, content_type="application/json")


def _error(request: web.Request, status: int, message: str) -> web.Response:
    if request.path.startswith("/apis"):
        return _json(extmetrics.status(status, message), status)
    return _json({"error": message}, status)


def _over_limit(request: web.Request, limiter: RateLimiter, client: str | None) -> web.Response | None:
    """429 when ``client``'s bucket (the peer address when None) is spent; None when the request may go on."""
    if limiter.allow(client or request.remote or "unknown"):
        return None
    return _error(request, 429, "rate limit: too many requests from this client")


def make_middlewares(limiter: RateLimiter) -> list[Any]:
    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if (refused := _over_limit(request, limiter, request.get(CLIENT))) is not None:
            return refused
        try:
            return await handler(request)
        except TargetError as exc:
            return _error(request, extmetrics.HTTP_STATUS[exc.kind], str(exc))
        except web.HTTPException as exc:  # 404 no route, 405 not a GET, 413 body too large
            return _error(request, exc.status, exc.reason)
        except Exception:  # a bug: the traceback goes to the log, the client gets one line
            log.exception("error serving %s", request.path)
            return _error(request, 500, "internal error: see the server log")

    return [guard]


def front_proxy_middleware(fp: Callable[[], FrontProxy], limiter: RateLimiter) -> Any:
    """Refuse (401, a Kubernetes Status) what the API server's front proxy did not send; refusals spend
    the sender's address bucket (429 once spent), so a flood of them is braked as before authentication."""

    @web.middleware
    async def front_proxy(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in PROBES:
            return await handler(request)
        ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
        peercert = ssl_object.getpeercert() if ssl_object is not None else None
        outcome = frontproxy.authenticate(peercert, request.headers.items(), fp())
        if isinstance(outcome, frontproxy.Denied):
            if (refused := _over_limit(request, limiter, None)) is not None:
                return refused
            log.info("refused %s %s from %s: %s", request.method, request.path, request.remote, outcome.message)
            return _json(extmetrics.status(outcome.code, outcome.message), outcome.code)
        log.debug("%s %s for user %r groups %s", request.method, request.path_qs, outcome.name, list(outcome.groups))
        request[CLIENT] = f"user:{outcome.name}"
        return await handler(request)

    return front_proxy


def _app(lookup: Lookup, limiter: RateLimiter, checks: dict[str, Check], max_bytes: int,
         front_proxy: Callable[[], FrontProxy] | None = None) -> web.Application:
    # authentication first, so the rate limit knows the end user
    middlewares = ([front_proxy_middleware(front_proxy, limiter)] if front_proxy else []) + make_middlewares(limiter)
    app = web.Application(middlewares=middlewares, client_max_size=max_bytes)
    app[LOOKUP], app[CHECKS] = lookup, checks
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


def main_app(lookup: Lookup, page: MetricsPage, limiter: RateLimiter, checks: dict[str, Check],
             max_bytes: int) -> web.Application:
    """The plain port (8080): probes, Prometheus scrape (rendered off the loop: ``page``), KEDA metrics-api."""
    app = _app(lookup, limiter, checks, max_bytes)
    app[PAGE] = page
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/api/v1/keda/{namespace}/{name}", keda)
    return app


def external_app(lookup: Lookup, limiter: RateLimiter, checks: dict[str, Check], max_bytes: int,
                 front_proxy: Callable[[], FrontProxy] | None = None) -> web.Application:
    """The HTTPS port (6443) behind the APIService: discovery and ExternalMetricValueList; with
    ``front_proxy`` (the settings in force, asked per request: they are reloaded), for the API server alone."""
    app = _app(lookup, limiter, checks, max_bytes, front_proxy)
    app.router.add_get("/apis", group_list)
    app.router.add_get(f"/apis/{extmetrics.GROUP}", group)
    app.router.add_get(f"/apis/{extmetrics.GROUP_VERSION}", discovery)
    app.router.add_get(f"/apis/{extmetrics.GROUP_VERSION}/namespaces/{{namespace}}/{{metric}}", external_metric)
    return app


async def group_list(_: web.Request) -> web.Response:
    return _json(extmetrics.group_list())


async def group(_: web.Request) -> web.Response:
    return _json(extmetrics.group())


async def healthz(request: web.Request) -> web.Response:
    ok = request.app[CHECKS]["health"]()
    return _json({"status": "ok" if ok else "unhealthy"}, 200 if ok else 503)


async def readyz(request: web.Request) -> web.Response:
    ok = request.app[CHECKS]["ready"]()
    return _json({"status": "ready" if ok else "not ready"}, 200 if ok else 503)


async def metrics(request: web.Request) -> web.Response:
    body = await request.app[PAGE].body()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def keda(request: web.Request) -> web.Response:
    """KEDA ``metrics-api`` trigger: ``valueLocation: value``, ``targetValue`` = ``targetPerReplica``."""
    lookup = request.app[LOOKUP]
    kind = request.query.get("kind")
    name = request.match_info["name"]
    target = lookup.target(request.match_info["namespace"], f"{kind}/{name}" if kind else name)
    return _json(keda_body(target, lookup.store.age_s() or 0.0))


def keda_body(t: WorkloadTarget, age_s: float) -> dict[str, Any]:
    return {"namespace": t.ref.namespace, "kind": t.ref.kind, "workload": t.ref.name, "metric": t.metric,
            "value": t.value, "active": t.active, "targetPerReplica": t.target_per_replica,
            "desiredReplicas": t.desired_replicas, "minReplicas": t.min_replicas, "maxReplicas": t.max_replicas,
            "recommendedReplicas": t.recommended_replicas, "activationThreshold": t.activation_threshold,
            "state": str(t.state), "planAgeSeconds": round(age_s, 3), "reason": t.reason}


async def discovery(request: web.Request) -> web.Response:
    lookup = request.app[LOOKUP]
    try:
        published, age_s = lookup.current()
        names = [t.metric for t in all_targets(published.plan, age_s, lookup.settings)]
    except TargetError:
        names = []  # discovery must answer before the first plan, or the aggregator marks us unavailable
    return _json(extmetrics.resource_list(names))


async def external_metric(request: web.Request) -> web.Response:
    lookup = request.app[LOOKUP]
    selector = extmetrics.parse_selector(request.query.get("labelSelector", ""))
    published, age_s = lookup.current()
    target = lookup.target(request.match_info["namespace"], extmetrics.workload_of(selector))
    now = datetime.fromtimestamp(published.published_at + age_s, UTC)  # the store's clock: wall time in service
    window_s = max(1, round(published.plan.step_s))
    return _json(extmetrics.value_list(request.match_info["metric"], target, now, window_s))

