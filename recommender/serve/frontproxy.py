"""Who may call the external metrics API: the kube-apiserver's front proxy, as Kubernetes defines it.

An aggregated API server trusts a request when the TLS client certificate chains to the requestheader
client CA (checked by the TLS layer, see tls.py), its CN is in ``requestheader-allowed-names`` (any CN
when that list is empty), and a username header (``X-Remote-User``) names the end user. The same
settings are published in the ConfigMap kube-system/extension-apiserver-authentication, whose list
values are JSON arrays. Header semantics follow k8s.io/apiserver's requestheader authenticator: the
first non-empty username header wins; groups are all non-empty values of all group headers; extra
keys are lower-cased and %-unescaped after the prefix.

Pure: the peer certificate arrives as ``ssl.SSLSocket.getpeercert()`` left it, headers as
(name, value) pairs. No I/O here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from recommender.core.errors import ConfigError

CONFIGMAP_NAMESPACE = "kube-system"
CONFIGMAP_NAME = "extension-apiserver-authentication"
CA_KEY = "requestheader-client-ca-file"  # the PEM itself, despite the name
ALLOWED_NAMES_KEY = "requestheader-allowed-names"
USERNAME_HEADERS_KEY = "requestheader-username-headers"
GROUP_HEADERS_KEY = "requestheader-group-headers"
EXTRA_PREFIXES_KEY = "requestheader-extra-headers-prefix"
USERNAME_HEADERS = ("X-Remote-User",)
GROUP_HEADERS = ("X-Remote-Group",)
EXTRA_PREFIXES = ("X-Remote-Extra-",)


@dataclass(frozen=True)
class FrontProxy:
    """The requestheader settings one server enforces; ``ca_pem`` is the client CA bundle (PEM text)."""

    ca_pem: str
    allowed_names: tuple[str, ...] = ()
    username_headers: tuple[str, ...] = USERNAME_HEADERS
    group_headers: tuple[str, ...] = GROUP_HEADERS
    extra_prefixes: tuple[str, ...] = EXTRA_PREFIXES


@dataclass(frozen=True)
class RemoteUser:
    """The end user the API server authenticated and passes on in headers."""

    name: str
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Denied:
    """Why a request is refused: 401, as the kube-apiserver's own request-header authenticator answers
    (a CN outside requestheader-allowed-names is an authentication failure there too)."""

    code: int
    message: str


def header_names(names: Iterable[str], what: str) -> tuple[str, ...]:
    """Trimmed header names; an empty one is a configuration error (as in Kubernetes)."""
    out = tuple(n.strip() for n in names)
    if any(not n for n in out):
        raise ConfigError(f"{what}: empty header name in {list(names)!r}")
    return out


def from_configmap(data: Mapping[str, str]) -> FrontProxy:
    """The front-proxy settings of extension-apiserver-authentication's ``data``; missing lists take
    Kubernetes' defaults, except the allowed names (missing: any CN)."""
    ca = (data.get(CA_KEY) or "").strip()
    if not ca:
        raise ConfigError(f"ConfigMap {CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME} has no {CA_KEY}: "
                          "the API server runs without --requestheader-client-ca-file (no aggregation layer)")
    return FrontProxy(
        ca_pem=ca + "\n",
        allowed_names=_json_list(data, ALLOWED_NAMES_KEY, ()),
        username_headers=header_names(_json_list(data, USERNAME_HEADERS_KEY, USERNAME_HEADERS), USERNAME_HEADERS_KEY),
        group_headers=header_names(_json_list(data, GROUP_HEADERS_KEY, GROUP_HEADERS), GROUP_HEADERS_KEY),
        extra_prefixes=header_names(_json_list(data, EXTRA_PREFIXES_KEY, EXTRA_PREFIXES), EXTRA_PREFIXES_KEY))


def _json_list(data: Mapping[str, str], key: str, default: tuple[str, ...]) -> tuple[str, ...]:
    raw = data.get(key)
    if not raw:
        return default
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"ConfigMap {CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME} key {key} is not a JSON list of "
                          f"strings: {raw[:80]!r}")
    return tuple(value)


def common_name(peercert: Mapping[str, Any] | None) -> str | None:
    """The subject CN of a verified peer certificate (``getpeercert()``), None without one."""
    for rdn in (peercert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


def cn_allowed(cn: str, allowed: tuple[str, ...]) -> bool:
    """Kubernetes' rule: any CN when the list is empty, else an exact match."""
    return not allowed or cn in allowed


def remote_user(headers: Iterable[tuple[str, str]], fp: FrontProxy) -> RemoteUser | None:
    """The user in the headers, or None when no username header has a value."""
    pairs = [(k.lower(), v) for k, v in headers]

    def values(name: str) -> list[str]:
        return [v for k, v in pairs if k == name.lower() and v]

    name = next((vs[0] for h in fp.username_headers if (vs := values(h))), None)
    if name is None:
        return None
    groups = tuple(v for h in fp.group_headers for v in values(h))
    extra: dict[str, tuple[str, ...]] = {}
    for prefix in (p.lower() for p in fp.extra_prefixes):
        for k, v in pairs:
            if k.startswith(prefix) and len(k) > len(prefix):
                key = unquote(k[len(prefix):])
                extra[key] = (*extra.get(key, ()), v)
    return RemoteUser(name, groups, extra)


def authenticate(peercert: Mapping[str, Any] | None, headers: Iterable[tuple[str, str]],
                 fp: FrontProxy) -> RemoteUser | Denied:
    """The end user of a request the front proxy forwarded, or why it is refused.

    ``peercert`` is only ever a certificate the TLS layer verified against ``fp.ca_pem``: one from
    another CA fails the handshake and never gets here."""
    cn = common_name(peercert)
    if cn is None:
        return Denied(401, "this API is served to the Kubernetes API server only; "
                           "no client certificate signed by the requestheader client CA")
    if not cn_allowed(cn, fp.allowed_names):
        return Denied(401, f"client certificate CN {cn!r} is not in requestheader-allowed-names")
    user = remote_user(headers, fp)
    if user is None:
        return Denied(401, f"no user in {', '.join(fp.username_headers)}")
    return user
