"""Only one provider may serve external.metrics.k8s.io: refuse to start over someone else's APIService.

:func:`conflict` is pure (the APIService object as a dict); :func:`read_apiservice` is the Kubernetes
read, used by the CLI when a cluster is reachable. :func:`read_authentication_config` reads the
front-proxy settings the API server publishes (RoleBinding to extension-apiserver-authentication-reader).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

APISERVICE_NAME = "v1beta1.external.metrics.k8s.io"


def conflict(apiservice: Mapping[str, Any] | None, service_name: str, service_namespace: str) -> str | None:
    """Why we must not serve the external metrics API, or None when the APIService is absent or ours."""
    if apiservice is None:
        return None
    spec = apiservice.get("spec") or {}
    service = spec.get("service")
    if not service:
        return (f"APIService {APISERVICE_NAME} is served locally by the API server, not by a Service; "
                "only one provider may serve external.metrics.k8s.io")
    name, namespace = service.get("name"), service.get("namespace")
    if (name, namespace) == (service_name, service_namespace):
        return None
    return (f"APIService {APISERVICE_NAME} already points at {namespace}/{name} (KEDA's metrics server?), "
            f"not at {service_namespace}/{service_name}; only one provider may serve external.metrics.k8s.io: "
            "use KEDA's external scaler or metrics-api trigger instead, or delete that APIService first")


def read_apiservice(api: Any, timeout_s: float) -> dict[str, Any] | None:
    """The cluster's APIService object, None when it does not exist (a ``kubernetes`` ApiClient in ``api``).

    Other API errors propagate (ApiException): the caller decides whether to go on without the check."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        response: Any = client.ApiregistrationV1Api(api).read_api_service(
            APISERVICE_NAME, _preload_content=False, _request_timeout=timeout_s)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    body: dict[str, Any] = json.loads(response.data)
    return body


def read_authentication_config(api: Any, timeout_s: float) -> dict[str, str]:
    """``data`` of kube-system/extension-apiserver-authentication; any failure is a one-line ConfigError."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    from recommender.core.errors import ConfigError
    from recommender.serve.frontproxy import CONFIGMAP_NAME, CONFIGMAP_NAMESPACE

    where = f"ConfigMap {CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME}"
    try:
        response: Any = client.CoreV1Api(api).read_namespaced_config_map(
            CONFIGMAP_NAME, CONFIGMAP_NAMESPACE, _preload_content=False, _request_timeout=timeout_s)
        body = json.loads(response.data)
    except ApiException as exc:
        hint = " (bind the Role extension-apiserver-authentication-reader)" if exc.status == 403 else ""
        raise ConfigError(f"cannot read the {where}: HTTP {exc.status} {exc.reason}{hint}") from None
    except (HTTPError, OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the {where}: {str(exc).splitlines()[0] if str(exc) else exc!r}") from None
    data = body.get("data") if isinstance(body, dict) else None
    return {str(k): str(v) for k, v in (data or {}).items()}
