"""The KEDA external scaler over real gRPC on loopback: the generated client stub against the server."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import grpc
import pytest

from recommender.pipeline.planstore import PlanStore
from recommender.serve import Servers, ServeSettings, start_servers
from recommender.serve.proto import externalscaler_pb2 as pb
from recommender.serve.proto import externalscaler_pb2_grpc as pb_grpc
from tests import servefixture as sf

LLAMA = {"workload": "Deployment/llama-3-8b-chat"}


def ref(namespace: str = "llm", **metadata: str) -> pb.ScaledObjectRef:
    return pb.ScaledObjectRef(name="so", namespace=namespace, scalerMetadata=metadata or LLAMA)


class Running:
    def __init__(self, settings: ServeSettings, clock: sf.FakeClock | None = None, publish: bool = True) -> None:
        self.clock = clock or sf.FakeClock()
        self.store = PlanStore(self.clock)
        if publish:
            self.store.publish(sf.plan())
        self.servers: Servers = start_servers(self.store, settings)
        self.target = f"127.0.0.1:{self.servers.ports['grpc']}"

    def stub(self, credentials: grpc.ChannelCredentials | None = None) -> pb_grpc.ExternalScalerStub:
        channel = (grpc.secure_channel(self.target, credentials) if credentials else
                   grpc.insecure_channel(self.target))
        return pb_grpc.ExternalScalerStub(channel)


def _plain(**kw: object) -> ServeSettings:
    return ServeSettings(host="127.0.0.1", grpc_port=0, http_port=None, **kw)  # type: ignore[arg-type]


@pytest.fixture
def running() -> Iterator[Running]:
    r = Running(_plain())
    yield r
    r.servers.stop(0.5)


def test_is_active_spec_and_metrics(running: Running) -> None:
    stub = running.stub()
    assert stub.IsActive(ref(), timeout=5).result is True
    spec = stub.GetMetricSpec(ref(), timeout=5).metricSpecs
    assert [(s.metricName, s.targetSize, s.targetSizeFloat) for s in spec] == [("request_rate_per_s", 8, 8.0)]
    # KEDA strips its s<index>- prefix, but accept it too; value: forecast hi_80 14 (targets tests)
    for name in ("request_rate_per_s", "s0-request_rate_per_s"):
        values = stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref(), metricName=name), timeout=5).metricValues
        assert [(v.metricName, v.metricValue, v.metricValueFloat) for v in values] == [("request_rate_per_s", 14, 14.0)]


def test_idle_workload_is_inactive_and_zero_in_both_fields(running: Running) -> None:
    stub = running.stub()
    idle = ref("batch", workload="nightly-embed")
    assert stub.IsActive(idle, timeout=5).result is False
    value = stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=idle, metricName="request_rate_per_s"),
                            timeout=5).metricValues[0]
    assert (value.metricValue, value.metricValueFloat) == (0, 0.0)  # KEDA reads the int when the float is 0


@pytest.mark.parametrize(("request_ref", "metric", "code", "needle"), [
    (ref(workload="nope"), "request_rate_per_s", grpc.StatusCode.NOT_FOUND, "no workload 'nope'"),
    (ref(), "gpu_util", grpc.StatusCode.INVALID_ARGUMENT, "scales on 'request_rate_per_s'"),
    (pb.ScaledObjectRef(namespace="llm"), "x", grpc.StatusCode.INVALID_ARGUMENT, "'workload' is required"),
    (ref(workload="a/b/c"), "x", grpc.StatusCode.INVALID_ARGUMENT, "not 'Kind/name'"),
    (ref("vision", workload="detector-mig"), "x", grpc.StatusCode.FAILED_PRECONDITION, "no scaling plan"),
])
def test_bad_requests_get_a_code_and_a_message(running: Running, request_ref: pb.ScaledObjectRef, metric: str,
                                               code: grpc.StatusCode, needle: str) -> None:
    with pytest.raises(grpc.RpcError) as info:
        running.stub().GetMetrics(pb.GetMetricsRequest(scaledObjectRef=request_ref, metricName=metric), timeout=5)
    assert info.value.code() is code and needle in (info.value.details() or "")


def test_no_plan_yet_is_unavailable() -> None:
    r = Running(_plain(), publish=False)
    try:
        with pytest.raises(grpc.RpcError) as info:
            r.stub().IsActive(ref(), timeout=5)
        assert info.value.code() is grpc.StatusCode.UNAVAILABLE and "no plan yet" in (info.value.details() or "")
    finally:
        r.servers.stop(0.5)


def test_fallback_after_the_configured_age_is_safe() -> None:
    r = Running(_plain())
    try:
        stub, idle = r.stub(), ref("batch", workload="nightly-embed")
        assert stub.IsActive(idle, timeout=5).result is False
        r.clock.t += 7201  # past the 7200 s fallback age
        assert stub.IsActive(idle, timeout=5).result is True
        value = stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=idle, metricName="request_rate_per_s"),
                                timeout=5).metricValues[0]
        assert (value.metricValue, value.metricValueFloat) == (8, 8.0)  # max(1, 0, 1) replicas × 8
    finally:
        r.servers.stop(0.5)


def test_streams_send_at_once_and_again_on_a_new_plan(running: Running) -> None:
    stub = running.stub()
    idle = ref("batch", workload="nightly-embed")
    active = stub.StreamIsActive(idle, timeout=10)
    specs = stub.StreamMetricSpec(ref(), timeout=10)
    assert next(active).result is False
    assert next(specs).metricSpecs[0].targetSizeFloat == 8.0
    # a new plan: the idle workload now scales on a metric with no forecast and 2 recommended replicas,
    # llama's target changes to 5 per replica
    plan = sf.plan(target_per_replica=5.0)
    recs = tuple(replace(r, forecasts=()) if r.ref.key == sf.EMBED else r for r in plan.recommendations)
    running.store.publish(replace(plan, recommendations=recs))
    assert next(active).result is True  # no forecast, recommended 1 > 0: active
    assert next(specs).metricSpecs[0].targetSizeFloat == 5.0
    active.cancel()
    specs.cancel()


def test_rate_limit_per_client() -> None:
    r = Running(_plain(rate_per_s=0.001, rate_burst=2, rate_per_workload_s=0.0))  # no refill within the test
    try:
        stub = r.stub()
        assert stub.IsActive(ref(), timeout=5).result and stub.IsActive(ref(), timeout=5).result
        with pytest.raises(grpc.RpcError) as info:
            stub.IsActive(ref(), timeout=5)
        assert info.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    finally:
        r.servers.stop(0.5)


def test_the_budget_grows_with_the_workloads_the_plan_scales() -> None:
    """KEDA asks for every ScaledObject from one address: each scaled workload adds to its bucket."""
    r = Running(_plain(rate_per_s=0.001, rate_burst=2, rate_per_workload_s=100.0), publish=False)

    def code() -> grpc.StatusCode:
        try:
            r.stub().IsActive(ref(), timeout=5)
            return grpc.StatusCode.OK
        except grpc.RpcError as exc:
            return exc.code()  # type: ignore[no-any-return]

    try:  # no plan: the configured 2 requests (answered UNAVAILABLE), then the brake
        assert [code() for _ in range(3)][-1] is grpc.StatusCode.RESOURCE_EXHAUSTED
        r.store.publish(sf.plan())  # llama and nightly-embed scale: 200/s, burst 2 + 800
        time.sleep(0.05)
        assert [code() for _ in range(5)] == [grpc.StatusCode.OK] * 5
    finally:
        r.servers.stop(0.5)


def test_oversized_message_is_refused(running: Running) -> None:
    big = ref(workload="Deployment/llama-3-8b-chat", padding="x" * 70_000)  # over the 64 KiB default
    with pytest.raises(grpc.RpcError) as info:
        running.stub().IsActive(big, timeout=5)
    assert info.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED


def _creds(pki: sf.Pki, client: bool) -> grpc.ChannelCredentials:
    key, cert = (pki.client_key.read_bytes(), pki.client_cert.read_bytes()) if client else (None, None)
    return grpc.ssl_channel_credentials(pki.ca.read_bytes(), key, cert)


def test_tls_and_mutual_tls(tmp_path: Path) -> None:
    pki = sf.make_pki(tmp_path)
    tls = Running(_plain(tls_cert=pki.server_cert, tls_key=pki.server_key))
    mtls = Running(_plain(tls_cert=pki.server_cert, tls_key=pki.server_key, client_ca=pki.ca))
    try:
        assert tls.stub(_creds(pki, client=False)).IsActive(ref(), timeout=5).result
        with pytest.raises(grpc.RpcError) as plain:  # plaintext against a TLS port
            tls.stub().IsActive(ref(), timeout=2)
        assert plain.value.code() is grpc.StatusCode.UNAVAILABLE
        assert mtls.stub(_creds(pki, client=True)).IsActive(ref(), timeout=5).result
        with pytest.raises(grpc.RpcError) as anonymous:  # no client certificate: the handshake fails
            mtls.stub(_creds(pki, client=False)).IsActive(ref(), timeout=2)
        assert anonymous.value.code() is grpc.StatusCode.UNAVAILABLE
    finally:
        tls.servers.stop(0.5)
        mtls.servers.stop(0.5)
