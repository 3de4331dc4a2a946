"""A real HTTP Kubernetes API for tests: kmock's KubernetesEmulator on its own event loop in a thread.

The official ``kubernetes`` client is synchronous, so the emulator cannot share the test's thread; it
runs in a daemon thread and the client talks to it over real HTTP (see docs/testing.md). Seed objects
as manifests (``apiVersion``/``kind``/``metadata``), then list them through :meth:`KubeEmulator.api_client`
or :meth:`KubeEmulator.settings`.

Where kmock differs from a real API server, and how this fixture makes both behave alike:
- a resource with no objects answers 404 (a real server: an empty list) → the built-in resources
  we list are declared up front, so they answer ``[]``; a CRD such as LeaderWorkerSet is served only
  when ``crds=`` names it or an object of it is seeded, as on a cluster where it is (not) installed;
- the client asks ``/version/`` (trailing slash), which kmock does not route → served here;
- ``limit``/``continue`` and label/field selectors are ignored (everything in one page): code must
  not rely on selectors, and paging code sees a single page, as with a server that ignores ``limit``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any

import kmock
from kubernetes import client

from recommender.core.settings import Settings
from recommender.core.settings_sources import KubernetesSettings

# kind → (group/version/plural as kmock keys resources, namespaced)
BUILTIN: dict[str, tuple[str, bool]] = {
    "Deployment": ("apps/v1/deployments", True),
    "StatefulSet": ("apps/v1/statefulsets", True),
    "ReplicaSet": ("apps/v1/replicasets", True),
    "ControllerRevision": ("apps/v1/controllerrevisions", True),
    "DaemonSet": ("apps/v1/daemonsets", True),
    "Job": ("batch/v1/jobs", True),
    "CronJob": ("batch/v1/cronjobs", True),
    "Pod": ("v1/pods", True),
    "Node": ("v1/nodes", False),
    "Namespace": ("v1/namespaces", False),
    "ConfigMap": ("v1/configmaps", True),
    "HorizontalPodAutoscaler": ("autoscaling/v2/horizontalpodautoscalers", True),
}
CRDS: dict[str, tuple[str, bool]] = {
    "LeaderWorkerSet": ("leaderworkerset.x-k8s.io/v1/leaderworkersets", True),
    "ScaledObject": ("keda.sh/v1alpha1/scaledobjects", True),  # KEDA
    # DRA (resource.k8s.io/v1, Kubernetes 1.34+): served only where a test names it, as on a cluster with DRA
    "ResourceClaim": ("resource.k8s.io/v1/resourceclaims", True),
    "ResourceClaimTemplate": ("resource.k8s.io/v1/resourceclaimtemplates", True),
    "DeviceClass": ("resource.k8s.io/v1/deviceclasses", False),
    "ResourceSlice": ("resource.k8s.io/v1/resourceslices", False),
    # batch and training jobs; a kind another group also uses is keyed <kind>.<group> (its ``kind`` stays Job)
    "Job.batch.volcano.sh": ("batch.volcano.sh/v1alpha1/jobs", True),
    "PodGroup": ("scheduling.volcano.sh/v1beta1/podgroups", True),
    "PyTorchJob": ("kubeflow.org/v1/pytorchjobs", True),
    "MPIJob": ("kubeflow.org/v2beta1/mpijobs", True),
    "TrainJob": ("trainer.kubeflow.org/v1alpha1/trainjobs", True),
    "JobSet": ("jobset.x-k8s.io/v1alpha2/jobsets", True),
}
VERSION = {
    "major": "1", "minor": "30", "gitVersion": "v1.30.4", "gitCommit": "0" * 40, "gitTreeState": "clean",
    "buildDate": "2024-08-14T00:00:00Z", "goVersion": "go1.22.5", "compiler": "gc", "platform": "linux/amd64",
}
_START_TIMEOUT_S = 10.0


def resource_key(kind: str) -> str:
    """kmock's resource key (``apps/v1/deployments``) for a kind we know."""
    return {**BUILTIN, **CRDS}[kind][0]


class KubeEmulator:
    """Start with ``with KubeEmulator(objects) as kube:``; stopped (thread joined) on exit."""

    def __init__(self, objects: Iterable[Mapping[str, Any]] = (), crds: Iterable[str] = ()) -> None:
        self._objects = [dict(o) for o in objects]
        self._crds = tuple(crds)
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kmock", daemon=True)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._km: kmock.KubernetesEmulator | None = None
        self._error: BaseException | None = None
        self.url = ""

    def __enter__(self) -> KubeEmulator:
        self._thread.start()
        if not self._ready.wait(_START_TIMEOUT_S) or self._error is not None:
            raise RuntimeError(f"kmock emulator did not start: {self._error!r}")
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(_START_TIMEOUT_S)

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # surfaced by __enter__ instead of dying silently in the thread
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        async with kmock.KubernetesEmulator() as km, kmock.Server(km) as server:
            self._loop, self._stop, self._km = asyncio.get_running_loop(), asyncio.Event(), km
            for kind, (key, namespaced) in BUILTIN.items():
                km.resources[key] = kmock.ResourceInfo(kind=kind, namespaced=namespaced, verbs={"get", "list"})
            for kind in self._crds:
                key, namespaced = CRDS[kind]
                km.resources[key] = kmock.ResourceInfo(kind=kind.split(".")[0], namespaced=namespaced,
                                                       verbs={"get", "list"})
            km["get /version/"] << VERSION
            for obj in self._objects:
                _seed(km, obj)
            self.url = str(server.url).rstrip("/")
            self._ready.set()
            await self._stop.wait()

    def call(self, fn: Callable[[kmock.KubernetesEmulator], Any]) -> Any:
        """Run ``fn(emulator)`` on the emulator's loop (its state is not thread-safe) and return its result."""
        assert self._loop is not None and self._km is not None, "start the emulator first"
        km = self._km

        async def run() -> Any:
            return fn(km)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(_START_TIMEOUT_S)

    def add(self, *objects: Mapping[str, Any]) -> None:
        """Seed more objects while running."""
        def seed(km: kmock.KubernetesEmulator) -> None:
            for obj in objects:
                _seed(km, obj)

        self.call(seed)

    def refuse(self, kind: str, status: int = 403, message: str = "") -> None:
        """Answer every list of ``kind`` with ``status`` and a Status body, as RBAC or authn would."""
        reason = {401: "Unauthorized", 403: "Forbidden"}.get(status, "Error")
        body = {"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": status,
                "reason": reason, "message": message or reason, "metadata": {}}
        self.call(lambda km: km["list", kmock.resource(resource_key(kind))] << status << body)

    def delay(self, kind: str, seconds: float) -> None:
        """Make every list of ``kind`` hang for ``seconds`` before answering (client timeouts)."""

        async def hang() -> None:
            await asyncio.sleep(seconds)

        self.call(lambda km: km["list", kmock.resource(resource_key(kind))] << hang)

    def requests(self) -> list[str]:
        """``"GET /apis/apps/v1/namespaces/llm/deployments"`` for every request served so far."""
        seen: list[str] = self.call(lambda km: [f"{r.method.name} {r.url.path}" for r in km])
        return seen

    def api_client(self) -> client.ApiClient:
        return client.ApiClient(client.Configuration(host=self.url))

    def settings(self, namespaces: Iterable[str] = (), timeout_s: float = 5.0) -> Settings:
        return Settings(namespaces=tuple(namespaces), kubernetes=KubernetesSettings(host=self.url, timeout_s=timeout_s))


def _seed(km: kmock.KubernetesEmulator, obj: Mapping[str, Any]) -> None:
    key, namespaced = {**BUILTIN, **CRDS}[_known_kind(obj)]
    meta = obj["metadata"]
    km.objects[key, meta.get("namespace") if namespaced else None, meta["name"]] = dict(obj)


def _known_kind(obj: Mapping[str, Any]) -> str:
    """The BUILTIN/CRDS key of ``obj``: ``<kind>.<group>`` where its group's kind is keyed so."""
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    qualified = f"{obj['kind']}.{group}"
    return qualified if qualified in CRDS else str(obj["kind"])


# --- manifest builders: just enough structure to look like what the API server returns ---


def manifest(kind: str, namespace: str | None, name: str, spec: Mapping[str, Any] | None = None,
             labels: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None,
             owner: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """An object as listed: apiVersion/kind, metadata (uid, owner reference to ``owner``), spec."""
    group_version = resource_key(kind).rsplit("/", 1)[0]
    meta: dict[str, Any] = {"name": name, "uid": f"uid-{kind.lower()}-{name}", "labels": dict(labels or {})}
    if namespace is not None:
        meta["namespace"] = namespace
    if annotations:
        meta["annotations"] = dict(annotations)
    if owner is not None:
        meta["ownerReferences"] = [{
            "apiVersion": owner.get("apiVersion") or resource_key(_known_kind(owner)).rsplit("/", 1)[0],
            "kind": owner["kind"],
            "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
            "controller": True, "blockOwnerDeletion": True,
        }]
    return {"apiVersion": group_version, "kind": kind.split(".")[0], "metadata": meta, "spec": dict(spec or {})}


def container(name: str, image: str, limits: Mapping[str, Any] | None = None, command: list[str] | None = None,
              args: list[str] | None = None, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": image,
                         "resources": {"limits": dict(limits or {}), "requests": dict(limits or {})}}
    if command is not None:
        c["command"] = command
    if args is not None:
        c["args"] = args
    if env:
        c["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return c


def template(labels: Mapping[str, str], *containers: Mapping[str, Any], annotations: Mapping[str, str] | None = None,
             **spec: Any) -> dict[str, Any]:
    """A pod template: metadata (labels, annotations) and a spec with these containers plus ``spec`` keys."""
    meta: dict[str, Any] = {"labels": dict(labels)}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"metadata": meta, "spec": {"containers": list(containers), "restartPolicy": "Always", **spec}}


def pod_from(owner: Mapping[str, Any] | None, namespace: str, name: str, tmpl: Mapping[str, Any],
             node: str | None, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A pod as its controller would create it from ``tmpl``: scheduled on ``node`` (None: pending)."""
    meta = tmpl.get("metadata") or {}
    spec = {**tmpl["spec"], **({"nodeName": node} if node else {})}
    pod = manifest("Pod", namespace, name, spec, {**meta.get("labels", {}), **(labels or {})},
                   meta.get("annotations"), owner)
    pod["status"] = {"phase": "Running" if node else "Pending"}
    return pod


def gpu_node(name: str, product: str, memory_mib: int, count: int = 8,
             labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A GPU node with the labels GPU feature discovery sets, plus ``labels`` (sharing, MIG)."""
    gfd = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": product,
           "nvidia.com/gpu.memory": str(memory_mib), "nvidia.com/gpu.count": str(count)}
    node = manifest("Node", None, name, {}, {"kubernetes.io/hostname": name, **gfd, **(labels or {})})
    node["status"] = {"capacity": {"nvidia.com/gpu": str(count)}}
    return node
