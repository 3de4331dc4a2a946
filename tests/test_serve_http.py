"""The HTTP servers over real loopback: probes, /metrics, KEDA metrics-api, external.metrics.k8s.io over TLS."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import requests
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from recommender.pipeline.planstore import PlanStore
from recommender.serve import Servers, ServeSettings, start_servers
from recommender.serve.exporter import fleet_metrics, workload_metrics
from tests import servefixture as sf

API = "/apis/external.metrics.k8s.io/v1beta1"


class Http:
    def __init__(self, tmp_path: Path, publish: bool = True, **kw: object) -> None:
        self.pki = sf.make_pki(tmp_path)
        self.clock = sf.FakeClock()
        self.store = PlanStore(self.clock)
        if publish:
            self.store.publish(sf.plan())
        self.registry = CollectorRegistry()
        settings = ServeSettings(host="127.0.0.1", grpc_port=None, http_port=0, https_port=0, external_metrics=True,
                                 tls_cert=self.pki.server_cert, tls_key=self.pki.server_key, **kw)  # type: ignore[arg-type]
        self.servers: Servers = start_servers(self.store, settings, registry=self.registry)
        self.http = f"http://127.0.0.1:{self.servers.ports['http']}"
        self.https = f"https://127.0.0.1:{self.servers.ports['https']}"

    def get(self, path: str, **kw: object) -> requests.Response:
        return requests.get(self.http + path, timeout=5, **kw)  # type: ignore[arg-type]

    def api(self, path: str, **kw: object) -> requests.Response:
        return requests.get(self.https + path, timeout=5, verify=str(self.pki.ca), **kw)  # type: ignore[arg-type]


@pytest.fixture
def srv(tmp_path: Path) -> Iterator[Http]:
    s = Http(tmp_path)
    yield s
    s.servers.stop(0.5)


def test_keda_metrics_api(srv: Http) -> None:
    body = srv.get("/api/v1/keda/llm/llama-3-8b-chat", params={"kind": "Deployment"}).json()
    # forecast hi_80 14 over the next 600 s; 14 / 8 per replica = 1.75 replicas
    assert (body["value"], body["targetPerReplica"], body["desiredReplicas"]) == (14.0, 8.0, 1.75)
    assert (body["active"], body["state"], body["metric"]) == (True, "fresh", "request_rate_per_s")
    assert srv.get("/api/v1/keda/batch/nightly-embed").json()["value"] == 0.0


@pytest.mark.parametrize(("path", "status", "needle"), [
    ("/api/v1/keda/llm/nope", 404, "no workload 'nope'"),
    ("/api/v1/keda/vision/detector-mig", 404, "no scaling plan"),
    ("/api/v1/keda/llm/llama-3-8b-chat?kind=StatefulSet", 404, "StatefulSet/llama-3-8b-chat"),
    ("/nowhere", 404, "Not Found"),
])
def test_http_errors_are_json(srv: Http, path: str, status: int, needle: str) -> None:
    r = srv.get(path)
    assert r.status_code == status and needle in r.json()["error"]


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_nothing_changes_state(srv: Http, method: str) -> None:
    r = requests.request(method, srv.http + "/api/v1/keda/llm/llama-3-8b-chat", data=b"x", timeout=5)
    assert r.status_code == 405 and "error" in r.json()
    api = requests.request(method, srv.https + API, verify=str(srv.pki.ca), timeout=5)
    assert api.status_code == 405 and api.json()["kind"] == "Status"


def test_probes(tmp_path: Path) -> None:
    s = Http(tmp_path, publish=False)
    try:
        assert s.get("/healthz").status_code == 200
        assert s.get("/readyz").status_code == 503  # no plan yet
        r = s.get("/api/v1/keda/llm/llama-3-8b-chat")
        assert r.status_code == 503 and "no plan yet" in r.json()["error"]
        s.store.publish(sf.plan())
        assert s.get("/readyz").status_code == 200
    finally:
        s.servers.stop(0.5)


def test_probes_use_the_callers_checks(tmp_path: Path) -> None:
    store, registry = PlanStore(sf.FakeClock()), CollectorRegistry()
    servers = start_servers(store, ServeSettings(host="127.0.0.1", grpc_port=None, http_port=0),
                            health=lambda: False, ready=lambda: True, registry=registry)
    try:
        base = f"http://127.0.0.1:{servers.ports['http']}"
        assert requests.get(base + "/healthz", timeout=5).status_code == 503
        assert requests.get(base + "/readyz", timeout=5).status_code == 200
    finally:
        servers.stop(0.5)


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def _wl(ns: str, kind: str, name: str, **extra: str) -> frozenset[tuple[str, str]]:
    return frozenset({"namespace": ns, "kind": kind, "workload": name, **extra}.items())


def test_metrics_exposition(srv: Http) -> None:
    s = _samples(srv.get("/metrics").text)
    llama = ("llm", "Deployment", "llama-3-8b-chat")
    assert s["rightsizer_recommended_replicas", _wl(*llama, bound="recommended")] == 3
    assert s["rightsizer_scaler_value", _wl(*llama, metric="request_rate_per_s")] == 14.0
    # forecast at now (before its first row: the first row): mean 12, hi_80 14, lo_95 8.5
    for band, v in (("mean", 12.0), ("hi_80", 14.0), ("lo_95", 8.5)):
        assert s["rightsizer_forecast_demand", _wl(*llama, metric="request_rate_per_s", band=band)] == v
    assert s["rightsizer_gpu_equivalents", _wl(*llama, state="recommended")] == 1.0
    assert s["rightsizer_recommended_mig_profile_info",
             _wl(*llama, profile="3g.40gb", gpu_model="A100-80GB", count="1")] == 1
    assert s["rightsizer_recommended_vllm_gpu_memory_utilization", _wl(*llama)] == 0.82
    assert s["rightsizer_monthly_savings_usd", _wl(*llama)] == 1606.0
    assert s["rightsizer_plan_stale", frozenset()] == 0
    assert ("rightsizer_scaler_value", _wl("vision", "StatefulSet", "detector-mig", metric="request_rate_per_s")) \
        not in s  # no scaling plan: no scaler series


def test_staleness_metrics_follow_the_clock(srv: Http) -> None:
    srv.clock.t += 1801  # past the stale age (1800 s), before the fallback (7200 s)
    s = _samples(srv.get("/metrics").text)
    assert (s["rightsizer_plan_age_seconds", frozenset()], s["rightsizer_plan_stale", frozenset()],
            s["rightsizer_plan_fallback", frozenset()]) == (1801, 1, 0)
    srv.clock.t += 6000
    s = _samples(srv.get("/metrics").text)
    assert s["rightsizer_plan_fallback", frozenset()] == 1
    assert s["rightsizer_scaler_active", _wl("batch", "Job", "nightly-embed")] == 1  # safe: never zero
    assert srv.get("/api/v1/keda/batch/nightly-embed").json()["state"] == "fallback"


def test_the_registry_is_the_callers(srv: Http) -> None:
    assert srv.registry.get_sample_value("rightsizer_plan_available") == 1
    from prometheus_client import REGISTRY

    assert REGISTRY.get_sample_value("rightsizer_plan_available") is None


def test_external_metrics_discovery(srv: Http) -> None:
    assert srv.api("/apis").json()["groups"][0]["name"] == "external.metrics.k8s.io"
    assert srv.api("/apis/external.metrics.k8s.io").json()["preferredVersion"]["version"] == "v1beta1"
    body = srv.api(API).json()
    assert (body["kind"], body["apiVersion"]) == ("APIResourceList", "v1")
    assert body["groupVersion"] == "external.metrics.k8s.io/v1beta1"
    assert [r["name"] for r in body["resources"]] == ["desired_replicas", "request_rate_per_s"]
    assert all(r["namespaced"] and r["verbs"] == ["get"] and r["kind"] == "ExternalMetricValueList"
               for r in body["resources"])


@pytest.mark.parametrize(("metric", "selector", "value"), [
    ("request_rate_per_s", "workload=llama-3-8b-chat", "14"),
    ("desired_replicas", "workload=llama-3-8b-chat,kind=Deployment", "1750m"),  # 14 / 8 = 1.75
])
def test_external_metric_value_list(srv: Http, metric: str, selector: str, value: str) -> None:
    body = srv.api(f"{API}/namespaces/llm/{metric}", params={"labelSelector": selector}).json()
    assert (body["kind"], body["apiVersion"]) == ("ExternalMetricValueList", "external.metrics.k8s.io/v1beta1")
    [item] = body["items"]
    assert (item["metricName"], item["value"]) == (metric, value)
    assert item["metricLabels"]["workload"] == "llama-3-8b-chat"
    assert item["timestamp"] == "1970-01-12T13:46:40Z"  # the store's clock: 1,000,000 s


@pytest.mark.parametrize(("path", "status", "needle"), [
    (f"{API}/namespaces/llm/request_rate_per_s", 400, "must name the workload"),
    (f"{API}/namespaces/llm/request_rate_per_s?labelSelector=workload%20in%20(a)", 400, "key=value"),
    (f"{API}/namespaces/llm/gpu_util?labelSelector=workload=llama-3-8b-chat", 404, "not served"),
    (f"{API}/namespaces/other/request_rate_per_s?labelSelector=workload=llama-3-8b-chat", 404, "no workload"),
])
def test_external_metric_errors_are_status_objects(srv: Http, path: str, status: int, needle: str) -> None:
    r = srv.api(path)
    body = r.json()
    assert r.status_code == status and (body["kind"], body["code"]) == ("Status", status) and needle in body["message"]


def test_https_is_tls_only(srv: Http) -> None:
    with pytest.raises(requests.ConnectionError):
        requests.get(srv.https.replace("https", "http") + API, timeout=5)


def test_http_rate_limit(tmp_path: Path) -> None:
    s = Http(tmp_path, rate_per_s=0.001, rate_burst=2, rate_per_workload_s=0.0)
    try:
        assert [s.get("/healthz").status_code for _ in range(3)] == [200, 200, 429]
        assert "rate limit" in s.get("/healthz").json()["error"]
    finally:
        s.servers.stop(0.5)


def test_metrics_carry_right_sized_and_autoscaled_gpus_where_a_plan_estimates_them() -> None:
    plan = sf.plan(mean_replicas=2.0, mean_replicas_right_sized=3.0)  # llama: 3 slices of 0.5 on average
    plan = replace(plan, summary=replace(plan.summary, gpu_hours_right_sized_autoscaled=1.0,
                                         right_sized_autoscaled_workloads=1))
    fleet = {s.labels["state"]: s.value for fam in fleet_metrics(plan) for s in fam.samples if "state" in s.labels}
    per = {(s.labels["workload"], s.labels["state"]): s.value for fam in workload_metrics(plan)
           for s in fam.samples if fam.name == "rightsizer_gpu_equivalents"}
    llama = next(r for r in plan.recommendations if r.ref.key == sf.LLAMA)
    assert per["llama-3-8b-chat", "right_sized_autoscaled"] == 1.5
    expected = plan.summary.gpus_needed - llama.gpus_needed + 1.5  # the summary's figure is rounded
    assert fleet["right_sized_autoscaled"] == pytest.approx(expected, abs=1e-3)
    assert sum(state == "right_sized_autoscaled" for _, state in per) == 1
    without = {s.labels["state"] for fam in fleet_metrics(sf.plan()) for s in fam.samples if "state" in s.labels}
    assert without == {"held", "needed"}
