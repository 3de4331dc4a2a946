"""The JSON report's typed model: the one source of both the document and ``schema.json``.

:mod:`recommender.outputs.jsondoc` fills these models and dumps them; ``schema.json`` is generated from
them (``python -m recommender.outputs.docmodel > recommender/outputs/schema.json``) and a test checks the
committed file equals what the models generate, so the document and its schema cannot disagree.
Validation forbids keys the model does not name (a field added in code must be added here), while the
published schema stays open (no ``additionalProperties: false``): consumers of an older minor version
accept a newer document.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

UTC_TIME = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$"

UtcTime = Annotated[str, Field(pattern=UTC_TIME)]
NonNeg = Annotated[float, Field(ge=0)]
NonNegInt = Annotated[int, Field(ge=0)]
Frac = Annotated[float, Field(ge=0, le=1)]
Pct = Annotated[float, Field(ge=0, le=100)]
Texts = list[str]
Sharing = Literal["exclusive", "mig", "time-slicing", "mps", "hami", "kai", "dra", "volcano-vgpu", "runai",
                  "none"]


class _Model(BaseModel):
    """Strict on input (a key not named here is an error, and so is NaN or infinity in a number field: JSON has
    neither), frozen once built."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Window(_Model):
    start: UtcTime
    end: UtcTime
    step_s: Annotated[float, Field(gt=0)]


class Summary(_Model):
    gpus_held: NonNeg
    gpus_needed: NonNeg
    gpus_needed_packed: NonNegInt | None
    workloads: NonNegInt
    with_recommendation: NonNegInt
    monthly_savings_usd: float
    gpu_hours_held: NonNeg
    gpu_hours_needed: NonNeg
    gpu_hours_autoscaled: NonNeg | None
    autoscaled_workloads: NonNegInt
    gpu_hours_right_sized_autoscaled: NonNeg | None
    right_sized_autoscaled_workloads: NonNegInt


class Bound(_Model):
    lower: float
    target: float
    upper: float


class Vllm(_Model):
    model: str | None
    gpu_memory_utilization: Frac | None
    max_model_len: Annotated[int, Field(ge=1)] | None
    max_num_seqs: Annotated[int, Field(ge=1)] | None
    tensor_parallel_size: Annotated[int, Field(ge=1)]


class Allocation(_Model):
    text: str
    sharing: Sharing
    gpus: NonNegInt
    mig_profile: str | None
    mig_count: NonNegInt
    gpu_equivalents: NonNeg
    replicas: NonNegInt
    total_gpu_equivalents: NonNeg
    gpu_model: str | None
    gpu_product: str | None
    device_memory_mib: NonNeg | None
    mps_active_thread_pct: Pct | None
    mps_pinned_mem_mib: NonNeg | None
    hami_gpumem_mib: NonNeg | None
    hami_gpucores_pct: Pct | None
    kai_gpu_fraction: NonNeg | None
    volcano_vgpu_memory_mib: NonNeg | None
    volcano_vgpu_cores_pct: Pct | None
    runai_gpu_fraction: Frac | None
    vllm: Vllm | None


class WorkloadClass(_Model):
    name: Literal["real-time", "near-real-time", "batch"]
    confidence: Frac
    source: Literal["policy", "annotation", "rule", "model"]
    evidence: Texts


Point = Annotated[dict[str, Any], WithJsonSchema({
    "type": "object", "required": ["timestamp", "mean"],
    "properties": {"timestamp": {"type": "string", "pattern": UTC_TIME}},
    "patternProperties": {"^(mean|lo_[0-9]+|hi_[0-9]+)$": {"type": ["number", "null"], "minimum": 0}},
    "additionalProperties": False,
})]


class Forecast(_Model):
    metric: str
    model: str
    reasons: Texts
    backtest_smape: NonNeg | None
    backtest_mase: NonNeg | None
    horizon_s: NonNeg | None
    mean: NonNeg | None
    peak: NonNeg | None
    peak_upper: NonNeg | None
    points_step_s: Annotated[float, Field(gt=0)] | None
    points: list[Point]


Keda = Annotated[dict[str, Any], WithJsonSchema({
    "type": "object", "required": ["minReplicaCount", "maxReplicaCount", "cooldownPeriod", "triggers"]})]
Hpa = Annotated[dict[str, Any], WithJsonSchema({
    "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
    "description": "(2.0) an autoscaling/v2 HorizontalPodAutoscaler on the external metrics adapter, "
                   "the same numbers as keda",
    "properties": {"apiVersion": {"const": "autoscaling/v2"}, "kind": {"const": "HorizontalPodAutoscaler"},
                   "metadata": {"type": "object"}, "spec": {"type": "object"}},
})]


class Scaling(_Model):
    metric: str
    shape: str | None = Field(
        description="(2.0) the shape the bounds and thresholds are for (the recommended one); null: today's")
    per_replica_capacity: NonNeg
    capacity_source: Literal["measured", "configured", "lower bound", "model card"]
    capacity_estimated: bool = Field(
        description="(2.0) per_replica_capacity is scaled from today's shape, not measured on the recommended one")
    capacity_scale: float = Field(gt=0, le=1, description=(
        "(2.0) per_replica_capacity / basis_capacity: the compute one replica holds on the recommended shape "
        "over today's, at most 1"))
    basis_capacity: float = Field(ge=0, description="(2.0) requests/s per replica on today's shape, as read")
    target_per_replica: NonNeg
    waiting_per_replica: NonNeg | None
    headroom_frac: Frac
    min_replicas: NonNegInt
    max_replicas: Annotated[int, Field(ge=1)]
    peak_replicas: int = Field(ge=0, description=(
        "(2.0; was recommended_replicas) replicas for the forecast peak on the recommended shape; "
        "recommended.replicas is today's count, what GPUs needed are costed at"))
    demand_source: Literal["forecast", "observed"]
    scale_to_zero: bool
    activation_threshold: NonNeg
    cooldown_s: NonNegInt
    cold_start_s: float | None
    mean_replicas: NonNeg | None
    mean_replicas_right_sized: NonNeg | None
    reasons: Texts
    keda: Keda
    hpa: Hpa


class Workload(_Model):
    namespace: str
    name: str
    kind: str
    current: Allocation
    recommended: Allocation | None
    reasons: Texts
    confidence: Frac
    provisional: bool = Field(description=(
        "(1.8) made on less history than policy.min_history_s: wide bounds, low confidence, never applied by Auto"))
    memory_need_mib: Bound | None
    compute_need_frac: Bound | None
    gpus_held: NonNeg
    gpus_needed: NonNeg
    monthly_savings_usd: float | None
    risk: Literal["low", "medium", "high"]
    risk_reasons: Texts
    history_s: NonNeg
    workload_class: WorkloadClass | None = Field(alias="class")
    forecasts: list[Forecast]
    mechanism: str | None = Field(
        description="sharing mechanism chosen (a sharing value), null without a recommendation")
    apply: dict[str, Any] | None = Field(description=(
        "what to write where, in each mechanism's own terms: resources, env, dra, annotations, vllm_args, "
        "device plugin replicas, scheduler_name, report_only; template: the pod template path in its owner"))
    scaling: Scaling | None
    autoscaler: str | None = Field(description=(
        "(1.7) what owns the replica count: HorizontalPodAutoscaler/<name> or ScaledObject/<name>, several "
        "comma-separated (they fight); null when none was found or none could be read"))


class MigNode(_Model):
    node: str
    gpu_model: str
    gpus_total: NonNegInt
    layouts: list[dict[str, Annotated[int, Field(ge=1)]]]
    workloads: Texts
    config_name: str = Field(max_length=63)
    label: dict[str, str]
    reconfigured_gpus: NonNegInt
    reasons: Texts


class AutoscalerPrometheus(_Model):
    """(2.0) the Prometheus URL the KEDA triggers read (serverAddress): scaling.keda_prometheus_url, else the
    URL the report read, else a placeholder on the .invalid domain; credentials stripped"""

    url: str
    source: str
    needs_auth: bool = Field(description="credentials were given: the triggers need a TriggerAuthentication")


class DevicePluginNode(_Model):
    """(2.1) one node's device-plugin sharing: its config today and the named config its label should select"""

    node: str
    gpu_model: str
    gpus_total: NonNegInt
    current_config: str | None = Field(description="nvidia.com/device-plugin.config today; null: unset (the default)")
    current: str = Field(description="what today's config shares, in words; 'unknown' where it cannot be read")
    config_name: str = Field(max_length=63)
    label: dict[str, str]
    strategy: Literal["none", "time-slicing", "mps"]
    replicas: Annotated[int, Field(ge=1)]
    workloads: Texts
    changed: bool
    reasons: Texts


class DevicePluginConfigMap(_Model):
    namespace: str
    name: str


class DevicePlugin(_Model):
    """(2.1) the NVIDIA device plugin's ConfigMap of named configs (one per node pool) and the label per node"""

    configmap: DevicePluginConfigMap
    configs: dict[str, dict[str, Any]] = Field(description="config name → its version: v1 document (new ones only)")
    nodes: list[DevicePluginNode]


MigPartedConfig = Annotated[dict[str, Any], WithJsonSchema({"type": "object", "required": ["version", "mig-configs"]})]


class Report(_Model):
    """What `rightsizer report -o json` writes: one object per run. Field meanings and units:
    recommender/outputs/JSON.md. Every listed key is always present (null when unknown). Consumers should
    ignore keys they do not know: minor versions (2.x) only add fields; 2.0 renamed
    scaling.recommended_replicas to scaling.peak_replicas."""

    schema_version: str = Field(pattern=r"^2\.[0-9]+$")
    generated_at: UtcTime
    window: Window
    source: str
    summary: Summary
    warnings: Texts
    workloads: list[Workload]
    mig_nodes: list[MigNode]
    mig_parted_config: MigPartedConfig | None
    autoscaler_prometheus: AutoscalerPrometheus
    device_plugin: DevicePlugin | None


class _OpenSchema(GenerateJsonSchema):
    """pydantic's schema without per-field titles and with objects left open to keys added by later minor
    versions (validation in code still forbids them)."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def model_schema(self, schema: core_schema.ModelSchema) -> JsonSchemaValue:
        out = super().model_schema(schema)
        if out.get("additionalProperties") is False:
            del out["additionalProperties"]
        return out


def json_schema() -> dict[str, Any]:
    """The JSON Schema (2020-12) of :class:`Report`, as committed in ``schema.json``."""
    generated = Report.model_json_schema(by_alias=True, schema_generator=_OpenSchema)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "urn:gpu-rightsizer:report:1",
            "title": "gpu-rightsizer report", **{k: v for k, v in generated.items() if k != "title"}}


def schema_text() -> str:
    """``schema.json``'s exact text: two-space indented, newline-terminated."""
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    print(schema_text(), end="")
