"""Every annotation and label name the tool reads or writes on Kubernetes objects, in one place.

``rightsizer.io/*`` names are ours; a tenant can write any of them on its own objects, so whatever reads
them treats the value as hostile input. The NVIDIA labels are the GPU Operator's (reference.md §2).
"""

ECHO = 40  # characters of a tenant's value a reason or note repeats


def quoted(value: str) -> str:
    """A tenant's value as a reason repeats it: its repr, cut at ``ECHO`` characters (a value may be 256 KiB)."""
    return repr(value[:ECHO]) + ("…" if len(value) > ECHO else "")


def cut(value: object) -> str:
    """A tenant's value as a note repeats it unquoted: its text, cut at ``ECHO`` characters."""
    text = str(value)
    return text[:ECHO] + ("…" if len(text) > ECHO else "")


# read from a workload (set by its owner)
CLASS_ANNOTATION = "rightsizer.io/class"  # real-time | near-real-time | batch: always overrides
TTFT_OBJECTIVE_ANNOTATION = "rightsizer.io/ttft-slo-seconds"  # a latency objective: p95 TTFT, seconds
SCHEDULE_ANNOTATION = "rightsizer.io/schedule"  # a CronJob's spec.schedule, when a collector records it
MODE_ANNOTATION = "rightsizer.io/mode"  # opt-in on a Deployment/StatefulSet without a policy object
ALLOWED_ANNOTATION = "rightsizer.io/mechanisms"  # comma-separated: the mechanisms this workload may get
REQUIRED_ANNOTATION = "rightsizer.io/mechanism"  # the one mechanism it must get
KV_BYTES_ANNOTATION = "rightsizer.io/kv-bytes-per-token"
CAPACITY_ANNOTATION = "rightsizer.io/replica-capacity"  # requests/s one replica serves at the objective

# read from a pod (set by its scheduler or owner)
POD_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"  # the Volcano PodGroup a pod belongs to

# written by the controller
RECOMMENDATION_ANNOTATION = "rightsizer.io/recommendation"  # the controller's last recommendation (JSON)
LAST_CHANGE = "rightsizer.io/last-change"
SIGNATURE = "rightsizer.io/last-change-signature"
STATE_ANNOTATION = "rightsizer.io/mig-change"  # a node MIG change in flight (its state, JSON)
DEVICE_PLUGIN_STATE_ANNOTATION = "rightsizer.io/device-plugin-change"  # a node device-plugin config change
# on what the controller creates (the device plugin ConfigMap, DRA claim objects): ours to write, reuse or delete
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "gpu-rightsizer"

# the GPU Operator's MIG manager
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"

# vCluster's syncer, on the host-side copies of a tenant cluster's pods (vcluster.com docs, "Sync to host from
# virtual": single-namespace mode adds release, vcluster.loft.sh/namespace, vcluster.loft.sh/managed-by and
# vcluster.loft.sh/controlled-by; multi-namespace mode only the vcluster.loft.sh/* ones). Defaults of
# recommender.core.settings_tenancy.VClusterSettings, which a cluster may override.
VCLUSTER_MANAGED_BY_LABEL = "vcluster.loft.sh/managed-by"  # the vCluster's name
VCLUSTER_NAMESPACE_LABEL = "vcluster.loft.sh/namespace"  # the pod's namespace inside the vCluster

# the NVIDIA device plugin (reference.md §3): the node label that picks a named config from its ConfigMap
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
GPU_REPLICAS_LABEL = "nvidia.com/gpu.replicas"  # GPU feature discovery: the replicas the node's config makes
GPU_COUNT_LABEL = "nvidia.com/gpu.count"  # GPU feature discovery: the node's physical GPUs
