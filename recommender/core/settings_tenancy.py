"""Tenancy: which workloads may share one GPU through a mechanism that isolates neither memory nor faults.

MPS, time-slicing, HAMi and KAI put several clients on one GPU with no hardware partition between them: a
client can exhaust or corrupt what the others rely on, and one client's fault can take every client down
(reference.md §3, §4, §6, §7). Whole GPUs and MIG slices isolate. Co-locating two tenants through a
non-isolating mechanism is therefore a security decision, and this group makes it explicit: by default only
workloads of the same namespace are one tenant. A group of ``MechanismSettings`` (``mechanisms.tenancy``);
the tenant of a workload is :func:`recommender.analysis.tenancy.tenant_of`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from recommender.core.annotations import VCLUSTER_MANAGED_BY_LABEL, VCLUSTER_NAMESPACE_LABEL


class VClusterSettings(BaseModel):
    """How the host-side copies of a vCluster's pods are told apart (the tool runs on the host cluster and
    never reads or writes a vCluster's own objects)."""

    model_config = ConfigDict(frozen=True, extra="forbid")  # a misspelt key in a settings file is an error

    enabled: bool = Field(
        True, description="Split a host namespace's workloads by the vCluster that synced them (and, with "
        "per_virtual_namespace, by their namespace inside it). This only narrows a tenant: it never joins "
        "workloads of different host namespaces."
    )
    managed_by_label: str = Field(
        VCLUSTER_MANAGED_BY_LABEL, min_length=1,
        description="Label the vCluster syncer puts on host pods: the vCluster's name (vcluster.com docs)."
    )
    namespace_label: str = Field(
        VCLUSTER_NAMESPACE_LABEL, min_length=1,
        description="Label the vCluster syncer puts on host pods: the pod's namespace inside the vCluster."
    )
    per_virtual_namespace: bool = Field(
        True, description="A vCluster's namespaces are tenants of their own, as host namespaces are; off: the "
        "whole vCluster is one tenant (within one host namespace or namespace group)."
    )


class TenancySettings(BaseModel):
    """Which workloads are one tenant, for mechanisms that isolate neither memory nor faults (MPS,
    time-slicing, HAMi, KAI): only one tenant's workloads are packed onto one GPU through them.

    Default: a namespace is a tenant. ``namespace_groups`` joins namespaces a cluster admin names together;
    ``label`` makes a workload label decide across namespaces. A label is written by whoever writes the
    workload, so with ``label`` set, a workload that copies another tenant's label value is packed beside
    that tenant's workloads: set it only where label values are controlled (an admission policy, a GitOps
    repository the tenants cannot write to). Workloads without the label stay tenants by namespace (group).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")  # a misspelt key in a settings file is an error

    label: str | None = Field(
        None, min_length=1, description="A workload label whose value names the tenant across namespaces "
        "(e.g. 'team'). Trusts whoever can set it: a copied value joins that tenant. None: namespaces decide."
    )
    namespace_groups: dict[str, tuple[str, ...]] = Field(
        default_factory=dict, description="Group name → namespaces that are one tenant (e.g. the host "
        "namespaces of one vCluster in multi-namespace mode). A namespace belongs to one group at most."
    )
    vcluster: VClusterSettings = Field(default_factory=VClusterSettings)

    @field_validator("namespace_groups")
    @classmethod
    def _one_group_each(cls, v: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        seen: dict[str, str] = {}
        for group, namespaces in v.items():
            if not group.strip():
                raise ValueError("a namespace group needs a name")
            for ns in namespaces:
                if ns in seen and seen[ns] != group:
                    raise ValueError(f"namespace {ns!r} is in groups {seen[ns]!r} and {group!r}: one group at most")
                seen[ns] = group
        return v

    def group_of(self, namespace: str) -> str | None:
        """The namespace group ``namespace`` belongs to, None when none."""
        return next((g for g, members in sorted(self.namespace_groups.items()) if namespace in members), None)
