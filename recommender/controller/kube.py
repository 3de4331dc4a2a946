"""The controller's only door to the Kubernetes API: get, list, create, patch, delete and evict as JSON.

One generic REST helper instead of a dozen typed API classes: objects stay the API's own JSON (as in
``collectors.kubernetes``), every path is built the same way for core, built-in and custom groups, and
every failure becomes one :class:`KubeFailure` subclass with one line that says what failed. A failed
JSON-patch ``test`` op is a :class:`Conflict` (a real API server answers 422, kmock 500, an optimistic
``resourceVersion`` mismatch 409). A client made by :meth:`Kube.fenced` calls its fence before every
write it sends (create, patch, delete, evict), so no call site can forget to check the leader's lease.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from collectors.kubernetes.client import to_error
from recommender.core.errors import KubernetesError
from recommender.core.resources import RESOURCES, VOLCANO_JOB, Resource

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"


# the kinds this client reads and writes (recommender.core.resources holds every resource's group and version)
Kind = Resource
KINDS: dict[str, Kind] = {k: RESOURCES[k] for k in (
    "Deployment", "StatefulSet", "Pod", "Node", "Event", "ConfigMap", "Secret", "Lease", "PodDisruptionBudget",
    "HorizontalPodAutoscaler", "ScaledObject", "GPURightsizingPolicy", "ResourceClaimTemplate", "ResourceClaim",
    VOLCANO_JOB,
)}


class KubeFailure(KubernetesError):
    """An API call failed; ``status`` is the HTTP status (0: no answer)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class Conflict(KubeFailure):
    """The object changed since we read it: a ``test`` op or a resourceVersion precondition failed."""


class NotFound(KubeFailure):
    """404: the object (or the resource) does not exist."""


class TooManyRequests(KubeFailure):
    """429: e.g. an eviction a PodDisruptionBudget does not allow now."""


class NotLeader(KubeFailure):
    """A write refused before it was sent: this replica does not hold the leader's Lease with margin."""


class Kube:
    """JSON in, JSON out over one ``ApiClient``; ``timeout_s`` bounds every call."""

    def __init__(self, api: client.ApiClient, timeout_s: float = 10.0) -> None:
        self.api = api
        self.timeout_s = timeout_s
        self.fence: Callable[[str], None] | None = None  # called with the action before each write
        self.write_timeout_s = timeout_s

    def fenced(self, fence: Callable[[str], None], write_timeout_s: float) -> Kube:
        """A copy whose every write first calls ``fence(action)`` (which raises :class:`NotLeader` to stop it)
        and is bounded by ``write_timeout_s``, so a write sent while the lease is held lands before it expires."""
        out = copy.copy(self)
        out.fence, out.write_timeout_s = fence, min(self.timeout_s, write_timeout_s)
        return out

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any]:
        return self._call("GET", kind, namespace, name, action=f"read {kind} {_key(namespace, name)}")

    def list(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        page = self._call("GET", kind, namespace, None, action=f"list {kind} in {namespace or 'all namespaces'}")
        return list(page.get("items") or [])

    def create(self, kind: str, namespace: str | None, body: dict[str, Any]) -> dict[str, Any]:
        name = body.get("metadata", {}).get("name", "")
        return self._call("POST", kind, namespace, None, body=body, action=f"create {kind} {_key(namespace, name)}")

    def patch(self, kind: str, namespace: str | None, name: str, body: Any, *, subresource: str = "",
              merge: bool = False) -> dict[str, Any]:
        """A JSON patch (a list of ops) or, with ``merge``, a merge patch (a dict)."""
        return self._call("PATCH", kind, namespace, name, body=body, subresource=subresource,
                          content_type=MERGE_PATCH if merge else JSON_PATCH,
                          action=f"patch {kind} {_key(namespace, name)}{'/' + subresource if subresource else ''}")

    def delete(self, kind: str, namespace: str | None, name: str) -> dict[str, Any]:
        return self._call("DELETE", kind, namespace, name, action=f"delete {kind} {_key(namespace, name)}")

    def evict(self, namespace: str, pod: str) -> None:
        """The Eviction API: the server refuses (429) what a PodDisruptionBudget does not allow."""
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": namespace}}
        self._call("POST", "Pod", namespace, pod, body=body, subresource="eviction",
                   action=f"evict pod {namespace}/{pod}")

    def _call(self, method: str, kind: str, namespace: str | None, name: str | None, *, action: str,
              body: Any = None, subresource: str = "", content_type: str = "application/json") -> dict[str, Any]:
        path = _path(KINDS[kind], namespace, name, subresource)
        headers = {"Accept": "application/json", "Content-Type": content_type}
        timeout_s = self.timeout_s if method == "GET" else self.write_timeout_s
        if method != "GET" and self.fence is not None:
            self.fence(action)  # raises NotLeader: nothing is sent
        try:
            req = self.api.param_serialize(method=method, resource_path=path, header_params=headers, body=body,
                                           auth_settings=["BearerToken"])
            resp = self.api.call_api(*req, _request_timeout=timeout_s)
            data = resp.read()
            if not 200 <= resp.status < 300:
                raise ApiException(http_resp=resp)
            out: dict[str, Any] = json.loads(data) if data else {}
            return out
        except ApiException as exc:
            raise _failure(exc, self.api.configuration.host, action, timeout_s) from None
        except (HTTPError, ValueError) as exc:
            raise KubeFailure(str(to_error(exc, self.api.configuration.host, action, timeout_s))) from None


def _key(namespace: str | None, name: str) -> str:
    return f"{namespace}/{name}" if namespace else name


def _path(kind: Kind, namespace: str | None, name: str | None, subresource: str) -> str:
    base = f"/apis/{kind.group}/{kind.version}" if kind.group else f"/api/{kind.version}"
    if kind.namespaced and namespace:
        base += f"/namespaces/{namespace}"
    base += f"/{kind.plural}"
    if name:
        base += f"/{name}"
    if subresource:
        base += f"/{subresource}"
    return base


def _failure(exc: ApiException, host: str, action: str, timeout_s: float) -> KubeFailure:
    message = str(to_error(exc, host, action, timeout_s))
    status = int(exc.status or 0)
    if status in (409, 422) or (status == 500 and _test_failed(exc)):  # kmock: 500 on a failed test op
        return Conflict(f"{action}: the object changed since it was read (HTTP {status}); retried next cycle", status)
    if status == 404:
        return NotFound(message, status)
    if status == 429:
        return TooManyRequests(message, status)
    return KubeFailure(message, status)


def _test_failed(exc: ApiException) -> bool:
    text = str(exc.body or "")
    return "JsonPatchTestFailed" in text or "test operation" in text.lower()
