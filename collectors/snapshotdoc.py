"""snapshot.json's document (format 1): the flat mapping of the typed snapshot model to and from JSON.

The core model carries one tagged share per allocation (:class:`~recommender.core.inventory.Share`); the file
keeps the flat per-mechanism fields it has always had, in the same order, so files written before and after
the mechanisms became plugins are the same byte for byte. Workloads validate straight into the core
dataclasses through pydantic, with the same field names and error locations as the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, make_dataclass
from typing import Annotated, Any, get_type_hints

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from recommender.core.inventory import (
    MAX_DEVICES,
    MAX_GROUP_DEVICES,
    MAX_REPLICAS,
    Allocation,
    GpuNode,
    Sharing,
    VllmArgs,
    Workload,
)
from recommender.mechanisms import for_sharing

# What a replica can hold, checked as the file is read (a count beyond them is an edited or broken file: one line
# naming the field, not 10^20 GPUs summed into the fleet); the Kubernetes collector notes and drops the same.
Devices = Annotated[int, Field(ge=0, le=MAX_GROUP_DEVICES)]
GpuEquivalents = Annotated[float, Field(ge=0, le=MAX_GROUP_DEVICES, allow_inf_nan=False)]
Percentage = Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)]
Fraction = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
Size = Annotated[float, Field(ge=0, allow_inf_nan=False)]  # MiB, or a share of GPUs
Replicas = Annotated[int, Field(ge=0, le=MAX_REPLICAS)]


@dataclass(frozen=True)
class AllocationDoc:
    """An allocation as snapshot.json writes it: the share's parameters as flat fields (format 1), in this
    order; :func:`to_allocation` and :func:`from_allocation` map them to and from the tagged share."""

    sharing: Sharing
    gpus: Devices = 0
    mig_profile: str | None = None
    mig_count: Devices = 0
    gpu_equivalents: GpuEquivalents = 0.0
    gpu_model: str | None = None
    gpu_product: str | None = None
    device_memory_mib: float | None = None
    mps_active_thread_pct: Percentage | None = None
    mps_pinned_mem_mib: Size | None = None
    hami_gpumem_mib: Size | None = None
    hami_gpucores_pct: Percentage | None = None
    kai_gpu_fraction: Size | None = None
    volcano_vgpu_memory_mib: Size | None = None
    volcano_vgpu_cores_pct: Percentage | None = None
    runai_gpu_fraction: Fraction | None = None
    dra_device_class: str | None = None
    dra_count: int | None = None
    dra_sharing: str | None = None
    dra_shared_claim: bool | None = None
    vllm: VllmArgs | None = None
    replicas: Replicas = 1


SHARE_FIELDS = ("mig_profile", "mig_count", "mps_active_thread_pct", "mps_pinned_mem_mib", "hami_gpumem_mib",
                "hami_gpucores_pct", "kai_gpu_fraction", "volcano_vgpu_memory_mib", "volcano_vgpu_cores_pct",
                "runai_gpu_fraction", "dra_device_class", "dra_count", "dra_sharing", "dra_shared_claim")
# Workload with its allocation in the flat form: the same fields, names and error locations
WorkloadDoc = make_dataclass("Workload", [
    (f.name, AllocationDoc if f.name == "allocation" else get_type_hints(Workload)[f.name],
     field(default=f.default, default_factory=f.default_factory)) for f in fields(Workload)], frozen=True)


def to_allocation(doc: AllocationDoc) -> Allocation:
    """The flat fields back into one tagged share, of the type the allocation's mechanism registers."""
    values = {f.name: getattr(doc, f.name) for f in fields(doc)}
    mechanism = for_sharing(doc.sharing)
    kind = mechanism.share_type if mechanism is not None else None
    share = kind.from_flat(values) if kind is not None else None
    return Allocation(**{k: v for k, v in values.items() if k not in SHARE_FIELDS}, share=share)


def from_allocation(alloc: Allocation) -> AllocationDoc:
    """The tagged share spread over the flat fields (those of other mechanisms at their defaults)."""
    values = {f.name: getattr(alloc, f.name) for f in fields(alloc) if f.name != "share"}
    flat = alloc.share.flat() if alloc.share is not None else {}  # DRA's fields as the share has them: None off DRA
    shares: dict[str, Any] = {k: flat.get(k) if k.startswith("dra_") else getattr(alloc, k) for k in SHARE_FIELDS}
    return AllocationDoc(**values, **shares)


def workload_doc(w: Workload) -> Any:
    values = {f.name: getattr(w, f.name) for f in fields(w)}
    return WorkloadDoc(**values | {"allocation": from_allocation(w.allocation)})


def workload_from_doc(doc: Any) -> Workload:
    values = {f.name: getattr(doc, f.name) for f in fields(Workload)}
    return Workload(**values | {"allocation": to_allocation(doc.allocation)})


def _plausible_node(node: GpuNode) -> GpuNode:
    """A node's device and MIG device counts within what a node holds (a MIG planner would lay out 10^8 GPUs)."""
    counts = [node.gpus, *(n for gpu in node.mig_devices for n in gpu.values())]
    if not all(0 <= n <= MAX_DEVICES for n in counts):
        raise ValueError(f"a device count outside 0 to {MAX_DEVICES:,} (gpus {node.gpus}, MIG devices "
                         f"{[dict(g) for g in node.mig_devices][:4]})"[:200])
    return node


class SnapshotDoc(BaseModel):
    """Boundary schema of snapshot.json; workloads validate straight into the core dataclasses."""

    model_config = ConfigDict(extra="forbid")

    format_version: int
    start: str  # ISO-8601, parsed by datetime.fromisoformat so naive/aware times come back as written
    end: str
    step_s: float
    source: str = "file"
    warnings: tuple[str, ...] = ()
    workloads: tuple[WorkloadDoc, ...] = ()  # type: ignore[valid-type]
    nodes: tuple[Annotated[GpuNode, AfterValidator(_plausible_node)], ...] = ()


# workload fields added after format 1 was written: left out when absent
OPTIONAL_KEYS = ("autoscaler", "device_shared_with", "template_path")
# allocation fields added after format 1 was written (shares of later mechanisms): left out when absent
OPTIONAL_ALLOCATION_KEYS = ("volcano_vgpu_memory_mib", "volcano_vgpu_cores_pct", "runai_gpu_fraction",
                            "dra_device_class", "dra_count", "dra_sharing", "dra_shared_claim")
# node fields added after format 1 was written: left out when absent
OPTIONAL_NODE_KEYS = ("device_plugin_config", "device_plugin", "device_plugin_unknown")


def without_absent(doc: dict[str, Any]) -> dict[str, Any]:
    """The document less the newer workload, allocation and node fields that are None, so a snapshot written
    without them reads (and writes) byte for byte as before; reading fills in their defaults."""
    for w in doc.get("workloads") or []:
        for key in OPTIONAL_KEYS:
            if w.get(key) is None:
                w.pop(key, None)
        for key in OPTIONAL_ALLOCATION_KEYS:
            if isinstance(w.get("allocation"), dict) and w["allocation"].get(key) is None:
                w["allocation"].pop(key, None)
    for n in doc.get("nodes") or []:
        for key in OPTIONAL_NODE_KEYS:
            if n.get(key) is None:
                n.pop(key, None)
    return doc
