"""How the servers listen, what they trust, and when a plan is too old to act on.

A pydantic model at the boundary (CLI flags, the controller's config); the servers read it, never a
global. Ports may be 0 (tests: the OS picks one; ``Servers.ports`` says which).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from recommender.serve.frontproxy import EXTRA_PREFIXES, GROUP_HEADERS, USERNAME_HEADERS

DEFAULT_GRPC_PORT = 9090  # KEDA external scaler (deploy/: trigger metadata scalerAddress)
DEFAULT_HTTP_PORT = 8080  # /healthz, /readyz, /metrics, KEDA metrics-api
DEFAULT_HTTPS_PORT = 6443  # external.metrics.k8s.io/v1beta1 (APIService → Service 443 → 6443)


class ServeSettings(BaseModel):
    """Ports, TLS material, staleness ages and abuse limits of the gRPC and HTTP(S) servers."""

    model_config = ConfigDict(frozen=True)

    host: str = Field("0.0.0.0", description="Address every server binds.")
    grpc_port: int | None = Field(DEFAULT_GRPC_PORT, ge=0, le=65535, description="KEDA external scaler; None: off.")
    http_port: int | None = Field(DEFAULT_HTTP_PORT, ge=0, le=65535, description="Health, /metrics, metrics-api.")
    external_metrics: bool = Field(False, description="Serve external.metrics.k8s.io/v1beta1 (needs TLS).")
    https_port: int = Field(DEFAULT_HTTPS_PORT, ge=0, le=65535, description="Port of the external metrics API.")
    tls_cert: Path | None = Field(None, description="Server certificate (PEM) for gRPC and HTTPS.")
    tls_key: Path | None = Field(None, description="Server private key (PEM).")
    client_ca: Path | None = Field(None, description="CA (PEM) that client certificates must chain to (gRPC mTLS).")
    requestheader_client_ca: Path | None = Field(
        None, description="Front-proxy CA (PEM, the API server's --requestheader-client-ca-file): the external "
                          "metrics API then answers only the API server's proxy client certificate.")
    requestheader_from_cluster: bool = Field(
        False, description="Read the front-proxy CA, allowed names and headers from the ConfigMap "
                           "kube-system/extension-apiserver-authentication (no CA file needed).")
    tls_reload_s: float = Field(
        60.0, gt=0, description="Re-read the serving certificate and key, the client CA and the front proxy (file or "
                                "ConfigMap) this often: new ones apply from the next connection and the old ones no "
                                "longer; one that does not load keeps the last, with a warning.")
    requestheader_allowed_names: tuple[str, ...] = Field(
        (), description="CNs the front-proxy certificate may carry; empty: any it signed (with the CA file).")
    requestheader_username_headers: tuple[str, ...] = Field(
        USERNAME_HEADERS, min_length=1, description="Headers naming the end user; the first with a value wins.")
    requestheader_group_headers: tuple[str, ...] = Field(GROUP_HEADERS, description="Headers naming its groups.")
    requestheader_extra_headers_prefix: tuple[str, ...] = Field(
        EXTRA_PREFIXES, description="Prefixes of headers carrying the user's extra attributes.")
    http_tls: bool = Field(False, description="Serve the HTTP port over TLS too (metrics-api, /metrics).")
    stale_after_s: float = Field(1800.0, gt=0, description="Plan older than this: served with a warning.")
    fallback_after_s: float = Field(7200.0, gt=0, description="Plan older than this: the scaler returns safe values.")
    band: str = Field("hi_80", pattern=r"^(mean|hi_\d{1,2})$", description="Forecast column that wakes workloads.")
    min_horizon_s: float = Field(60.0, ge=0, description="Look-ahead when a workload's cold start is unknown.")
    max_request_bytes: int = Field(65_536, ge=1024, description="Largest gRPC message or HTTP body accepted.")
    rate_per_s: float = Field(20.0, gt=0, description="Requests per second per client (token bucket refill).")
    rate_burst: int = Field(100, ge=1, description="Requests a client may make at once (bucket size).")
    rate_per_workload_s: float = Field(
        0.5, ge=0, description="Requests per second per client added for each workload the plan scales: KEDA asks "
                               "about 0.2/s per ScaledObject (GetMetrics and IsActive every 15 s HPA sync and every "
                               "30 s poll), all from the operator's one address; the burst gains 4 s of it.")
    stream_check_s: float = Field(15.0, gt=0, description="Streams re-check staleness this often between plans.")
    metrics_max_age_s: float = Field(
        5.0, ge=0, description="/metrics is rendered off the event loop and its body reused for scrapes within this "
                               "many seconds of plan age (a new plan renders at once); 0: render every scrape.")
    idle_timeout_s: float = Field(
        15.0, gt=0, description="Close an HTTP connection that has not sent a whole request for this long: idle "
                                "keep-alive, a client that never finishes its headers, a TLS or gRPC handshake "
                                "that never ends.")
    max_connections: int = Field(1024, ge=1, description="Open connections per HTTP port; more are closed at once.")
    grpc_idle_timeout_s: float = Field(
        300.0, gt=0, description="Close a gRPC connection with no call in flight for this long (KEDA reconnects); "
                                 "open connections are pinged every minute, and a peer that does not answer is "
                                 "dropped.")
    service_name: str = Field("gpu-rightsizer", description="Our Service, as the APIService should name it.")
    service_namespace: str = Field("gpu-rightsizer", description="Namespace of that Service.")

    @model_validator(mode="after")
    def _consistent(self) -> ServeSettings:
        if self.fallback_after_s < self.stale_after_s:
            raise ValueError("fallback_after_s must be at least stale_after_s")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together")
        if self.tls_cert is None and (self.external_metrics or self.client_ca or self.http_tls):
            raise ValueError("the external metrics API, client certificates and http_tls need tls_cert and tls_key")
        if self.front_proxy and not self.external_metrics:
            raise ValueError("requestheader_client_ca and requestheader_from_cluster apply to the external metrics "
                             "API only: set external_metrics")
        if self.requestheader_client_ca is not None and self.requestheader_from_cluster:
            raise ValueError("give requestheader_client_ca or requestheader_from_cluster, not both")
        for name in ("requestheader_username_headers", "requestheader_group_headers",
                     "requestheader_extra_headers_prefix"):
            if any(not h.strip() for h in getattr(self, name)):
                raise ValueError(f"{name}: empty header name")
        return self

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None

    @property
    def front_proxy(self) -> bool:
        """Whether the external metrics API authenticates the API server's front proxy."""
        return self.requestheader_client_ca is not None or self.requestheader_from_cluster
