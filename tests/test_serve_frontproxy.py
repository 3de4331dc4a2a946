"""The external metrics API authenticates the kube-apiserver's front proxy: pure rules, then real TLS.

Certificates are real (openssl): the serving CA of servefixture.make_pki and a separate requestheader
(front-proxy) CA, as kubeadm keeps them. A certificate from another CA fails the TLS handshake (the
server trusts the requestheader CA alone); no certificate gets 401; a CN outside the allowed names
gets 401 as from the kube-apiserver; the probes answer without a certificate.
"""

from __future__ import annotations

import json
import logging
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kmock
import pytest
import requests
from click.testing import CliRunner

from recommender.cli.main import main
from recommender.core.errors import ConfigError
from recommender.pipeline.planstore import PlanStore
from recommender.serve import Servers, ServeSettings, start_servers
from recommender.serve import frontproxy as fp
from recommender.serve.tls import ssl_context
from tests import servefixture as sf
from tests.kubefixture import KubeEmulator

API = "/apis/external.metrics.k8s.io/v1beta1"
LLAMA_RATE = f"{API}/namespaces/llm/request_rate_per_s?labelSelector=workload=llama-3-8b-chat"
USER = {"X-Remote-User": "system:serviceaccount:kube-system:horizontal-pod-autoscaler",
        "X-Remote-Group": "system:serviceaccounts"}
PROXY = fp.FrontProxy(ca_pem="-", allowed_names=("front-proxy-client",))


def _cert(cn: str) -> dict[str, Any]:
    """A peer certificate as ``SSLSocket.getpeercert()`` gives it."""
    return {"subject": ((("organizationName", "k8s"),), (("commonName", cn),)), "issuer": ()}


# --- pure rules -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("peercert", "headers", "code"), [
    (None, [("X-Remote-User", "alice")], 401),                          # no client certificate
    ({}, [("X-Remote-User", "alice")], 401),                            # a certificate that did not verify
    (_cert("someone-else"), [("X-Remote-User", "alice")], 401),         # signed by the CA, CN not allowed
    (_cert("front-proxy-client"), [], 401),                             # the proxy, but no user
    (_cert("front-proxy-client"), [("X-Remote-User", "")], 401),        # an empty user is no user
])
def test_denied(peercert: dict[str, Any] | None, headers: list[tuple[str, str]], code: int) -> None:
    outcome = fp.authenticate(peercert, headers, PROXY)
    assert isinstance(outcome, fp.Denied) and outcome.code == code


def test_the_front_proxy_passes_the_user_on() -> None:
    headers = [("x-remote-user", "alice"), ("X-Remote-Group", "dev"), ("X-Remote-Group", "system:authenticated"),
               ("X-Remote-Extra-Scopes", "a"), ("X-Remote-Extra-Scopes", "b"), ("X-Remote-Extra-Acme.com%2fteam", "ml"),
               ("X-Other", "ignored")]
    user = fp.authenticate(_cert("front-proxy-client"), headers, PROXY)
    assert user == fp.RemoteUser("alice", ("dev", "system:authenticated"),
                                 {"scopes": ("a", "b"), "acme.com/team": ("ml",)})  # lower-cased, %-unescaped


def test_first_username_header_with_a_value_wins() -> None:
    proxy = fp.FrontProxy("-", username_headers=("X-Remote-User", "X-Forwarded-User"))
    user = fp.remote_user([("X-Remote-User", ""), ("X-Forwarded-User", "bob")], proxy)
    assert user is not None and user.name == "bob"


@pytest.mark.parametrize(("cn", "allowed", "ok"), [
    ("front-proxy-client", (), True),  # empty list: any CN the CA signed
    ("front-proxy-client", ("aggregator", "front-proxy-client"), True),
    ("Front-Proxy-Client", ("front-proxy-client",), False),  # exact match, as Kubernetes
])
def test_cn_allowed(cn: str, allowed: tuple[str, ...], ok: bool) -> None:
    assert fp.cn_allowed(cn, allowed) is ok


def test_configmap_settings() -> None:
    data = {"client-ca-file": "CLIENT", "requestheader-client-ca-file": "-----BEGIN CERTIFICATE-----\nX\n",
            "requestheader-allowed-names": '["front-proxy-client"]',
            "requestheader-username-headers": '["X-Remote-User"]', "requestheader-group-headers": '["X-Remote-Group"]',
            "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]'}
    proxy = fp.from_configmap(data)
    assert proxy.allowed_names == ("front-proxy-client",) and proxy.username_headers == ("X-Remote-User",)
    assert proxy.ca_pem.startswith("-----BEGIN CERTIFICATE-----") and "CLIENT" not in proxy.ca_pem
    bare = fp.from_configmap({"requestheader-client-ca-file": "PEM"})  # lists absent: Kubernetes' defaults
    assert (bare.allowed_names, bare.group_headers, bare.extra_prefixes) == ((), ("X-Remote-Group",),
                                                                               ("X-Remote-Extra-",))


@pytest.mark.parametrize(("data", "needle"), [
    ({"client-ca-file": "PEM"}, "has no requestheader-client-ca-file"),
    ({"requestheader-client-ca-file": "PEM", "requestheader-allowed-names": "front-proxy-client"}, "not a JSON list"),
    ({"requestheader-client-ca-file": "PEM", "requestheader-username-headers": '[" "]'}, "empty header name"),
])
def test_bad_configmap_is_one_line(data: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle) as err:
        fp.from_configmap(data)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("kw", "needle"), [
    ({"requestheader_from_cluster": True}, "set external_metrics"),
    ({"external_metrics": True, "requestheader_from_cluster": True, "requestheader_client_ca": "ca.pem"}, "not both"),
    ({"external_metrics": True, "requestheader_group_headers": ("",)}, "empty header name"),
])
def test_settings_refuse_inconsistent_front_proxy(tmp_path: Path, kw: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        ServeSettings(tls_cert=tmp_path / "c", tls_key=tmp_path / "k", **kw)


# --- real TLS ---------------------------------------------------------------------------------------

class FrontProxied:
    """The HTTPS server with a requestheader CA; clients present (or not) front-proxy certificates."""

    def __init__(self, tmp_path: Path, kube_api: Any = None, **kw: Any) -> None:
        self.pki = sf.make_pki(tmp_path)
        self.fpki = sf.make_front_proxy_pki(tmp_path)
        self.store = PlanStore(sf.FakeClock())
        self.store.publish(sf.plan())
        kw.setdefault("requestheader_client_ca", None if kw.get("requestheader_from_cluster") else self.fpki.ca)
        self.settings = ServeSettings(host="127.0.0.1", grpc_port=None, http_port=None, https_port=0,
                                      external_metrics=True, tls_cert=self.pki.server_cert,
                                      tls_key=self.pki.server_key, **kw)
        self.servers: Servers = start_servers(self.store, self.settings, kube_api=kube_api)
        self.base = f"https://127.0.0.1:{self.servers.ports['https']}"

    def get(self, path: str, cert: tuple[str, str] | None = None, headers: dict[str, str] | None = None
            ) -> requests.Response:
        return requests.get(self.base + path, cert=cert, headers=headers, verify=str(self.pki.ca), timeout=5)


@pytest.fixture
def srv(tmp_path: Path) -> Iterator[FrontProxied]:
    s = FrontProxied(tmp_path, requestheader_allowed_names=(sf.FRONT_PROXY_CN,))
    yield s
    s.servers.stop(0.5)


def _status(r: requests.Response, code: int, reason: str) -> dict[str, Any]:
    body: dict[str, Any] = r.json()
    assert r.status_code == code and "\n" not in r.text
    assert (body["kind"], body["apiVersion"], body["status"], body["reason"], body["code"]) == \
        ("Status", "v1", "Failure", reason, code)
    return body


def test_the_api_server_gets_the_metric(srv: FrontProxied, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="recommender.serve")
    r = srv.get(LLAMA_RATE, cert=srv.fpki.proxy, headers=USER)
    body = r.json()
    assert r.status_code == 200 and body["kind"] == "ExternalMetricValueList"
    assert body["items"][0]["value"] == "14"  # forecast hi_80 over the cold start, as in test_serve_http
    assert any("horizontal-pod-autoscaler" in rec.getMessage() and rec.levelno == logging.DEBUG
               for rec in caplog.records)  # X-Remote-User logged at debug
    # the aggregator's availability check: discovery as system:kube-aggregator
    check = srv.get(API, cert=srv.fpki.proxy, headers={"X-Remote-User": "system:kube-aggregator",
                                                       "X-Remote-Group": "system:masters"})
    assert check.status_code == 200 and check.json()["kind"] == "APIResourceList"


@pytest.mark.parametrize("path", [API, LLAMA_RATE, "/apis", "/nowhere"])
def test_no_certificate_is_unauthorized(srv: FrontProxied, path: str) -> None:
    body = _status(srv.get(path, headers=USER), 401, "Unauthorized")
    assert "requestheader client CA" in body["message"]


def test_the_proxy_without_a_user_is_unauthorized(srv: FrontProxied) -> None:
    assert "X-Remote-User" in _status(srv.get(LLAMA_RATE, cert=srv.fpki.proxy), 401, "Unauthorized")["message"]


def test_a_cn_outside_the_allowed_names_is_unauthorized(srv: FrontProxied) -> None:
    body = _status(srv.get(LLAMA_RATE, cert=srv.fpki.stranger, headers=USER), 401, "Unauthorized")
    assert "'someone-else'" in body["message"]


def test_a_certificate_from_another_ca_fails_the_handshake(srv: FrontProxied) -> None:
    # TLS 1.2: the server's verdict comes inside the handshake, so wrap_socket itself fails
    ctx = ssl.create_default_context(cafile=str(srv.pki.ca))
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(*srv.fpki.rogue)
    with socket.create_connection(("127.0.0.1", srv.servers.ports["https"]), timeout=5) as raw, \
            pytest.raises(ssl.SSLError):
        ctx.wrap_socket(raw, server_hostname="localhost")
    # TLS 1.3 (requests' default): the client's side is done first; it sees a closed connection
    with pytest.raises(requests.exceptions.ConnectionError):
        srv.get(LLAMA_RATE, cert=srv.fpki.rogue, headers=USER)
    with pytest.raises(requests.exceptions.ConnectionError):  # the serving CA is no front-proxy CA either
        srv.get(LLAMA_RATE, cert=(str(srv.pki.client_cert), str(srv.pki.client_key)), headers=USER)
    assert srv.get(LLAMA_RATE, cert=srv.fpki.proxy, headers=USER).status_code == 200  # still serving


def test_probes_need_no_certificate(srv: FrontProxied) -> None:
    assert srv.get("/healthz").status_code == 200
    assert srv.get("/readyz").status_code == 200


def test_the_rate_limit_counts_per_end_user_not_per_api_server(tmp_path: Path) -> None:
    # every request comes from the API server's address; a user looping on the API must not spend the HPA's bucket
    s = FrontProxied(tmp_path, rate_per_s=0.001, rate_burst=2, rate_per_workload_s=0.0)  # no refill within the test
    loop = {"X-Remote-User": "mallory", "X-Remote-Group": "system:authenticated"}
    try:
        assert [s.get(LLAMA_RATE, cert=s.fpki.proxy, headers=loop).status_code for _ in range(2)] == [200, 200]
        _status(s.get(LLAMA_RATE, cert=s.fpki.proxy, headers=loop), 429, "TooManyRequests")
        assert s.get(LLAMA_RATE, cert=s.fpki.proxy, headers=USER).status_code == 200  # the HPA still reads
        assert s.get("/healthz").status_code == 200  # probes: the address bucket, one token of two spent
        _status(s.get(LLAMA_RATE, headers=loop), 401, "Unauthorized")  # no certificate: refused, the last token
        _status(s.get(LLAMA_RATE, headers=loop), 429, "TooManyRequests")  # refusals are braked per address too
    finally:
        s.servers.stop(0.5)


def test_a_rotated_requestheader_ca_is_trusted_and_the_old_one_no_longer(tmp_path: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="recommender.serve")
    (tmp_path / "cluster").mkdir()
    fpki = sf.make_front_proxy_pki(tmp_path / "cluster")  # FrontProxied makes (and ignores) its own in tmp_path
    ca_file = tmp_path / "cluster" / "requestheader-ca.pem"  # as a mounted ConfigMap key, rewritten in place
    ca_file.write_bytes(fpki.ca.read_bytes())
    s = FrontProxied(tmp_path, requestheader_client_ca=ca_file, tls_reload_s=0.05)
    try:
        assert s.get(LLAMA_RATE, cert=fpki.proxy, headers=USER).status_code == 200
        ca_file.write_bytes((tmp_path / "cluster" / "rogue-ca.pem").read_bytes())  # the cluster rotated its CA
        assert sf.eventually(lambda: s.get(LLAMA_RATE, cert=fpki.rogue, headers=USER).status_code == 200)
        with pytest.raises(requests.exceptions.ConnectionError):  # the old CA no longer verifies
            s.get(LLAMA_RATE, cert=fpki.proxy, headers=USER)
        assert any("TLS settings reloaded: requestheader CA" in r.getMessage() for r in caplog.records)
        ca_file.write_text("not a certificate")  # a bad rotation: the last good CA still applies, with a warning
        assert sf.eventually(lambda: any("TLS settings not reloaded" in r.getMessage() and r.levelno == logging.WARNING
                                       for r in caplog.records))
        assert s.get(LLAMA_RATE, cert=fpki.rogue, headers=USER).status_code == 200
        _status(s.get(LLAMA_RATE, headers=USER), 401, "Unauthorized")  # never an open API
    finally:
        s.servers.stop(0.5)


def test_a_reload_that_crashes_is_logged_and_the_next_one_still_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    from recommender.serve import tls

    s = FrontProxied(tmp_path, tls_reload_s=0.05)
    calls: list[int] = []

    def flaky(settings: ServeSettings, kube_api: Any = None) -> fp.FrontProxy:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a bug, not a ConfigError")
        return fp.FrontProxy((tmp_path / "rogue-ca.pem").read_text())

    try:
        monkeypatch.setattr(tls, "load_front_proxy", flaky)
        assert sf.eventually(lambda: s.get(LLAMA_RATE, cert=s.fpki.rogue, headers=USER).status_code == 200)
        assert any(r.levelno == logging.ERROR and "periodic" in r.getMessage() for r in caplog.records)
    finally:
        s.servers.stop(0.5)


def test_empty_allowed_names_admit_any_cn_the_ca_signed(tmp_path: Path) -> None:
    s = FrontProxied(tmp_path)
    try:
        assert s.get(LLAMA_RATE, cert=s.fpki.stranger, headers=USER).status_code == 200
        assert s.get(LLAMA_RATE, headers=USER).status_code == 401
    finally:
        s.servers.stop(0.5)


def test_the_context_trusts_the_requestheader_ca_alone(tmp_path: Path) -> None:
    pki, fpki = sf.make_pki(tmp_path), sf.make_front_proxy_pki(tmp_path)
    settings = ServeSettings(external_metrics=True, tls_cert=pki.server_cert, tls_key=pki.server_key)
    proxy = fp.FrontProxy(fpki.ca.read_text())
    ctx = ssl_context(settings, proxy)
    assert [dict(c["subject"][0])["commonName"] for c in ctx.get_ca_certs()] == ["test-front-proxy-ca"]
    assert ssl_context(settings).get_ca_certs() == []  # without a front proxy: no client certificates asked


def test_a_missing_ca_file_is_one_line(tmp_path: Path) -> None:
    pki = sf.make_pki(tmp_path)
    settings = ServeSettings(host="127.0.0.1", grpc_port=None, http_port=None, https_port=0, external_metrics=True,
                             tls_cert=pki.server_cert, tls_key=pki.server_key,
                             requestheader_client_ca=tmp_path / "missing.pem")
    with pytest.raises(ConfigError, match=r"cannot read the requestheader client CA .*missing\.pem") as err:
        start_servers(PlanStore(sf.FakeClock()), settings)
    assert "\n" not in str(err.value)


def test_serve_cli_missing_ca_exits_2(tmp_path: Path) -> None:
    pki = sf.make_pki(tmp_path)
    result = CliRunner().invoke(main, ["serve", "--demo", "--external-metrics", "--tls-cert", str(pki.server_cert),
                                       "--tls-key", str(pki.server_key), "--no-kubernetes",
                                       "--requestheader-client-ca", str(tmp_path / "missing.pem")])
    assert result.exit_code == 2 and "missing.pem" in result.output and "Traceback" not in result.output


# --- the CA from the cluster ------------------------------------------------------------------------

CM_KEY = "v1/configmaps"


def _kube_with_configmap(data: dict[str, str] | None) -> KubeEmulator:
    kube = KubeEmulator().__enter__()
    kube.call(lambda km: km.resources.__setitem__(
        CM_KEY, kmock.ResourceInfo(kind="ConfigMap", namespaced=True, verbs={"get", "list"})))
    if data is not None:
        obj = {"apiVersion": "v1", "kind": "ConfigMap", "data": data,
               "metadata": {"name": fp.CONFIGMAP_NAME, "namespace": fp.CONFIGMAP_NAMESPACE}}
        kube.call(lambda km: km.objects.__setitem__((CM_KEY, fp.CONFIGMAP_NAMESPACE, fp.CONFIGMAP_NAME), obj))
    return kube


def test_the_front_proxy_settings_come_from_the_cluster(tmp_path: Path) -> None:
    (tmp_path / "cluster").mkdir()
    fpki = sf.make_front_proxy_pki(tmp_path / "cluster")  # FrontProxied makes (and ignores) its own in tmp_path
    kube = _kube_with_configmap({"requestheader-client-ca-file": fpki.ca.read_text(),
                                 "requestheader-allowed-names": json.dumps([sf.FRONT_PROXY_CN]),
                                 "requestheader-username-headers": '["X-Remote-User"]'})
    try:
        s = FrontProxied(tmp_path, kube_api=kube.api_client(), requestheader_from_cluster=True)
        try:
            assert s.get(LLAMA_RATE, cert=fpki.proxy, headers=USER).status_code == 200
            assert s.get(LLAMA_RATE, cert=fpki.stranger, headers=USER).status_code == 401  # the cluster's names
        finally:
            s.servers.stop(0.5)
        assert f"GET /api/v1/namespaces/kube-system/configmaps/{fp.CONFIGMAP_NAME}" in kube.requests()
    finally:
        kube.__exit__(None, None, None)


def test_the_cluster_configmap_is_read_again(tmp_path: Path) -> None:
    (tmp_path / "cluster").mkdir()
    fpki = sf.make_front_proxy_pki(tmp_path / "cluster")
    data = {"requestheader-client-ca-file": fpki.ca.read_text(),
            "requestheader-allowed-names": json.dumps([sf.FRONT_PROXY_CN])}
    kube = _kube_with_configmap(data)
    try:
        s = FrontProxied(tmp_path, kube_api=kube.api_client(), requestheader_from_cluster=True,
                         tls_reload_s=0.05)
        try:
            assert s.get(LLAMA_RATE, cert=fpki.stranger, headers=USER).status_code == 401
            obj = {"apiVersion": "v1", "kind": "ConfigMap", "data": data | {"requestheader-allowed-names": "[]"},
                   "metadata": {"name": fp.CONFIGMAP_NAME, "namespace": fp.CONFIGMAP_NAMESPACE}}
            kube.call(lambda km: km.objects.__setitem__((CM_KEY, fp.CONFIGMAP_NAMESPACE, fp.CONFIGMAP_NAME), obj))
            assert sf.eventually(lambda: s.get(LLAMA_RATE, cert=fpki.stranger, headers=USER).status_code == 200)
        finally:
            s.servers.stop(0.5)
    finally:
        kube.__exit__(None, None, None)


def test_no_configmap_means_no_server(tmp_path: Path) -> None:
    kube = _kube_with_configmap(None)
    try:
        with pytest.raises(ConfigError, match="cannot read the ConfigMap kube-system/extension-apiserver-auth"):
            FrontProxied(tmp_path, kube_api=kube.api_client(), requestheader_from_cluster=True)
    finally:
        kube.__exit__(None, None, None)


def test_the_overlay_turns_front_proxy_auth_on() -> None:
    import yaml

    config = Path(__file__).resolve().parents[1] / "deploy/overlays/external-metrics/controller-config.yaml"
    serve = ServeSettings.model_validate(yaml.safe_load(config.read_text())["serve"])
    assert serve.front_proxy and serve.requestheader_from_cluster and serve.requestheader_client_ca is None
