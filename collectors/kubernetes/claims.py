"""DRA: the GPUs a workload gets through ResourceClaims, resolved from resource.k8s.io objects.

A pod names its claims in ``spec.resourceClaims``: a ResourceClaimTemplate (``resourceClaimTemplateName``: the
API makes one claim per pod and names it in ``status.resourceClaimStatuses``) or a ResourceClaim several pods
may share (``resourceClaimName``). The claim's spec says what was asked (DeviceClass, count, a CEL selector on the
MIG ``profile``, the driver's opaque ``GpuConfig``); its ``status.allocation`` says which devices it got (driver,
pool, device), and the driver's ResourceSlices what those devices are (``productName``, ``profile``, ``memory``;
reference.md §5). Both API shapes are read: v1/v1beta2 (``exactly``, attributes on the device) and v1beta1 (flat
request, ``basic``). Listing is the only I/O; :func:`resolve` is pure. What cannot be resolved becomes one note
on the workload, and the workload keeps what could be read.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from kubernetes import client
from kubernetes.utils.quantity import parse_quantity

from collectors.kubernetes.client import KubernetesDenied, KubernetesError, KubernetesNotServed, list_objects
from collectors.kubernetes.parse import ParsedSpec
from recommender.core.annotations import cut, quoted
from recommender.core.inventory import Sharing
from recommender.core.progress import Progress
from recommender.core.resources import DRA_VERSIONS, RESOURCES
from recommender.mechanisms.base import Claim
from recommender.mechanisms.dra import DRIVER, GPU_CLASSES, MPS, TIME_SLICING

KINDS = ("DeviceClass", "ResourceSlice", "ResourceClaimTemplate", "ResourceClaim")
_PROFILE_SELECTOR = re.compile(r"""\.profile\s*==\s*["']([^"']+)["']""")
_MIB = Decimal(2**20)

Device = tuple[str, str, str]  # (driver, pool, device)


@dataclass
class DraObjects:
    """What resource.k8s.io returned, indexed; ``unread`` says why it could not be read (None: read, or not
    served: a cluster without DRA)."""

    claims: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # (namespace, name)
    templates: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    classes: dict[str, dict[str, Any]] = field(default_factory=dict)
    devices: dict[Device, dict[str, Any]] = field(default_factory=dict)  # {attributes, capacity}, flattened
    unread: str | None = None

    def add(self, kind: str, items: Sequence[Mapping[str, Any]]) -> None:
        for item in items:
            meta = item.get("metadata") or {}
            key = (meta.get("namespace") or "", meta.get("name") or "")
            if kind == "ResourceClaim":
                self.claims[key] = dict(item)
            elif kind == "ResourceClaimTemplate":
                self.templates[key] = dict(item)
            elif kind == "DeviceClass":
                self.classes[key[1]] = dict(item)
            elif kind == "ResourceSlice":
                self._add_slice(item)

    def _add_slice(self, item: Mapping[str, Any]) -> None:
        spec = item.get("spec") or {}
        driver, pool = str(spec.get("driver") or ""), str((spec.get("pool") or {}).get("name") or "")
        for dev in spec.get("devices") or []:
            body = dev.get("basic") or dev  # v1beta1 nests attributes and capacity under "basic"
            self.devices[(driver, pool, str(dev.get("name") or ""))] = {
                "attributes": _attributes(body.get("attributes") or {}, driver),
                "capacity": _attributes(body.get("capacity") or {}, driver)}


def _attributes(raw: Mapping[str, Any], driver: str) -> dict[str, Any]:
    """``{"gpu.nvidia.com/productName": {"string": "..."}}`` or unqualified names → ``{"productName": "..."}``
    (a name without a domain is the driver's); capacities ``{"value": "80Gi"}`` → ``"80Gi"``."""
    out: dict[str, Any] = {}
    for name, value in raw.items():
        domain, _, short = str(name).rpartition("/")
        if domain and domain != driver:
            continue
        if isinstance(value, Mapping):
            value = next((value[k] for k in ("string", "int", "version", "bool", "value") if k in value), None)
        out[short] = value
    return out


def list_dra(api: client.ApiClient, scopes: Sequence[str | None], timeout_s: float, progress: Progress) -> DraObjects:
    """DeviceClasses and ResourceSlices (cluster-wide), claims and templates per scope, at the newest version the
    server serves; nothing when it serves none (no DRA), ``unread`` when it denies them."""
    found = DraObjects()
    for version in DRA_VERSIONS:
        res = {k: replace(RESOURCES[k], version=version) for k in KINDS}
        try:
            found.add("DeviceClass", list_objects(api, res["DeviceClass"], None, timeout_s))
        except KubernetesNotServed:
            continue
        except KubernetesError as exc:
            return _unread(exc, progress)
        try:
            found.add("ResourceSlice", list_objects(api, res["ResourceSlice"], None, timeout_s))
            for namespace in scopes:
                for kind in ("ResourceClaimTemplate", "ResourceClaim"):
                    found.add(kind, list_objects(api, res[kind], namespace, timeout_s))
        except KubernetesError as exc:
            return _unread(exc, progress)
        return found
    return found


def _unread(exc: KubernetesError, progress: Progress) -> DraObjects:
    why = ("not allowed" if isinstance(exc, KubernetesDenied) else "failed") + f": {exc}"
    progress.log(f"DRA ResourceClaims not read ({why})")
    return DraObjects(unread=why)


def resolve(namespace: str, template: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], dra: DraObjects
            ) -> tuple[list[Claim], list[str]]:
    """The GPU requests of the claims ``template`` (a pod or pod template: ``metadata`` and ``spec``) names, and
    why any could not be resolved. A claim for no NVIDIA GPU class is not ours and is skipped; one that is not
    found at all may be a GPU's: kept with its class unknown, so the workload shows with the reason."""
    entries = ((template.get("spec") or {}).get("resourceClaims")) or []
    if not entries:
        return [], []
    if dra.unread is not None:
        return [], [f"uses DRA ResourceClaims, which could not be read ({dra.unread}): its GPUs are not known"]
    claims: list[Claim] = []
    notes: list[str] = []
    for entry in entries:
        claims += _entry(namespace, entry, pods, dra, notes)
    return claims, notes


def _entry(namespace: str, entry: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], dra: DraObjects,
           notes: list[str]) -> list[Claim]:
    """One ``resourceClaims`` entry: its spec from the template or named claim, its allocation from the claim."""
    entry_name = str(entry.get("name") or "")
    if entry.get("resourceClaimName"):
        name = str(entry["resourceClaimName"])
        claim = dra.claims.get((namespace, name))
        if claim is None:
            notes.append(f"ResourceClaim {name} not found: its devices are unknown")
            return [Claim(None, shared=True)]
        return _requests(claim.get("spec") or {}, claim, dra, notes, f"ResourceClaim {name}", shared=True)
    name = str(entry.get("resourceClaimTemplateName") or "")
    tmpl = dra.templates.get((namespace, name))
    generated = _generated(namespace, entry_name, pods, dra)
    if tmpl is None and generated is None:
        notes.append(f"ResourceClaimTemplate {name or '?'} not found and no claim made from it: its devices are "
                     "unknown")
        return [Claim(None)]
    spec = ((tmpl or {}).get("spec") or {}).get("spec") or (generated or {}).get("spec") or {}
    return _requests(spec, generated, dra, notes, f"claim {entry_name} (ResourceClaimTemplate {name})", shared=False)


def _generated(namespace: str, entry: str, pods: Sequence[Mapping[str, Any]], dra: DraObjects
               ) -> dict[str, Any] | None:
    """The claim the API made from a template for one of ``pods``: an allocated one first."""
    found = []
    for pod in pods:
        for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
            if status.get("name") == entry and status.get("resourceClaimName"):
                claim = dra.claims.get((namespace, str(status["resourceClaimName"])))
                if claim is not None:
                    found.append(claim)
    return next((c for c in found if (c.get("status") or {}).get("allocation")), found[0] if found else None)


def _request_body(request: Mapping[str, Any]) -> Mapping[str, Any]:
    """v1/v1beta2 ``exactly`` (or the first of ``firstAvailable``), else the v1beta1 request itself."""
    if request.get("exactly"):
        return request["exactly"]
    first = request.get("firstAvailable") or []
    return first[0] if first else request


def _requests(spec: Mapping[str, Any], claim: Mapping[str, Any] | None, dra: DraObjects, notes: list[str],
              where: str, shared: bool) -> list[Claim]:
    devices = spec.get("devices") or {}
    status = (claim or {}).get("status") or {}
    allocation = (status.get("allocation") or {}).get("devices") or {}
    results = allocation.get("results") or []
    configs = [*(allocation.get("config") or []), *(devices.get("config") or [])]
    out = []
    for request in devices.get("requests") or []:
        name, body = str(request.get("name") or ""), _request_body(request)
        device_class = body.get("deviceClassName")
        mine = [r for r in results if str(r.get("request") or "").split("/")[0] == name]
        if not _is_gpu(device_class, mine, dra):
            continue
        if device_class and device_class not in dra.classes:
            notes.append(f"{where}: DeviceClass {device_class} not found")
        got = [dra.devices.get((str(r.get("driver")), str(r.get("pool")), str(r.get("device")))) for r in mine]
        if claim is not None and not results:
            notes.append(f"{where}: not allocated yet; devices read from its request only")
        missing = [r for r, d in zip(mine, got, strict=True) if d is None]
        if missing:
            r = missing[0]
            notes.append(f"{where}: device {r.get('device')} of pool {r.get('pool')} ({r.get('driver')}) is in no "
                         "ResourceSlice: GPU model and memory unknown")
        device = next((d for d in got if d is not None), None)
        out.append(_claim(body, name, device, len(mine), configs, dra, notes, where, shared))
    return out


def _is_gpu(device_class: Any, results: Sequence[Mapping[str, Any]], dra: DraObjects) -> bool:
    """An NVIDIA GPU request: one of the driver's GPU classes, a class whose selectors name the driver, or
    devices the driver allocated."""
    if device_class in GPU_CLASSES or any(r.get("driver") == DRIVER for r in results):
        return True
    selectors = ((dra.classes.get(str(device_class)) or {}).get("spec") or {}).get("selectors") or []
    return any(f'"{DRIVER}"' in str((s.get("cel") or {}).get("expression", "")) for s in selectors)


def _claim(body: Mapping[str, Any], name: str, device: Mapping[str, Any] | None, allocated: int,
           configs: Sequence[Mapping[str, Any]], dra: DraObjects, notes: list[str], where: str, shared: bool
           ) -> Claim:
    attrs = (device or {}).get("attributes") or {}
    capacity = (device or {}).get("capacity") or {}
    if body.get("allocationMode") == "All":
        count = allocated or 1
        if not allocated:
            notes.append(f"{where}: asks for all devices of its class; counted as 1 until allocated")
    else:
        count = _int(body.get("count"), 1)
    selected = next((m.group(1) for s in body.get("selectors") or []
                     if (m := _PROFILE_SELECTOR.search(str((s.get("cel") or {}).get("expression", ""))))), None)
    profile = attrs.get("profile") or selected
    class_config = ((dra.classes.get(str(body.get("deviceClassName"))) or {}).get("spec") or {}).get("config") or []
    sharing = _sharing([*class_config, *configs], name, notes, where)
    mps = sharing.get("mpsConfig") or {}
    strategy = sharing.get("strategy") if sharing.get("strategy") in (MPS, TIME_SLICING) else None
    if sharing.get("strategy") and strategy is None:
        notes.append(f"{where}: unknown sharing strategy {quoted(str(sharing['strategy']))}; read as unshared")
    return Claim(
        device_class=str(body.get("deviceClassName")) if body.get("deviceClassName") else None,
        count=count, profile=str(profile) if profile else None, strategy=strategy,
        thread_pct=_percentage(mps.get("defaultActiveThreadPercentage"), notes, where) if strategy == MPS else None,
        pinned_mem_mib=_mib(mps.get("defaultPinnedDeviceMemoryLimit"), notes, where) if strategy == MPS else None,
        product=str(attrs["productName"]) if attrs.get("productName") else None,
        memory_mib=_mib(capacity.get("memory"), notes, where), shared=shared)


def _sharing(configs: Sequence[Mapping[str, Any]], request: str, notes: list[str], where: str) -> Mapping[str, Any]:
    """The last opaque config of the driver that applies to ``request`` (no ``requests``: all), its ``sharing``."""
    found: Mapping[str, Any] = {}
    for c in configs:
        opaque = c.get("opaque") or {}
        if opaque.get("driver") != DRIVER or (c.get("requests") and request not in c["requests"]):
            continue
        params = opaque.get("parameters")
        if not isinstance(params, Mapping):
            notes.append(f"{where}: the driver's opaque config is not an object; ignored")
            continue
        found = params.get("sharing") or {}
    return found if isinstance(found, Mapping) else {}


def _int(value: Any, default: int) -> int:
    try:
        return max(1, int(value)) if value is not None else default
    except (TypeError, ValueError):
        return default


def _percentage(value: Any, notes: list[str], where: str) -> float | None:
    """An MPS active-thread percentage: a number from 0 to 100; anything else is no cap, with a note."""
    if value is None:
        return None
    try:
        pct = float(value)
    except (TypeError, ValueError):
        pct = math.nan
    if not 0 <= pct <= 100:  # NaN too
        notes.append(f"{where}: defaultActiveThreadPercentage={cut(value)} is not a percentage from 0 to 100: ignored")
        return None
    return pct


def _mib(value: Any, notes: list[str], where: str) -> float | None:
    """A quantity (``80Gi``, bytes as an integer) in MiB."""
    if value is None:
        return None
    try:
        mib = float(Decimal(parse_quantity(value)) / _MIB)
    except (ValueError, ArithmeticError):
        mib = math.nan
    if not (math.isfinite(mib) and mib > 0):
        notes.append(f"{where}: {quoted(str(value))} is not a positive quantity of memory: ignored")
        return None
    return mib


def with_claims(parsed: ParsedSpec, claims: Sequence[Claim]) -> ParsedSpec:
    """A DRA allocation finished by its devices' ResourceSlice: product and memory where it told them; a MIG
    device's memory is not the node's whole GPU, so unknown when the slice is missing."""
    alloc = parsed.allocation
    if alloc.sharing is not Sharing.DRA or not claims:
        return parsed
    first = claims[0]
    memory = first.memory_mib if first.memory_mib is not None else (None if first.profile else alloc.device_memory_mib)
    return replace(parsed, allocation=replace(alloc, gpu_product=first.product or alloc.gpu_product,
                                              device_memory_mib=memory))
