"""Server credentials from the PEM files in :class:`ServeSettings`.

gRPC: TLS with the server certificate; with ``client_ca`` every client must present a certificate
that chains to it (KEDA: ``tlsClientCert``/``tlsClientKey`` in the trigger's authentication). HTTPS:
an ``ssl.SSLContext`` with TLS 1.2 or newer; with a front proxy (frontproxy.py) it asks for a client
certificate (optional, so probes without one still connect) and trusts only the requestheader CA.
Those are read once at start-up, except the front proxy: :class:`FrontProxyReloader` re-reads it, as
k8s.io/apiserver does, since the cluster rotates its requestheader CA without telling us.
"""

from __future__ import annotations

import logging
import ssl
from pathlib import Path
from typing import Any

import grpc

from recommender.errors import ConfigError, RightsizerError
from recommender.serve import frontproxy
from recommender.serve.frontproxy import FrontProxy
from recommender.serve.settings import ServeSettings

log = logging.getLogger("recommender.serve")


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None


def grpc_credentials(settings: ServeSettings) -> grpc.ServerCredentials | None:
    """None for plaintext; TLS (mutual when ``client_ca`` is set) otherwise."""
    if settings.tls_cert is None or settings.tls_key is None:
        return None
    pair = (_read(settings.tls_key, "TLS key"), _read(settings.tls_cert, "TLS certificate"))
    ca = _read(settings.client_ca, "client CA") if settings.client_ca else None
    return grpc.ssl_server_credentials([pair], root_certificates=ca, require_client_auth=ca is not None)


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


class FrontProxyReloader:
    """The front proxy the HTTPS server enforces, re-read by :meth:`reload` and swapped in when it changed.

    ``context`` is the server's SSL context for its whole life; a TLS handshake switches to the latest
    context from its server-name callback (called with or without SNI), so a new CA applies to the next
    connection and the old CA no longer verifies. A reload that fails keeps the last good settings and
    warns: the API is never left open, and a flaky API server does not lock the HPA out.
    """

    def __init__(self, settings: ServeSettings, front: FrontProxy, kube_api: Any = None) -> None:
        self.settings, self.kube_api = settings, kube_api
        self.front = front
        self.context = self.current = ssl_context(settings, front)
        self.context.sni_callback = self._switch

    def _switch(self, sslobj: ssl.SSLObject, _server_name: str | None, _ctx: ssl.SSLContext) -> None:
        sslobj.context = self.current

    def reload(self) -> bool:
        """Re-read the front proxy; True when it changed and now applies (blocking I/O: run it off the loop)."""
        try:
            front = load_front_proxy(self.settings, self.kube_api)
            if front is None or front == self.front:
                return False
            context = ssl_context(self.settings, front)
        except RightsizerError as exc:
            log.warning("front proxy not reloaded, the last one still applies: %s", exc)
            return False
        what = "changed" if front.ca_pem != self.front.ca_pem else "unchanged"
        self.current, self.front = context, front
        log.info("front proxy reloaded: requestheader CA %s, allowed names %s", what, list(front.allowed_names))
        return True
