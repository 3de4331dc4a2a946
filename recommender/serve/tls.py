"""Server credentials from the PEM files in :class:`ServeSettings`, re-read while the servers run.

gRPC: TLS with the server certificate; with ``client_ca`` every client must present a certificate
that chains to it (KEDA: ``tlsClientCert``/``tlsClientKey`` in the trigger's authentication). HTTPS:
an ``ssl.SSLContext`` with TLS 1.2 or newer; with a front proxy (frontproxy.py) it asks for a client
certificate (optional, so probes without one still connect) and trusts only the requestheader CA.
:class:`TlsReloader` re-reads all of it, as k8s.io/apiserver does: cert-manager renews the serving
certificate and the cluster rotates its requestheader CA without telling us, and a server that kept
the first certificate would stop the HPA when it expires.
"""

from __future__ import annotations

import logging
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from recommender.core.errors import ConfigError, RightsizerError
from recommender.serve import frontproxy
from recommender.serve.frontproxy import FrontProxy
from recommender.serve.settings import ServeSettings

log = logging.getLogger("recommender.serve")


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None


@dataclass(frozen=True)
class Material:
    """The serving certificate, its key and the gRPC client CA as the files hold them now (compared to
    see a rotation; gRPC takes the bytes)."""

    cert: bytes
    key: bytes
    client_ca: bytes | None


def read_material(settings: ServeSettings) -> Material | None:
    """None for plaintext. The client CA must parse: a garbage CA would fail every KEDA handshake."""
    if settings.tls_cert is None or settings.tls_key is None:
        return None
    ca = _read(settings.client_ca, "client CA") if settings.client_ca else None
    if ca is not None:
        try:
            ssl.create_default_context().load_verify_locations(cadata=ca.decode("utf-8", "replace"))
        except (ssl.SSLError, ValueError) as exc:
            raise ConfigError(f"the client CA {settings.client_ca} is not a PEM certificate: {exc}") from None
    return Material(_read(settings.tls_cert, "TLS certificate"), _read(settings.tls_key, "TLS key"), ca)


def grpc_configuration(material: Material) -> grpc.ServerCertificateConfiguration:
    return grpc.ssl_server_certificate_configuration([(material.key, material.cert)],
                                                     root_certificates=material.client_ca)


def ssl_context(settings: ServeSettings, front_proxy: FrontProxy | None = None) -> ssl.SSLContext:
    """The HTTPS server context. ``client_ca`` (gRPC's) is not applied here; with ``front_proxy`` a
    client certificate is requested (CERT_OPTIONAL) and, when sent, must chain to its CA alone: a
    certificate from any other CA fails the handshake."""
    if settings.tls_cert is None or settings.tls_key is None:
        raise ConfigError("HTTPS needs --tls-cert and --tls-key")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)  # CERT_NONE: no system CAs are loaded
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(settings.tls_cert, settings.tls_key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load the TLS certificate/key {settings.tls_cert}: {exc}") from None
    if front_proxy is not None:
        try:
            ctx.load_verify_locations(cadata=front_proxy.ca_pem)
        except (ssl.SSLError, ValueError) as exc:
            raise ConfigError(f"the requestheader client CA is not a PEM certificate: {exc}") from None
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


def load_front_proxy(settings: ServeSettings, kube_api: Any = None) -> FrontProxy | None:
    """The front proxy to authenticate, from ``requestheader_client_ca`` (settings give the names and
    headers) or the cluster's extension-apiserver-authentication ConfigMap (it gives them); None when
    neither is configured. Unreadable or missing: ConfigError, never an open API."""
    if settings.requestheader_client_ca is not None:
        pem = _read(settings.requestheader_client_ca, "requestheader client CA").decode("utf-8", "replace")
        return FrontProxy(
            ca_pem=pem, allowed_names=settings.requestheader_allowed_names,
            username_headers=frontproxy.header_names(settings.requestheader_username_headers, "username headers"),
            group_headers=frontproxy.header_names(settings.requestheader_group_headers, "group headers"),
            extra_prefixes=frontproxy.header_names(settings.requestheader_extra_headers_prefix, "extra prefixes"))
    if not settings.requestheader_from_cluster:
        return None
    if kube_api is None:
        raise ConfigError("requestheader_from_cluster needs a Kubernetes API client; mount the CA and set "
                          "requestheader_client_ca instead")
    from recommender.serve.apiservice import read_authentication_config

    return frontproxy.from_configmap(read_authentication_config(kube_api, 10.0))


class _Switching:
    """An SSL context a server keeps for its whole life; each TLS handshake switches to ``current`` from
    the server-name callback (called with or without SNI), so a swap applies to the next connection."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self.context = self.current = context
        context.sni_callback = self._switch

    def _switch(self, sslobj: ssl.SSLObject, _server_name: str | None, _ctx: ssl.SSLContext) -> None:
        sslobj.context = self.current


class TlsReloader:
    """The TLS material every server uses, re-read by :meth:`reload` and swapped in when it changed.

    :meth:`context` gives the HTTPS servers their context (with the front proxy's CA or without), and
    :meth:`grpc_credentials` gRPC's, which asks for the latest configuration before each handshake.
    A reload builds everything first and swaps it all at once, or nothing: a certificate without its new
    key, a garbage CA or a flaky API server keeps the last good settings with a warning, so the API is
    never left open and the HPA is not locked out.
    """

    def __init__(self, settings: ServeSettings, front: FrontProxy | None = None, kube_api: Any = None) -> None:
        self.settings, self.kube_api = settings, kube_api
        self.front = front
        self.material = read_material(settings)
        if self.material is not None:
            ssl_context(settings)  # the key must match the certificate before any server starts
        self._switches: dict[bool, _Switching] = {}
        self._grpc_next: grpc.ServerCertificateConfiguration | None = None
        self._grpc_lock = threading.Lock()  # gRPC's handshake thread takes what the reload thread leaves

    def context(self, fronted: bool) -> ssl.SSLContext:
        """The context of an HTTPS server; ``fronted``: it verifies the front proxy (when there is one)."""
        if fronted not in self._switches:
            self._switches[fronted] = _Switching(ssl_context(self.settings, self.front if fronted else None))
        return self._switches[fronted].context

    def front_proxy(self) -> FrontProxy:
        """The front proxy in force, asked per request (it is reloaded); only when one is configured."""
        assert self.front is not None, "no front proxy is configured"
        return self.front

    def grpc_credentials(self) -> grpc.ServerCredentials | None:
        """None for plaintext; TLS (mutual when ``client_ca`` is set) otherwise."""
        if self.material is None:
            return None
        return grpc.dynamic_ssl_server_credentials(grpc_configuration(self.material), self._grpc_fetch,
                                                   require_client_authentication=self.material.client_ca is not None)

    def _grpc_fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """gRPC asks before every handshake: the new configuration once after a reload, else None (no change)."""
        with self._grpc_lock:
            config, self._grpc_next = self._grpc_next, None
        return config

    def reload(self) -> bool:
        """Re-read everything; True when something changed and now applies (blocking I/O: run it off the loop)."""
        try:
            material = read_material(self.settings)
            front = load_front_proxy(self.settings, self.kube_api) if self.front is not None else None
            if material == self.material and front == self.front:
                return False
            contexts = {fronted: ssl_context(self.settings, front if fronted else None) for fronted in self._switches}
            if material is not None and not contexts:
                ssl_context(self.settings)  # gRPC alone: still check that the key matches the certificate
            if read_material(self.settings) != material:
                raise ConfigError("the certificate files changed while they were read; trying again next period")
        except RightsizerError as exc:
            log.warning("TLS settings not reloaded, the last ones still apply: %s", exc)
            return False
        if material is not None and material != self.material:
            with self._grpc_lock:
                self._grpc_next = grpc_configuration(material)
        for fronted, context in contexts.items():
            self._switches[fronted].current = context
        log.info("TLS settings reloaded: %s", ", ".join(self._changes(material, front)))
        self.material, self.front = material, front
        return True

    def _changes(self, material: Material | None, front: FrontProxy | None) -> list[str]:
        old, new = self.material, material
        said = [what for what, changed in (
            ("serving certificate", old is not None and new is not None and (old.cert, old.key) != (new.cert, new.key)),
            ("client CA", old is not None and new is not None and old.client_ca != new.client_ca),
            ("requestheader CA", front is not None and self.front is not None and front.ca_pem != self.front.ca_pem),
        ) if changed]
        if front is not None and self.front is not None and front.allowed_names != self.front.allowed_names:
            said.append(f"allowed names {list(front.allowed_names)}")
        return said or ["front proxy headers"]

