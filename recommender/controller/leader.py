"""Leader election over a coordination.k8s.io/v1 Lease, so two controller replicas never act at once.

Same protocol as client-go's leaderelection: the holder renews ``renewTime`` every cycle; another
candidate takes over only after ``leaseDurationSeconds`` without a renewal. Every write is a JSON patch
that tests the holder and renew time it read (and ``resourceVersion`` when present), so of two
candidates racing for an expired lease exactly one wins. The clock is injected.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from recommender.controller.kube import Conflict, Kube, KubeFailure, NotFound
from recommender.timestamps import parse_time

log = logging.getLogger("rightsizer.leader")


def _micro(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """``is_leader()`` acquires or renews; call it at the start of every reconcile."""

    def __init__(self, kube: Kube, namespace: str, name: str, identity: str, lease_duration_s: int = 30,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.kube, self.namespace, self.name, self.identity = kube, namespace, name, identity
        self.lease_duration_s, self.clock = lease_duration_s, clock
        self.last_error: str | None = None

    def is_leader(self) -> bool:
        """True when we hold the lease after this call; API failures count as not leading (never raise)."""
        now = self.clock()
        try:
            lease = self.kube.get("Lease", self.namespace, self.name)
        except NotFound:
            return self._create(now)
        except KubeFailure as exc:
            self.last_error = str(exc)
            return False
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        renewed = parse_time(spec.get("renewTime")) or parse_time(spec.get("acquireTime"))
        duration = int(spec.get("leaseDurationSeconds") or self.lease_duration_s)
        expired = renewed is None or now >= renewed + timedelta(seconds=duration)
        if holder and holder != self.identity and not expired:
            return False
        ops: list[dict[str, Any]] = []
        rv = (lease.get("metadata") or {}).get("resourceVersion")
        if rv:
            ops.append({"op": "test", "path": "/metadata/resourceVersion", "value": rv})
        ops.append({"op": "test", "path": "/spec", "value": spec})  # exactly what we read
        new_spec = {**spec, "holderIdentity": self.identity, "leaseDurationSeconds": self.lease_duration_s,
                    "renewTime": _micro(now)}
        if holder != self.identity:
            new_spec |= {"acquireTime": _micro(now), "leaseTransitions": int(spec.get("leaseTransitions") or 0) + 1}
        ops.append({"op": "replace", "path": "/spec", "value": new_spec})
        return self._write(ops, "take over" if holder != self.identity else "renew")

    def release(self) -> None:
        """On graceful shutdown: let another replica take over at once instead of after expiry."""
        try:
            lease = self.kube.get("Lease", self.namespace, self.name)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return
            self.kube.patch("Lease", self.namespace, self.name, [
                {"op": "test", "path": "/spec/holderIdentity", "value": self.identity},
                {"op": "replace", "path": "/spec/holderIdentity", "value": ""},
                {"op": "replace", "path": "/spec/renewTime", "value": _micro(datetime.fromtimestamp(0, UTC))},
            ])
        except KubeFailure as exc:
            log.warning("could not release lease %s/%s: %s", self.namespace, self.name, exc)

    def _create(self, now: datetime) -> bool:
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": self.lease_duration_s,
                         "acquireTime": _micro(now), "renewTime": _micro(now), "leaseTransitions": 0}}
        try:
            self.kube.create("Lease", self.namespace, body)
        except KubeFailure as exc:  # 409: another candidate created it first
            self.last_error = str(exc)
            return False
        return True

    def _write(self, ops: list[dict[str, Any]], what: str) -> bool:
        try:
            self.kube.patch("Lease", self.namespace, self.name, ops)
        except Conflict:
            return False  # someone else renewed or took over between our read and write
        except KubeFailure as exc:
            self.last_error = f"could not {what} lease: {exc}"
            return False
        self.last_error = None
        return True
