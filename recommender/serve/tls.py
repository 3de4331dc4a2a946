"""Server credentials from the PEM files in :class:`ServeSettings`, read once at start-up.

gRPC: TLS with the server certificate; with ``client_ca`` every client must present a certificate
that chains to it (KEDA: ``tlsClientCert``/``tlsClientKey`` in the trigger's authentication). HTTPS:
an ``ssl.SSLContext`` with TLS 1.2 or newer.
"""

from __future__ import annotations

import ssl
from pathlib import Path

import grpc

from recommender.errors import ConfigError
from recommender.serve.settings import ServeSettings


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


def ssl_context(settings: ServeSettings) -> ssl.SSLContext:
    """The HTTPS server context; ``client_ca`` is not applied here (the API server's front proxy
    authenticates with its own CA, which this server does not verify: see the README)."""
    if settings.tls_cert is None or settings.tls_key is None:
        raise ConfigError("HTTPS needs --tls-cert and --tls-key")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(settings.tls_cert, settings.tls_key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load the TLS certificate/key {settings.tls_cert}: {exc}") from None
    return ctx
