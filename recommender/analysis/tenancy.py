"""Which tenant a workload belongs to, for packing shares of mechanisms that isolate neither memory nor faults.

Pure: a function of the workload (its namespace and labels) and ``mechanisms.tenancy``. Two workloads may
share one GPU through MPS, time-slicing, HAMi or KAI only when their tenants' keys are equal. The rules, in
order (:class:`recommender.core.settings_tenancy.TenancySettings`):

1. ``label`` set and the workload carries it with a valid value: the label value is the tenant, across
   namespaces (trusts whoever writes the label: see the settings).
2. Otherwise the namespace, or the namespace group it is listed in.
3. With ``vcluster.enabled``, a workload the vCluster syncer labelled is narrowed further to its vCluster (and
   its namespace inside the vCluster): the host namespace stays part of the key, so a forged vCluster label
   only ever splits a namespace's tenant, never joins another namespace's.

A label value that is not a valid Kubernetes label value (a hand-written snapshot) is ignored with a note.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from recommender.core.inventory import Workload
from recommender.core.settings_tenancy import TenancySettings

_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")  # Kubernetes label value syntax


@dataclass(frozen=True)
class Tenant:
    """A tenant: ``key`` equal for workloads that may share a non-isolating GPU, ``why`` in words, and what
    was ignored on the way (``notes``)."""

    key: str
    why: str
    notes: tuple[str, ...] = ()


def _valid(value: str | None) -> bool:
    return value is not None and bool(_LABEL_VALUE.match(value))


def _base(workload: Workload, tenancy: TenancySettings) -> tuple[str, str]:
    namespace = workload.ref.namespace
    group = tenancy.group_of(namespace)
    if group is not None:
        return f"group:{group}", f"namespace group {group}"
    return f"namespace:{namespace}", f"namespace {namespace}"


def _vcluster(workload: Workload, tenancy: TenancySettings, notes: list[str]) -> tuple[str, str] | None:
    """(key suffix, words) of the vCluster that synced the workload; None when it carries no vCluster label."""
    vc = tenancy.vcluster
    name = workload.labels.get(vc.managed_by_label) if vc.enabled else None
    if name is None:
        return None
    if not _valid(name):
        notes.append(f"label {vc.managed_by_label}={name!r} is not a valid label value: a tenant of its own")
        return f"|workload:{workload.ref.key}", f"workload {workload.ref.key}"
    if not vc.per_virtual_namespace:
        return f"|vcluster:{name}", f"vCluster {name}"
    inner = workload.labels.get(vc.namespace_label)
    if not _valid(inner):
        notes.append(f"vCluster {name} workload without a valid {vc.namespace_label} label: a tenant of its own")
        return f"|vcluster:{name}|workload:{workload.ref.key}", f"vCluster {name} workload {workload.ref.key}"
    return f"|vcluster:{name}|vns:{inner}", f"vCluster {name} namespace {inner}"


def tenant_of(workload: Workload, tenancy: TenancySettings) -> Tenant:
    """The tenant ``workload`` belongs to under ``tenancy``."""
    notes: list[str] = []
    if tenancy.label is not None:
        value = workload.labels.get(tenancy.label)
        if _valid(value):
            return Tenant(f"label:{tenancy.label}={value}", f"label {tenancy.label}={value}")
        if value is not None:
            notes.append(f"label {tenancy.label}={value!r} is not a valid label value: tenant by namespace")
    key, why = _base(workload, tenancy)
    inner = _vcluster(workload, tenancy, notes)
    if inner is not None:
        return Tenant(key + inner[0], f"{inner[1]} in {why}", tuple(notes))
    return Tenant(key, why, tuple(notes))


def may_share(a: Workload, b: Workload, tenancy: TenancySettings) -> bool:
    """Whether ``a`` and ``b`` may share one GPU through a mechanism that isolates neither memory nor faults."""
    return tenant_of(a, tenancy).key == tenant_of(b, tenancy).key
