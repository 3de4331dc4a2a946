"""HMAC signatures that make the controller's own annotations unforgeable by whoever can edit the object.

A workload's change record lives in its annotations, which every tenant who may edit the workload can
write. The controller acts on a record (rollback, the regression check, rate limits) only when it carries
an HMAC-SHA256 made with a key that only the controller can read: a Secret in its own namespace, data key
``current`` signs, every data key verifies (keep the old key under another name, e.g. ``previous``, while
records signed with it should still count). The MAC covers the object's uid, kind, namespace and name and
the exact annotation text, so a record copied onto another object, or edited by one byte, does not verify.
A key's bytes never leave this module: errors name the Secret, never its data.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from recommender.controller.kube import Kube, KubeFailure, NotFound

SIGNING_SECRET = "gpu-rightsizer-signing-key"
CURRENT = "current"  # the Secret data key that signs
MIN_KEY_BYTES = 16
_SCHEME = "hmac-sha256"


class SigningKeyError(KubeFailure):
    """No usable signing key: the controller then writes no change and acts on no record."""


@dataclass(frozen=True)
class Signer:
    """Keys by name; ``current`` is the one that signs."""

    keys: Mapping[str, bytes] = field(repr=False)
    current: str = CURRENT

    def sign(self, subject: str, text: str) -> str:
        """``hmac-sha256:<key id>:<hex>`` over ``subject`` (whose object) and ``text`` (the annotation). The key
        id is a fingerprint of the key, not its name, so a key renamed ``previous`` on rotation still verifies."""
        key = self.keys[self.current]
        return f"{_SCHEME}:{key_id(key)}:{_mac(key, subject, text)}"

    def verify(self, subject: str, text: str, signature: str | None) -> str | None:
        """None when ``signature`` is ours over exactly this subject and text, else why not (one line)."""
        if not signature:
            return "it is not signed"
        scheme, _, rest = signature.partition(":")
        name, _, mac = rest.rpartition(":")
        if scheme != _SCHEME or not name or not mac:
            return "its signature is malformed"
        key = next((k for k in self.keys.values() if key_id(k) == name), None)
        if key is None:
            return f"it is signed with key {name!r}, which the signing Secret no longer holds"
        if not hmac.compare_digest(_mac(key, subject, text), mac):
            return "its signature does not match (edited, or copied from another object)"
        return None


def subject_of(obj: Mapping[str, Any]) -> str:
    """What a signature binds an annotation to: the object's identity, uid included."""
    meta = obj.get("metadata") or {}
    return "|".join(str(x or "") for x in (obj.get("kind"), meta.get("namespace"), meta.get("name"), meta.get("uid")))


def key_id(key: bytes) -> str:
    """A public fingerprint of a key (not enough to recover or use it)."""
    return hashlib.sha256(b"gpu-rightsizer key id\n" + key).hexdigest()[:12]


def _mac(key: bytes, subject: str, text: str) -> str:
    return hmac.new(key, f"{subject}\n{text}".encode(), hashlib.sha256).hexdigest()


def signer_from_secret(secret: Mapping[str, Any], where: str) -> Signer:
    """A :class:`Signer` from a Secret as the API returns it (``data`` base64); raises SigningKeyError."""
    data = secret.get("data") or {}
    keys: dict[str, bytes] = {}
    for name, value in data.items():
        try:
            keys[str(name)] = base64.b64decode(str(value), validate=True)
        except ValueError:
            raise SigningKeyError(f"signing Secret {where}: data key {name!r} is not base64") from None
    if CURRENT not in keys:
        raise SigningKeyError(f"signing Secret {where} has no data key {CURRENT!r}")
    short = sorted(n for n, k in keys.items() if len(k) < MIN_KEY_BYTES)
    if short:
        raise SigningKeyError(f"signing Secret {where}: key {short[0]!r} is shorter than {MIN_KEY_BYTES} bytes")
    return Signer(keys)


class KeySource(Protocol):
    def load(self) -> Signer:
        """The keys now; raises SigningKeyError."""
        ...


class SecretKeys:
    """The signing keys from a Secret, read at every :meth:`load` (so a rotation counts from the next
    cycle). ``create``: make the Secret with a random key when it does not exist (the controller's own
    namespace); the ``rightsizer rollback`` CLI only reads."""

    def __init__(self, kube: Kube, namespace: str, name: str = SIGNING_SECRET, create: bool = False) -> None:
        self.kube, self.namespace, self.name, self.create = kube, namespace, name, create

    @property
    def where(self) -> str:
        return f"{self.namespace}/{self.name}"

    def load(self) -> Signer:
        try:
            return signer_from_secret(self.kube.get("Secret", self.namespace, self.name), self.where)
        except NotFound:
            if not self.create:
                raise SigningKeyError(f"signing Secret {self.where} not found") from None
        except SigningKeyError:
            raise
        except KubeFailure as exc:
            raise SigningKeyError(f"signing Secret {self.where} not read: {exc}") from None
        return self._create()

    def _create(self) -> Signer:
        key = base64.b64encode(secrets.token_bytes(32)).decode()
        body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": self.name, "namespace": self.namespace,
                             "labels": {"app.kubernetes.io/name": "gpu-rightsizer"}},
                "data": {CURRENT: key}}
        try:
            self.kube.create("Secret", self.namespace, body)
        except KubeFailure as exc:  # 409: another replica made it first; read theirs
            if exc.status != 409:
                raise SigningKeyError(f"signing Secret {self.where} not created: {exc}") from None
            try:
                return signer_from_secret(self.kube.get("Secret", self.namespace, self.name), self.where)
            except SigningKeyError:
                raise
            except KubeFailure as again:
                raise SigningKeyError(f"signing Secret {self.where} not read: {again}") from None
        return signer_from_secret(body, self.where)


class StaticKeys:
    """Fixed keys (tests, or a key file mounted by the user)."""

    def __init__(self, signer: Signer) -> None:
        self.signer = signer

    def load(self) -> Signer:
        return self.signer
