"""Every annotation and label name the tool reads or writes on Kubernetes objects, in one place.

``rightsizer.io/*`` names are ours; a tenant can write any of them on its own objects, so whatever reads
them treats the value as hostile input. The NVIDIA labels are the GPU Operator's (reference.md §2).
"""

# read from a workload (set by its owner)
CLASS_ANNOTATION = "rightsizer.io/class"  # real-time | near-real-time | batch: always overrides
TTFT_OBJECTIVE_ANNOTATION = "rightsizer.io/ttft-slo-seconds"  # a latency objective: p95 TTFT, seconds
SCHEDULE_ANNOTATION = "rightsizer.io/schedule"  # a CronJob's spec.schedule, when a collector records it
MODE_ANNOTATION = "rightsizer.io/mode"  # opt-in on a Deployment/StatefulSet without a policy object
ALLOWED_ANNOTATION = "rightsizer.io/mechanisms"  # comma-separated: the mechanisms this workload may get
REQUIRED_ANNOTATION = "rightsizer.io/mechanism"  # the one mechanism it must get
KV_BYTES_ANNOTATION = "rightsizer.io/kv-bytes-per-token"
CAPACITY_ANNOTATION = "rightsizer.io/replica-capacity"  # requests/s one replica serves at the objective

# written by the controller
RECOMMENDATION_ANNOTATION = "rightsizer.io/recommendation"  # the controller's last recommendation (JSON)
LAST_CHANGE = "rightsizer.io/last-change"
SIGNATURE = "rightsizer.io/last-change-signature"
STATE_ANNOTATION = "rightsizer.io/mig-change"

# the GPU Operator's MIG manager
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"

# the NVIDIA device plugin (reference.md §3): the node label that picks a named config from its ConfigMap
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
GPU_REPLICAS_LABEL = "nvidia.com/gpu.replicas"  # GPU feature discovery: the replicas the node's config makes
