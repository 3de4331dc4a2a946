"""kmock for the controller: the read-only fixture of ``kubefixture`` plus what writes need.

Adds, on top of :class:`tests.kubefixture.KubeEmulator` (whose behaviour is unchanged):
- the resources the controller writes (Leases, Events, ConfigMaps, PodDisruptionBudgets and the
  ``GPURightsizingPolicy`` CRD), declared so that they list as ``[]`` when empty;
- the Eviction subresource (kmock answers 404 to ``POST pods/NAME/eviction``): deletes the pod, or
  answers 429 for pods named in ``pdb_blocked``, as a real server does when a PodDisruptionBudget
  allows no disruption;
- ``fail(method, path_regex, status)`` / ``hang(...)``: answer a request with an error or after a delay
  *before* kmock applies it (kmock's own reactions run after it has already changed its objects, so
  a 403 set with them would still write).
kmock gives objects no ``resourceVersion``; the controller then guards with ``test`` ops alone.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import aiohttp.web
import attrs
import kmock
from kmock._internal.k8s import KubernetesError

from recommender.controller.kube import Kube
from tests.kubefixture import BUILTIN, CRDS, VERSION, KubeEmulator, _known_kind

WRITABLE: dict[str, tuple[str, bool]] = {
    "Lease": ("coordination.k8s.io/v1/leases", True),
    "Event": ("v1/events", True),
    "ConfigMap": ("v1/configmaps", True),
    "Secret": ("v1/secrets", True),
    "PodDisruptionBudget": ("policy/v1/poddisruptionbudgets", True),
    "GPURightsizingPolicy": ("rightsizer.io/v1alpha1/gpurightsizingpolicies", True),
    "ScaledObject": ("keda.sh/v1alpha1/scaledobjects", True),
}
ALL = {**BUILTIN, **CRDS, **WRITABLE}


def _seed_any(km: kmock.KubernetesEmulator, obj: dict[str, Any]) -> None:
    key, namespaced = ALL[_known_kind(obj)]
    meta = obj["metadata"]
    km.objects[key, meta.get("namespace") if namespaced else None, meta["name"]] = dict(obj)


@attrs.define(kw_only=True)
class WritingEmulator(kmock.KubernetesEmulator):
    faults: list[tuple[str, re.Pattern[str], int, float]] = attrs.field(factory=list)
    pdb_blocked: set[str] = attrs.field(factory=set)

    async def _handle(self, request: Any) -> aiohttp.web.StreamResponse:
        path, method = request.url.path, str(getattr(request.method, "value", request.method)).upper()
        for m, pattern, status, delay in list(self.faults):
            if m == method and pattern.search(path):
                if delay:
                    await asyncio.sleep(delay)
                if status:
                    reason = {403: "Forbidden", 409: "Conflict"}.get(status, "Error")
                    return await self._render_error(KubernetesError(status, reason, f"{reason}: {method} {path}",
                                                                    {"injected": True}))
        if method == "POST" and request.subresource == "eviction":
            return await self._evict(request)
        return await super()._handle(request)

    async def _evict(self, request: Any) -> aiohttp.web.StreamResponse:
        key = (kmock.resource("v1/pods"), request.namespace, request.name)
        if request.name in self.pdb_blocked:
            return await self._render_error(KubernetesError(429, "TooManyRequests",
                                                            "Cannot evict pod as it would violate the pod's "
                                                            "disruption budget.", {"causes": []}))
        if key not in self.objects or self.objects[key].deleted:
            return await self._render_error(KubernetesError(404, "NotFound", "pod not found", {}))
        self.objects[key].delete()
        return aiohttp.web.json_response({"apiVersion": "v1", "kind": "Status", "status": "Success"}, status=201)


def _writing(km: kmock.KubernetesEmulator) -> WritingEmulator:
    assert isinstance(km, WritingEmulator)
    return km


class WriteCluster(KubeEmulator):
    """``with WriteCluster(objects) as kube:`` — then ``kube.kube()`` is the controller's client."""

    def __enter__(self) -> WriteCluster:
        super().__enter__()
        return self

    async def _serve(self) -> None:
        async with WritingEmulator() as km, kmock.Server(km) as server:
            self._loop, self._stop, self._km = asyncio.get_running_loop(), asyncio.Event(), km
            for kind, (key, namespaced) in {**BUILTIN, **WRITABLE}.items():
                if kind == "ScaledObject" and "ScaledObject" not in self._crds:
                    continue  # KEDA not installed unless asked for
                km.resources[key] = kmock.ResourceInfo(kind=kind, namespaced=namespaced,
                                                       verbs={"get", "list", "create", "patch", "delete"})
            for kind in self._crds:  # DRA kinds, batch CRDs and others a test names: served, and writable
                if kind in CRDS and kind not in WRITABLE:
                    key, namespaced = CRDS[kind]
                    km.resources[key] = kmock.ResourceInfo(kind=kind.split(".")[0], namespaced=namespaced,
                                                           verbs={"get", "list", "create", "patch", "delete"})
            km["get /version/"] << VERSION
            for obj in self._objects:
                _seed_any(km, obj)
            self.url = str(server.url).rstrip("/")
            self._ready.set()
            await self._stop.wait()

    def add(self, *objects: Any) -> None:
        def seed(km: kmock.KubernetesEmulator) -> None:
            for o in objects:
                _seed_any(km, o)

        self.call(seed)

    def kube(self, timeout_s: float = 5.0) -> Kube:
        return Kube(self.api_client(), timeout_s)

    def obj(self, kind: str, namespace: str | None, name: str) -> dict[str, Any]:
        """The emulator's current object (read directly, not through the API)."""
        key = ALL[kind][0]
        return dict(self.call(lambda km: km.objects[key, namespace, name].raw))

    def exists(self, kind: str, namespace: str | None, name: str) -> bool:
        res = kmock.resource(ALL[kind][0])
        return bool(self.call(lambda km: any(k == (res, namespace, name) and not o.deleted
                                             for k, o in km.objects.items())))

    def edit(self, kind: str, namespace: str | None, name: str, patch: dict[str, Any]) -> None:
        """Someone else's edit (a merge patch applied inside the emulator)."""
        key = ALL[kind][0]
        self.call(lambda km: km.objects[key, namespace, name].patch(patch))

    def fail(self, method: str, path: str, status: int) -> None:
        self.call(lambda km: _writing(km).faults.append((method, re.compile(path), status, 0.0)))

    def hang(self, method: str, path: str, seconds: float) -> None:
        self.call(lambda km: _writing(km).faults.append((method, re.compile(path), 0, seconds)))

    def heal(self) -> None:
        self.call(lambda km: _writing(km).faults.clear())

    def block_eviction(self, pod: str) -> None:
        self.call(lambda km: _writing(km).pdb_blocked.add(pod))

    def allow_eviction(self, pod: str) -> None:
        self.call(lambda km: _writing(km).pdb_blocked.discard(pod))

    def events(self, namespace: str) -> list[dict[str, Any]]:
        return list(self.call(lambda km: [o.raw for (r, ns, _), o in km.objects.items()
                                          if r.plural == "events" and ns == namespace and not o.deleted]))


class EditedMidway(Kube):
    """Someone merges ``edit`` into the object between our read and our JSON patch (once): a concurrent edit."""

    def __init__(self, cluster: WriteCluster, kind: str, namespace: str, name: str, edit: dict[str, Any]) -> None:
        super().__init__(cluster.api_client(), 5.0)
        self.cluster, self.target, self.edit, self.armed = cluster, (kind, namespace, name), edit, True

    def patch(self, kind: str, namespace: str | None, name: str, body: Any, **kw: Any) -> dict[str, Any]:
        if self.armed and (kind, namespace, name) == self.target and isinstance(body, list):
            self.armed = False
            self.cluster.edit(*self.target, self.edit)
        return super().patch(kind, namespace, name, body, **kw)
