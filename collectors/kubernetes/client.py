"""Kubernetes API access: build a client from settings, list objects, turn failures into one clear line.

Objects are read as the API's own JSON (``_preload_content=False``) rather than the client's models:
the models validate strictly (one odd field fails a whole list) and deserialising them costs far more
than ``json.loads`` on clusters with thousands of pods. Lists are paged (``limit``/``continue``) so a
large cluster never needs one huge response; servers that ignore ``limit`` simply answer in one page.
"""

from __future__ import annotations

import json
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config import ConfigException
from urllib3.exceptions import HTTPError, MaxRetryError, NameResolutionError, NewConnectionError, SSLError
from urllib3.exceptions import TimeoutError as Urllib3Timeout

from recommender.core.errors import KubernetesError
from recommender.core.resources import Resource
from recommender.core.settings_sources import KubernetesSettings

PAGE_SIZE = 500  # objects per list page: big enough to be few calls, small enough for the API server
_MESSAGE_CHARS = 300  # how much of the server's own message we keep in our one-line error


class KubernetesDenied(KubernetesError):
    """401/403: our identity is unknown or RBAC forbids the call."""


class KubernetesNotServed(KubernetesError):
    """404 on a list: the API server does not serve this resource (e.g. a CRD that is not installed)."""


def make_api_client(settings: KubernetesSettings) -> client.ApiClient:
    """An ApiClient from ``host`` (tests), a kubeconfig, or the in-cluster service account, in that order.

    Read timeouts are not retried (a slow server would otherwise cost several timeouts); failed
    connections are retried twice because they are cheap and often transient.
    """
    cfg = client.Configuration()
    try:
        if settings.host and not settings.kubeconfig:
            cfg.host = settings.host
        elif settings.kubeconfig or settings.context:
            config.load_kube_config(settings.kubeconfig, settings.context, cfg, persist_config=False)
        else:
            _load_default(cfg)
    except (ConfigException, OSError, ValueError) as exc:
        raise KubernetesError(
            f"no usable Kubernetes configuration ({_one_line(str(exc))}); "
            "pass --kubeconfig/--context"
        ) from None
    if settings.host:
        cfg.host = settings.host
    cfg.retries = urllib3.Retry(total=2, connect=2, read=0, status=0, backoff_factor=0.2)
    return client.ApiClient(cfg)


def _load_default(cfg: client.Configuration) -> None:
    """In-cluster service account first (the controller), then ~/.kube/config (a laptop)."""
    try:
        config.load_incluster_config(client_configuration=cfg)
    except ConfigException:
        config.load_kube_config(client_configuration=cfg, persist_config=False)


def list_objects(
    api: client.ApiClient, resource: Resource, namespace: str | None, timeout_s: float
) -> list[dict[str, Any]]:
    """Every object of ``resource`` in ``namespace`` (None: all namespaces / cluster-scoped), as JSON dicts."""
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        page = _call(api, resource, namespace, timeout_s, token)
        items.extend(page.get("items") or [])
        token = (page.get("metadata") or {}).get("continue") or None
        if not token:
            return items


def _call(
    api: client.ApiClient, resource: Resource, namespace: str | None, timeout_s: float, token: str | None
) -> dict[str, Any]:
    """One list page. Core resources go through CoreV1Api; every other group through CustomObjectsApi,
    which builds the same REST paths for built-in groups (apps, batch) as for CRDs."""
    kw: dict[str, Any] = {"limit": PAGE_SIZE, "_preload_content": False, "_request_timeout": timeout_s}
    if token:
        kw["_continue"] = token
    try:
        if resource.group == "":
            response = _core_list(client.CoreV1Api(api), resource, namespace, kw)
        else:
            custom = client.CustomObjectsApi(api)
            g, v, p = resource.group, resource.version, resource.plural
            response = (custom.list_namespaced_custom_object(g, v, namespace, p, **kw) if namespace
                        else custom.list_cluster_custom_object(g, v, p, **kw))
        page: dict[str, Any] = json.loads(response.data)
        return page
    except (ApiException, HTTPError, ValueError) as exc:
        raise to_error(exc, api.configuration.host, _action(resource, namespace), timeout_s) from None


def _core_list(core: client.CoreV1Api, resource: Resource, namespace: str | None, kw: dict[str, Any]) -> Any:
    if resource.plural == "nodes":
        return core.list_node(**kw)
    if resource.plural == "pods":
        return core.list_namespaced_pod(namespace, **kw) if namespace else core.list_pod_for_all_namespaces(**kw)
    if resource.plural == "configmaps" and namespace:
        return core.list_namespaced_config_map(namespace, **kw)
    raise ValueError(f"core resource {resource.plural!r} is not listed by this collector")


def server_version(api: client.ApiClient, timeout_s: float) -> str:
    """The API server's gitVersion (e.g. ``v1.30.2``); raises KubernetesError when it cannot be reached."""
    try:
        # the stubs promise a VersionInfo, but _preload_content=False returns the raw HTTP response
        response: Any = client.VersionApi(api).get_code(_preload_content=False, _request_timeout=timeout_s)
        return str(json.loads(response.data).get("gitVersion", "unknown"))
    except (ApiException, HTTPError, ValueError) as exc:
        raise to_error(exc, api.configuration.host, "read the server version", timeout_s) from None


def reachable(settings: KubernetesSettings, api_client: client.ApiClient | None = None) -> bool:
    """True when the API server answers; for deciding whether to use it at all (never raises)."""
    try:
        server_version(api_client or make_api_client(settings), settings.timeout_s)
    except KubernetesError:
        return False
    return True


def _action(resource: Resource, namespace: str | None) -> str:
    if not resource.namespaced:
        return f"list {resource.rbac_name}"
    return f"list {resource.rbac_name} in " + (f"namespace {namespace}" if namespace else "all namespaces")


def to_error(exc: Exception, host: str, action: str, timeout_s: float) -> KubernetesError:
    """One line that says what failed, where, and what to do about it."""
    if isinstance(exc, ApiException):
        return _api_error(exc, host, action)
    reason = exc.reason if isinstance(exc, MaxRetryError) and exc.reason is not None else exc
    # NewConnectionError subclasses ConnectTimeoutError in urllib3, so "refused" must be tested first.
    if isinstance(reason, NameResolutionError):
        return KubernetesError(f"Kubernetes API at {host} is unreachable (unknown host name) to {action}")
    if isinstance(reason, NewConnectionError):
        why = "connection refused" if "refused" in str(reason).lower() else _one_line(str(reason))
        return KubernetesError(f"Kubernetes API at {host} is unreachable ({why}) to {action}")
    if isinstance(reason, Urllib3Timeout):
        return KubernetesError(f"Kubernetes API at {host} did not answer within {timeout_s:g} s (timeout) to {action}")
    if isinstance(reason, SSLError):
        return KubernetesError(f"TLS with the Kubernetes API at {host} failed to {action}: {_one_line(str(reason))}")
    if isinstance(reason, HTTPError | OSError):
        return KubernetesError(f"Kubernetes API at {host} is unreachable ({_one_line(str(reason))}) to {action}")
    return KubernetesError(f"Kubernetes API at {host} sent an unreadable answer to {action}: {_one_line(str(exc))}")


def _api_error(exc: ApiException, host: str, action: str) -> KubernetesError:
    detail = _server_message(exc)
    suffix = f": {detail}" if detail else ""
    if exc.status == 401:
        return KubernetesDenied(
            f"Kubernetes API at {host} rejected our credentials (401 Unauthorized) to {action}; "
            f"check the kubeconfig user or token{suffix}"
        )
    if exc.status == 403:
        return KubernetesDenied(f"Kubernetes RBAC forbids us to {action} (403 Forbidden){suffix}")
    if exc.status == 404:
        return KubernetesNotServed(f"Kubernetes API at {host} does not serve the resource to {action} (404)")
    return KubernetesError(f"Kubernetes API at {host} failed to {action}: HTTP {exc.status} {exc.reason}{suffix}")


def _server_message(exc: ApiException) -> str:
    """The ``message`` of the Status object the API server sends with an error, trimmed to one line."""
    try:
        status = json.loads(exc.body or "")
    except ValueError:
        return ""
    return _one_line(str(status.get("message", ""))) if isinstance(status, dict) else ""


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _MESSAGE_CHARS else flat[: _MESSAGE_CHARS - 1] + "…"
