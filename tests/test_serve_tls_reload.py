"""Serving certificates renewed under running servers (cert-manager rewriting a mounted Secret).

Real gRPC and HTTPS on loopback with openssl certificates: two CAs, each with its own server and client
certificate; the servers read the files at fixed paths, which the tests rewrite as a Secret volume would.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import requests

from recommender.core.errors import ConfigError
from recommender.pipeline.planstore import PlanStore
from recommender.serve import Servers, ServeSettings, start_servers
from recommender.serve.proto import externalscaler_pb2 as pb
from recommender.serve.proto import externalscaler_pb2_grpc as pb_grpc
from recommender.serve.tls import TlsReloader
from tests import servefixture as sf

REF = pb.ScaledObjectRef(name="so", namespace="llm", scalerMetadata={"workload": "Deployment/llama-3-8b-chat"})


class Mounted:
    """Two PKIs (``old``, ``new``) and the files the servers read: ``tls.crt``, ``tls.key``, ``ca.crt``."""

    def __init__(self, tmp_path: Path) -> None:
        (tmp_path / "old").mkdir()
        (tmp_path / "new").mkdir()
        self.old, self.new = sf.make_pki(tmp_path / "old"), sf.make_pki(tmp_path / "new")
        self.dir = tmp_path / "secret"
        self.dir.mkdir()
        self.cert, self.key, self.ca = self.dir / "tls.crt", self.dir / "tls.key", self.dir / "ca.crt"
        self.install(self.old)

    def install(self, pki: sf.Pki) -> None:
        """Write the key first, then the certificate: between the two the pair does not match."""
        shutil.copyfile(pki.server_key, self.key)
        shutil.copyfile(pki.server_cert, self.cert)
        shutil.copyfile(pki.ca, self.ca)


def _grpc_ok(port: int, trust: sf.Pki, client: sf.Pki | None = None) -> bool:
    """IsActive over a fresh connection (its own subchannel: a new handshake) trusting ``trust``'s CA."""
    key, cert = (client.client_key.read_bytes(), client.client_cert.read_bytes()) if client else (None, None)
    credentials = grpc.ssl_channel_credentials(trust.ca.read_bytes(), key, cert)
    with grpc.secure_channel(f"127.0.0.1:{port}", credentials, options=[("grpc.use_local_subchannel_pool", 1)]) as ch:
        return bool(pb_grpc.ExternalScalerStub(ch).IsActive(REF, timeout=3).result)


@pytest.fixture
def mounted(tmp_path: Path) -> Mounted:
    return Mounted(tmp_path)


@contextlib.contextmanager
def _serving(m: Mounted, **kw: object) -> Iterator[Servers]:
    store = PlanStore(sf.FakeClock())
    store.publish(sf.plan())
    settings = ServeSettings(host="127.0.0.1", grpc_port=0, http_port=0, http_tls=True, tls_cert=m.cert,
                             tls_key=m.key, tls_reload_s=0.05, **kw)  # type: ignore[arg-type]
    servers = start_servers(store, settings)
    try:
        yield servers
    finally:
        servers.stop(0.5)


def test_a_renewed_serving_certificate_is_presented_from_the_next_connection(
        mounted: Mounted, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="recommender.serve")
    with _serving(mounted) as servers:
        grpc_port, https = servers.ports["grpc"], f"https://127.0.0.1:{servers.ports['http']}/healthz"
        assert _grpc_ok(grpc_port, mounted.old)
        assert requests.get(https, verify=str(mounted.old.ca), timeout=5).status_code == 200
        mounted.install(mounted.new)
        assert sf.eventually(lambda: _grpc_ok(grpc_port, mounted.new))
        assert sf.eventually(lambda: requests.get(https, verify=str(mounted.new.ca), timeout=5).status_code == 200)
        with pytest.raises(grpc.RpcError) as old_grpc:  # the old certificate is no longer presented
            _grpc_ok(grpc_port, mounted.old)
        assert old_grpc.value.code() is grpc.StatusCode.UNAVAILABLE
        with pytest.raises(requests.exceptions.SSLError):
            requests.get(https, verify=str(mounted.old.ca), timeout=5)
    assert any("TLS settings reloaded: serving certificate" in r.getMessage() for r in caplog.records)


def test_a_certificate_that_does_not_load_keeps_the_last_one(mounted: Mounted,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    with _serving(mounted) as servers:
        grpc_port, https = servers.ports["grpc"], f"https://127.0.0.1:{servers.ports['http']}/healthz"
        shutil.copyfile(mounted.new.server_cert, mounted.cert)  # the new certificate with the old key
        assert sf.eventually(lambda: any("TLS settings not reloaded" in r.getMessage() and r.levelno == logging.WARNING
                                       for r in caplog.records))
        assert _grpc_ok(grpc_port, mounted.old)  # both servers still present the last good pair
        assert requests.get(https, verify=str(mounted.old.ca), timeout=5).status_code == 200
        mounted.cert.write_text("not a certificate")
        time.sleep(0.2)
        assert _grpc_ok(grpc_port, mounted.old)
        shutil.copyfile(mounted.new.server_key, mounted.key)  # the renewal completes: the new pair applies
        shutil.copyfile(mounted.new.server_cert, mounted.cert)
        assert sf.eventually(lambda: _grpc_ok(grpc_port, mounted.new))


def test_a_rotated_client_ca_admits_its_clients_and_no_longer_the_old_ones(mounted: Mounted) -> None:
    with _serving(mounted, client_ca=mounted.ca) as servers:
        port = servers.ports["grpc"]
        assert _grpc_ok(port, mounted.old, client=mounted.old)
        with pytest.raises(grpc.RpcError):  # a client the CA did not sign fails the handshake
            _grpc_ok(port, mounted.old, client=mounted.new)
        shutil.copyfile(mounted.new.ca, mounted.ca)  # KEDA's client certificates now come from the new CA
        assert sf.eventually(lambda: _grpc_ok(port, mounted.old, client=mounted.new))
        with pytest.raises(grpc.RpcError):
            _grpc_ok(port, mounted.old, client=mounted.old)
        mounted.ca.write_text("garbage")  # an unreadable CA: the last good one stays, never an open port
        time.sleep(0.2)
        assert _grpc_ok(port, mounted.old, client=mounted.new)
        with pytest.raises(grpc.RpcError):
            _grpc_ok(port, mounted.old)


def test_unchanged_files_are_not_reloaded(mounted: Mounted) -> None:
    reloader = TlsReloader(ServeSettings(tls_cert=mounted.cert, tls_key=mounted.key))
    context = reloader.context(fronted=False)
    assert reloader.reload() is False
    mounted.install(mounted.new)
    assert reloader.reload() is True
    assert reloader.context(fronted=False) is context  # the server keeps one context; handshakes switch
    assert reloader._grpc_fetch() is not None and reloader._grpc_fetch() is None  # gRPC takes the new pair once


def test_a_mismatched_pair_at_start_is_one_line(mounted: Mounted) -> None:
    shutil.copyfile(mounted.new.server_cert, mounted.cert)
    with pytest.raises(ConfigError, match=r"cannot load the TLS certificate/key .*tls\.crt") as err:
        TlsReloader(ServeSettings(grpc_port=0, tls_cert=mounted.cert, tls_key=mounted.key))
    assert "\n" not in str(err.value)
    mounted.install(mounted.old)
    mounted.ca.write_text("garbage")
    with pytest.raises(ConfigError, match=r"client CA .*ca\.crt is not a PEM certificate"):
        TlsReloader(ServeSettings(tls_cert=mounted.cert, tls_key=mounted.key, client_ca=mounted.ca))
