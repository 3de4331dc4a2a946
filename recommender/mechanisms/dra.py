"""DRA: GPUs handed out through ResourceClaims of the NVIDIA DRA driver (reference.md §5): DeviceClass
``gpu.nvidia.com`` for whole GPUs, ``mig.nvidia.com`` for MIG devices (a profile chosen by a CEL selector on the
``profile`` attribute), and the driver's opaque ``GpuConfig`` / ``MigDeviceConfig`` for MPS or time-slicing.

A ResourceClaimTemplate gives every pod its own claim, so its devices are the pod's alone: a MIG device or whole
GPUs. Replicas share one GPU only by naming one ResourceClaim (``resourceClaimName``) whose config sets MPS or
time-slicing; such a share is recommended as that claim. Read back from the claims the collector resolved
(``collectors.kubernetes.claims``); applied by writing claim objects and switching the pod template's
``resourceClaims`` reference (``recommender.controller.dra``), never by pod edits (``pod_edits`` is empty).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from recommender.core.catalogue import GpuModel
from recommender.core.inventory import Allocation, Share, Sharing
from recommender.mechanisms import MECHANISMS
from recommender.mechanisms.base import Base, Need, NoFit, PodEdits, PodView, ReadBack, Sized
from recommender.mechanisms.mig import fitting_profiles

DRIVER = "gpu.nvidia.com"  # the driver's name, and the attribute domain of its devices
GPU_CLASS, MIG_CLASS = "gpu.nvidia.com", "mig.nvidia.com"
GPU_CLASSES = frozenset({GPU_CLASS, MIG_CLASS})  # vfio.gpu.nvidia.com hands a GPU to a VM: not sized here
MPS, TIME_SLICING = "MPS", "TimeSlicing"
CONFIG_API = "resource.nvidia.com/v1beta1"
CLAIM_API = "resource.k8s.io/v1"
REQUEST = "gpu"  # the request's name in what we write


@dataclass(frozen=True)
class DraShare(Share):
    """``count`` devices of ``device_class`` (a MIG ``profile`` for ``mig.nvidia.com``), shared by the driver's
    ``strategy`` (MPS thread and pinned-memory limits) or not at all; ``shared``: one claim several pods name."""

    sharing: ClassVar[Sharing] = Sharing.DRA
    FLAT: ClassVar[tuple[str, ...]] = ("dra_device_class", "dra_count", "mig_profile", "dra_sharing",
                                       "mps_active_thread_pct", "mps_pinned_mem_mib", "dra_shared_claim")
    device_class: str | None
    count: int = 1
    profile: str | None = None
    strategy: str | None = None
    thread_pct: float | None = None
    pinned_mem_mib: float | None = None
    shared: bool = False

    @classmethod
    def from_flat(cls, values: Mapping[str, Any]) -> Share | None:
        """As :meth:`Share.from_flat`, with a missing count read as 1 and a missing ``shared`` as False: the
        snapshot file keeps only the flat fields every mechanism shares (mig_profile, mps_*), not the DRA ones."""
        got = super().from_flat(values)
        if not isinstance(got, DraShare):
            return got
        return replace(got, count=got.count or 1, shared=bool(got.shared))


def selector(profile: str) -> str:
    """The CEL expression that picks MIG devices of ``profile`` (the driver publishes it as an attribute)."""
    return f'device.attributes["{DRIVER}"].profile == "{profile}"'


def gpu_config(share: DraShare) -> dict[str, Any] | None:
    """The driver's opaque config for ``share``'s sharing (reference.md §5); None: unshared. MIG devices take a
    ``MigDeviceConfig``, whose sharing is MPS only."""
    if share.strategy not in (MPS, TIME_SLICING):
        return None
    sharing: dict[str, Any] = {"strategy": share.strategy}
    if share.strategy == MPS:
        mps: dict[str, Any] = {}
        if share.thread_pct is not None:
            mps["defaultActiveThreadPercentage"] = int(share.thread_pct)
        if share.pinned_mem_mib is not None:
            mps["defaultPinnedDeviceMemoryLimit"] = f"{share.pinned_mem_mib:.0f}Mi"
        sharing["mpsConfig"] = mps
    kind = "MigDeviceConfig" if share.device_class == MIG_CLASS else "GpuConfig"
    return {"driver": DRIVER, "parameters": {"apiVersion": CONFIG_API, "kind": kind, "sharing": sharing}}


def claim_spec(share: DraShare) -> dict[str, Any]:
    """A ResourceClaim's ``spec`` (resource.k8s.io/v1) that asks for ``share``."""
    exactly: dict[str, Any] = {"deviceClassName": share.device_class or GPU_CLASS, "count": max(1, share.count)}
    if share.profile:
        exactly["selectors"] = [{"cel": {"expression": selector(share.profile)}}]
    devices: dict[str, Any] = {"requests": [{"name": REQUEST, "exactly": exactly}]}
    config = gpu_config(share)
    if config is not None:
        devices["config"] = [{"requests": [REQUEST], "opaque": config}]
    return {"devices": devices}


def claim_object(share: DraShare, name: str, namespace: str | None = None) -> dict[str, Any]:
    """The claim object to write: a ResourceClaimTemplate (each pod its own devices), or for a share several pods
    hold at once a ResourceClaim they all name."""
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    if share.shared:
        return {"apiVersion": CLAIM_API, "kind": "ResourceClaim", "metadata": meta, "spec": claim_spec(share)}
    return {"apiVersion": CLAIM_API, "kind": "ResourceClaimTemplate", "metadata": meta,
            "spec": {"spec": claim_spec(share)}}


def claim_name(workload: str, share: DraShare) -> str:
    """``<workload>-gpu-1g-10gb`` / ``<workload>-gpu-mps-25`` / ``<workload>-gpu-2``: one per shape, so the old
    object stays until nothing names it (a DNS subdomain: at most 253 characters)."""
    if share.profile:
        shape = re.sub(r"[^a-z0-9]+", "-", share.profile.lower())
    elif share.strategy == MPS:
        shape = f"mps-{share.thread_pct or 100:.0f}"
    elif share.strategy == TIME_SLICING:
        shape = "ts"
    else:
        shape = str(max(1, share.count))
    return f"{workload}-gpu-{shape}"[:253].strip("-")


def how_to_apply_claim(alloc: Allocation, workload: str, namespace: str | None = None) -> dict[str, Any]:
    """The claim object and the pod template's ``resourceClaims`` entry that names it, for one workload."""
    share = alloc.share
    if not isinstance(share, DraShare):
        return {}
    name = claim_name(workload, share)
    ref = {"name": REQUEST, ("resourceClaimName" if share.shared else "resourceClaimTemplateName"): name}
    out: dict[str, Any] = {"claim": claim_object(share, name, namespace), "pod_resource_claims": [ref],
                           "container_resource_claims": [{"name": REQUEST}]}
    if share.shared:
        out["note"] = ("one ResourceClaim that every replica names: its replicas share that claim's GPU (all on one "
                       "node); a ResourceClaimTemplate would give each pod a GPU of its own")
    return out


def as_claim(placed: Allocation) -> tuple[Allocation, str | None]:
    """A placement by another mechanism asked for through a claim, for a workload that gets its GPUs by DRA: a MIG
    slice as a ``mig.nvidia.com`` device, whole GPUs as ``gpu.nvidia.com`` devices, an MPS share or time-slice as
    one claim its replicas share with the driver's sharing config. HAMi and KAI shares have no DRA form: kept as
    they are, with why."""
    match placed.sharing:
        case Sharing.MIG:
            share = DraShare(MIG_CLASS, max(1, placed.mig_count), placed.mig_profile)
        case Sharing.EXCLUSIVE:
            share = DraShare(GPU_CLASS, max(1, placed.gpus))
        case Sharing.MPS:
            share = DraShare(GPU_CLASS, 1, None, MPS, placed.mps_active_thread_pct, placed.mps_pinned_mem_mib, True)
        case Sharing.TIME_SLICING:
            share = DraShare(GPU_CLASS, 1, None, TIME_SLICING, shared=True)
        case Sharing.DRA | Sharing.NONE:
            return placed, None
        case _:
            return placed, f"DRA: a {placed.sharing.value} share has no ResourceClaim form; recommended as it is"
    how = f"a {share.device_class} ResourceClaim" + (" all replicas share" if share.shared else "Template")
    return replace(placed, sharing=Sharing.DRA, share=share, gpus=0 if share.profile else share.count), (
        f"DRA: asked through {how}")


class Dra(Base):
    name, sharing, read_rank = "dra", Sharing.DRA, 5  # a pod with GPU claims is a DRA pod
    share_type: type[Share] | None = DraShare
    writes_claims = True  # applied as a claim object and the pod template's reference to it (controller.dra)

    def size(self, need: Need, gpu: GpuModel) -> Sized | NoFit:
        """A MIG device where one smaller than the GPU holds the need (isolated), else whole GPUs."""
        if gpu.supports_mig:
            found = fitting_profiles(gpu, need.memory_mib, need.compute_frac)
            if found and gpu.share(found[0]) < 1.0:
                return Sized(DraShare(MIG_CLASS, 1, found[0].name), 0, gpu.share(found[0]), found[0].usable_mib)
        gpus = max(1, math.ceil(need.memory_mib / gpu.memory_mib - 1e-9), math.ceil(need.compute_frac - 1e-9))
        return Sized(DraShare(GPU_CLASS, gpus), gpus, float(gpus), float(gpu.memory_mib))

    def gpu_equivalents(self, alloc: Allocation, gpu: GpuModel | None) -> tuple[float, str | None] | None:
        share = alloc.share
        if not isinstance(share, DraShare):
            return None
        n = max(1, share.count)
        if share.profile:
            profile = gpu.profile(share.profile) if gpu else None
            if gpu and profile:
                return gpu.share(profile) * n, None
            slices = re.match(r"(\d+)g", share.profile)
            return (int(slices.group(1)) / 7 if slices else 1.0) * n, (
                f"MIG profile {share.profile} not in the catalogue for {alloc.gpu_model or 'an unknown GPU'}: share "
                "guessed from its SM slices")
        if share.shared and share.strategy == MPS and share.thread_pct:
            return share.thread_pct / 100 * n, None
        if share.shared:
            return (alloc.gpu_equivalents, None) if alloc.gpu_equivalents else None  # measured: pods per device
        return float(n), None  # a claim of its own: the devices are the pod's, whatever its containers share

    def fraction(self, alloc: Allocation) -> tuple[float, float] | None:
        share = alloc.share
        if not isinstance(share, DraShare) or not share.shared:
            return None
        if share.strategy == MPS:
            return (share.thread_pct or 100.0) / 100, share.pinned_mem_mib or 0.0
        return alloc.gpu_equivalents, alloc.gpu_equivalents * (alloc.device_memory_mib or 0.0)

    def label(self, alloc: Allocation) -> str:
        model = alloc.gpu_model or (f"unknown GPU ({alloc.gpu_product})" if alloc.gpu_product else "unknown GPU")
        devices = f"mig {alloc.mig_profile}" if alloc.mig_profile else f"{max(alloc.gpus, 1)}× {model}"
        pct = f" {alloc.mps_active_thread_pct:g}%" if alloc.mps_active_thread_pct is not None else ""
        shared = {"MPS": f", mps{pct}", "TimeSlicing": ", time-sliced"}.get(alloc.dra_sharing or "", "")
        return f"dra {alloc.dra_device_class or 'unknown class'}: {devices}{shared}"

    def sm_share(self, alloc: Allocation, gpu: GpuModel | None) -> tuple[float, str | None]:
        """A MIG device's SM slices; a shared claim's MPS thread cap, else the whole device shared."""
        if alloc.mig_profile:
            prof = gpu.profile(alloc.mig_profile) if gpu else None
            return (prof.shape.sm_slices / gpu.sm_slices, None) if gpu and prof else (
                alloc.gpu_equivalents, "SM share of the MIG device guessed")
        if alloc.dra_shared_claim and alloc.dra_sharing == "MPS" and alloc.mps_active_thread_pct:
            return alloc.mps_active_thread_pct / 100, None
        if alloc.dra_shared_claim:
            return 1.0, "engine activity is per device under GPU sharing: it includes the other tenants"
        return 1.0, None

    def not_applied(self, alloc: Allocation) -> str | None:
        """None for a share of an NVIDIA GPU class: the controller writes its claim object and switches the pod
        template's reference to it where the old claim is the workload's own (``controller.dra`` says why not
        elsewhere); a share of another class has no claim we write."""
        share = alloc.share
        if isinstance(share, DraShare) and (share.device_class or GPU_CLASS) in GPU_CLASSES:
            return None
        return "dra: not a claim for an NVIDIA GPU class: apply the claim in how_to_apply by hand"

    def leave(self, gpus: int) -> PodEdits:
        """Nothing on the pod: whole GPUs for a DRA pod are a ``gpu.nvidia.com`` claim (:func:`as_claim`)."""
        return PodEdits()

    def how_to_apply(self, alloc: Allocation) -> dict[str, Any]:
        """The claim under a placeholder name; the pipeline names it after the workload (``how_to_apply_claim``)."""
        return how_to_apply_claim(alloc, "WORKLOAD")

    def pod_edits(self, alloc: Allocation) -> PodEdits:
        return PodEdits()  # applied as claim objects and a resourceClaims reference, not as pod edits

    def read(self, pod: PodView) -> ReadBack | None:
        """The pod's GPU claims as one share: their devices added up; of differing classes, the first's."""
        if not pod.claims:
            return None
        first = pod.claims[0]
        if len({(c.device_class, c.profile, c.strategy) for c in pod.claims}) > 1:
            pod.notes.append(f"uses GPU claims of several kinds; sized by the first ({first.device_class})")
        count = sum(max(1, c.count) for c in pod.claims)
        share = DraShare(first.device_class, count, first.profile, first.strategy, first.thread_pct,
                         first.pinned_mem_mib, first.shared)
        return ReadBack(share, 0 if first.profile else count)


MECHANISMS.add("dra", Dra())
