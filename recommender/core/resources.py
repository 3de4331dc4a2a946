"""Every Kubernetes API resource the project reads or writes: one table, kind → group, version, plural.

The collectors list from it, the controller's client builds its REST paths from it, and the policy
resource checks a workload's ``apiVersion`` against it, so a resource's group or version is written once.
Pure data: no Kubernetes client here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Resource:
    """One API resource, with the names RBAC and error messages use."""

    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def rbac_name(self) -> str:
        """``deployments.apps`` / ``pods``: how ``kubectl auth can-i`` and RBAC rules name it."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


RESOURCES: dict[str, Resource] = {r.kind: r for r in (
    Resource("apps", "v1", "deployments", "Deployment"),
    Resource("apps", "v1", "statefulsets", "StatefulSet"),
    Resource("apps", "v1", "replicasets", "ReplicaSet"),
    Resource("apps", "v1", "controllerrevisions", "ControllerRevision"),
    Resource("batch", "v1", "jobs", "Job"),
    Resource("batch", "v1", "cronjobs", "CronJob"),
    Resource("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet"),
    Resource("", "v1", "pods", "Pod"),
    Resource("", "v1", "nodes", "Node", namespaced=False),
    Resource("", "v1", "events", "Event"),
    Resource("", "v1", "configmaps", "ConfigMap"),
    Resource("", "v1", "secrets", "Secret"),
    Resource("coordination.k8s.io", "v1", "leases", "Lease"),
    Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget"),
    Resource("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler"),
    Resource("keda.sh", "v1alpha1", "scaledobjects", "ScaledObject"),
    Resource("rightsizer.io", "v1alpha1", "gpurightsizingpolicies", "GPURightsizingPolicy"),
    Resource("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim"),
    Resource("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate"),
    Resource("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", namespaced=False),
    Resource("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", namespaced=False),
    # batch and training workloads (optional: CRDs that may not be installed); read-only
    Resource("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup"),
    Resource("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob"),
    Resource("kubeflow.org", "v2beta1", "mpijobs", "MPIJob"),
    Resource("trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob"),
    Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"),
)}
# DRA (resource.k8s.io) is GA in v1 since Kubernetes 1.34; older servers serve only these, tried in order. v1beta1
# nests a request's class, count and selectors directly and a device's attributes under ``basic``; v1beta2 and v1
# put them under ``exactly`` and on the device itself (the collector reads both shapes).
DRA_VERSIONS = ("v1", "v1beta2", "v1beta1")
# a kind another group also uses is keyed ``<kind>.<group>`` (kubectl's spelling), so a Volcano Job is never
# taken for (or patched as) a batch/v1 Job
VOLCANO_JOB = "Job.batch.volcano.sh"
RESOURCES[VOLCANO_JOB] = Resource("batch.volcano.sh", "v1alpha1", "jobs", "Job")
# workloads that run to completion: the classifier's batch prior (an explicit rightsizer.io/class still wins)
BATCH_WORKLOAD_KINDS = frozenset({"Job", "CronJob", VOLCANO_JOB, "PodGroup", "PyTorchJob", "MPIJob", "TrainJob",
                                  "JobSet"})


def kind_key(resource: Resource) -> str:
    """The key ``resource`` has in :data:`RESOURCES`: its kind, or ``<kind>.<group>`` where the kind is taken."""
    return resource.kind if RESOURCES.get(resource.kind) is resource else f"{resource.kind}.{resource.group}"


def owner_kind(api_version: str, kind: str) -> str:
    """The :data:`RESOURCES` key an ownerReference (``apiVersion``, ``kind``) names: ``<kind>.<group>`` where
    another group's resource holds the plain kind, the kind otherwise (also for kinds not in the table)."""
    group = api_version.rpartition("/")[0] if "/" in api_version else ""
    plain = RESOURCES.get(kind)
    if plain is None or plain.group == group or f"{kind}.{group}" not in RESOURCES:
        return kind
    return f"{kind}.{group}"
