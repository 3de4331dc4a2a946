"""Settings of the two sources a run reads: the Prometheus-compatible API (where, with which credentials,
and how hard it may be queried) and the Kubernetes API (where the workload inventory comes from). Groups of
``recommender.core.settings.Settings``; credentials given in the Prometheus URL are moved out of it so that the
URL can be shown anywhere.
"""

from __future__ import annotations

import re
from typing import Any, Literal
from urllib.parse import unquote, urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from recommender.core import usage as m

# Canonical metrics a recorded series may stand in for (collectors/prometheus/queries.py's FAMILIES).
RECORDABLE = (m.FB_USED_MIB, m.GR_ENGINE_ACTIVE_FRAC, m.SM_ACTIVE_FRAC, m.POWER_W, m.KV_USAGE_FRAC,
              m.REQUESTS_WAITING, m.REQUESTS_RUNNING, m.REQUEST_RATE, m.PROMPT_TOKENS_RATE,
              m.GENERATION_TOKENS_RATE, m.PREEMPTIONS_RATE, m.TTFT_P95_S, m.TTFT_OVER_OBJECTIVE_RATE)
_DURATION = re.compile(r"(\d+)([smh])")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")  # Prometheus' label names
# what scrapes add, and an HA pair's replica label (the operator's, Thanos'): prometheus.target_labels' default
TARGET_LABELS = ("job", "instance", "service", "endpoint", "prometheus_replica", "replica")
_UNIT_S = {"s": 1, "m": 60, "h": 3600}


def recorded_range_s(name: str) -> int | None:
    """The range a recorded series aggregates over, from its name: ``name[5m]`` or a last ``:`` segment such as
    ``namespace_pod:fb_used_mib:2m`` (120); None when the name gives none."""
    hit = re.fullmatch(r".*\[(\d+[smh])\]", name) or re.fullmatch(r".*:(\d+[smh])", name)
    if hit is None:
        return None
    n, unit = _DURATION.fullmatch(hit.group(1)).groups()  # type: ignore[union-attr]
    return int(n) * _UNIT_S[unit]


def recorded_metric_name(name: str) -> str:
    """The series name of a ``recorded_series`` value (``name[5m]`` → ``name``)."""
    return name.split("[", 1)[0]


Compression = Literal["auto", "gzip", "identity"]  # how range answers are asked: prometheus.compression


class PrometheusSettings(BaseModel):
    """How to reach a Prometheus-compatible API and how hard we may query it."""

    model_config = ConfigDict(frozen=True, extra="forbid")  # a misspelt key in a settings file is an error

    url: str | None = Field(None, description="Base URL of Prometheus, Thanos, Mimir or VictoriaMetrics.")
    bearer_token: str | None = Field(None, repr=False, description="Bearer token sent as Authorization header.")
    username: str | None = Field(None, description="Basic-auth user.")
    password: str | None = Field(None, repr=False, description="Basic-auth password (or user:pass@ in the URL).")
    ca_file: str | None = Field(None, description="CA bundle to verify the server's TLS certificate.")
    client_cert: str | None = Field(None, description="Client certificate (PEM) for mutual TLS.")
    client_key: str | None = Field(None, description="Client key (PEM) for mutual TLS.")
    insecure_skip_verify: bool = Field(False, description="Do not verify TLS (testing only).")
    headers: dict[str, str] = Field(default_factory=dict, description="Extra HTTP headers (e.g. X-Scope-OrgID).")
    compression: Compression = Field(
        "auto", description="Whether range answers come gzip-compressed: gzip carries about 8x fewer bytes (a "
        "port-forward, a WAN), identity spares the server and the client the CPU of compressing and inflating "
        "them (a fast link); auto asks both ways, then the way whose answers arrive faster, checking the other "
        "now and then. An Accept-Encoding in headers is sent as given instead.")
    timeout_s: float = Field(60.0, gt=0, description="Timeout of one HTTP request, seconds.")
    retries: int = Field(3, ge=0, description="Retries with exponential backoff on transient errors.")
    max_workers: int = Field(4, ge=1, le=32, description="Queries in flight at once (bounded pool).")
    match_server_cores: bool = Field(
        True, description="Keep the queries in flight at or under the server's cores, as Prometheus reports them "
        "(GOMAXPROCS in /api/v1/status/runtimeinfo; max_workers where it does not say): Prometheus evaluates a "
        "query on one core, so one beyond its cores waits inside it, holding its memory, and answers no sooner.")
    max_points_per_series: int = Field(
        11_000, ge=100, le=11_000, description="Points per series per query; ranges are chunked below it."
    )
    max_samples_per_query: int = Field(
        20_000_000, ge=10_000, description="Samples one query may touch; kept well under query.max-samples."
    )
    max_points_per_query: int = Field(
        500_000, ge=1_000, description="Points one answer may hold in all; bounds memory while it is parsed."
    )
    target_points: int = Field(
        2_016, ge=50, le=100_000, description="Points per series over the whole history; sets the step (≥ 60 s)."
    )
    min_step_s: float = Field(60.0, gt=0, description="Smallest step: the usual scrape interval.")
    query_memory_mib: float = Field(
        8.0, ge=0.25, description="Memory one query may make the server hold at once, MiB (24 bytes a sample, as "
        "Prometheus counts peakSamples): queries are cut in time to stay under it, by estimate and then by what the "
        "server said the earlier chunks held. With the queries in flight (see "
        "max_workers, match_server_cores) the server's query memory stays under their number times this, plus "
        "its garbage collector's slack.")
    recording_rules: bool = Field(
        True, description="Read the recorded series of deploy/monitoring/recording-rules.yaml "
        "(namespace_pod:<metric>:step<S> at the report's step where it is a multiple of S, else "
        "namespace_pod:<metric>:<range>) or of recorded_series where they cover the window, raw series elsewhere.")
    recorded_series: dict[str, str] = Field(
        default_factory=dict, description="Your own recording rules, canonical metric → series name, e.g. "
        "{fb_used_mib: 'gpu:fb_used:5m'}: the same aggregation per (namespace, pod) as the shipped rule, over the "
        "range its last ':' segment names (or 'name[5m]'). Used before the shipped names.")
    namespace_label: str = Field("namespace", description="Label that holds the pod's namespace.")

    @field_validator("recorded_series")
    @classmethod
    def _recorded_names(cls, v: dict[str, str]) -> dict[str, str]:
        for metric, name in v.items():
            if metric not in RECORDABLE:
                raise ValueError(f"recorded_series: {metric!r} is not a metric we read; one of {', '.join(RECORDABLE)}")
            series = recorded_metric_name(name)
            if recorded_range_s(name) is None or not re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", series):
                raise ValueError(f"recorded_series: {name!r} for {metric} must be a metric name whose last ':' "
                                 "segment is its range (e.g. gpu:fb_used:5m), or name[5m]")
        return v

    @model_validator(mode="before")
    @classmethod
    def _credentials_out_of_the_url(cls, data: Any) -> Any:
        """``http://user:pass@host`` → ``url`` without them, ``username``/``password`` set (where not given): the
        URL is shown in errors, logs, reports and snapshots, the credentials never are."""
        if not isinstance(data, dict) or not isinstance(data.get("url"), str):
            return data
        parts = urlsplit(data["url"])
        if "@" not in parts.netloc:
            return data
        user, _, password = parts.netloc.rpartition("@")[0].partition(":")
        out = {**data, "url": urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))}
        if user and not data.get("username"):
            out["username"] = unquote(user)
        if password and not data.get("password"):
            out["password"] = unquote(password)
        return out
    pod_label: str = Field("pod", description="Label that holds the pod name.")
    node_labels: tuple[str, ...] = Field(
        ("Hostname", "hostname"),
        description="DCGM labels that may hold the GPU's node, first present wins: dcgm-exporter's Helm chart "
                    "and the GPU operator set it from NODE_NAME. Used for per-node MIG plans when the "
                    "Kubernetes API is not.",
    )
    extra_selector: str = Field("", description='Extra label matchers added to every query, e.g. cluster="a".')
    target_labels: tuple[str, ...] = Field(
        TARGET_LABELS,
        description="Labels the scrape adds (Prometheus' job and instance; the operator's service and endpoint) "
                    "and the replica label of an HA pair a global view does not deduplicate (the operator's "
                    "prometheus_replica, Thanos' replica): series that differ only in them are one series read "
                    "twice, and are read once (their largest value), not summed per pod.")

    cluster_labels: tuple[str, ...] = Field(
        ("cluster",),
        description="Labels that name a series' cluster where one API serves several (Thanos', Mimir's or a "
                    "federation's external labels): a workload whose pods' series carry two values of one is one "
                    "name in two clusters, and is left out with a warning rather than summed; select one cluster "
                    "with extra_selector, or set [] to check nothing.")

    @field_validator("target_labels", "cluster_labels")
    @classmethod
    def _label_names(cls, v: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        bad = [x for x in v if not _LABEL_NAME.fullmatch(x) or x in ("__name__", "le")]
        if bad:
            what = "a scrape adds" if info.field_name == "target_labels" else "that names a cluster"
            raise ValueError(f"not a label {what}: {', '.join(map(repr, bad))}")
        return v

    @model_validator(mode="after")
    def _target_labels_not_the_pods(self) -> PrometheusSettings:
        for name, labels in (("target_labels", self.target_labels), ("cluster_labels", self.cluster_labels)):
            mine = {self.namespace_label, self.pod_label} & set(labels)
            if mine:
                raise ValueError(f"{name} holds {', '.join(sorted(mine))}, the label of a pod's namespace or name")
        both = set(self.target_labels) & set(self.cluster_labels)
        if both:  # a cluster's copy would be read once, as a scrape's is: the larger of two pods, not either
            raise ValueError(f"{', '.join(sorted(both))} is in both target_labels and cluster_labels")
        return self

    cache: bool = Field(True, description="Reports and snapshots keep what they read in cache_dir, so the next one "
                                          "over the same server, selection, step and history reads only new steps.")
    cache_dir: str | None = Field(None, description="Folder of that cache; default $XDG_CACHE_HOME/gpu-rightsizer "
                                                    "(~/.cache/gpu-rightsizer).")


class KubernetesSettings(BaseModel):
    """Where the workload inventory comes from when a cluster is reachable."""

    model_config = ConfigDict(frozen=True, extra="forbid")  # a misspelt key in a settings file is an error

    enabled: bool = Field(True, description="Read workloads from the Kubernetes API when reachable.")
    kubeconfig: str | None = Field(None, description="Path to a kubeconfig; default: in-cluster, then ~/.kube.")
    context: str | None = Field(None, description="kubeconfig context to use.")
    host: str | None = Field(None, description="API server URL (overrides kubeconfig; for tests).")
    timeout_s: float = Field(30.0, gt=0, description="Timeout of one API call, seconds.")
    device_plugin_namespace: str = Field(
        "gpu-operator", description="Namespace of the NVIDIA device plugin's ConfigMap of named configs (the GPU "
        "Operator's namespace).")
    device_plugin_configmap: str | None = Field(
        None, description="Name of the device plugin's ConfigMap of named configs: the GPU Operator's "
        "devicePlugin.config.name (reference.md §3; the chart sets none by default). Read for each node's current "
        "sharing; unset: not read, and the generated ConfigMap is named rightsizer-device-plugin.")
    device_plugin_default_config: str | None = Field(
        None, description="The config nodes without an nvidia.com/device-plugin.config label get: the GPU "
        "Operator's devicePlugin.config.default.")

    @property
    def device_plugin_configmap_name(self) -> str:
        """The ConfigMap the report reads and the generated one is named after."""
        return self.device_plugin_configmap or "rightsizer-device-plugin"
