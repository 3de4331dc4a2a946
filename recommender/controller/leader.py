"""Leader election over a coordination.k8s.io/v1 Lease, so two controller replicas never write at once.

client-go's protocol, with fencing: :meth:`LeaderElector.tick` acquires or renews the lease and runs on
its own daemon thread every ``retry_period_s`` (:meth:`~LeaderElector.start`), whatever the reconcile
interval. The leader writes only while :meth:`~LeaderElector.holds` (its last successful renewal is
younger than ``renew_deadline_s``); the controller's :class:`Kube` calls :meth:`~LeaderElector.fence`
before every write, so a leader whose renewals fail stops writing before anyone may take over. A
follower takes over only a released lease, or one it has seen unchanged for ``lease_duration_s`` (its
own clock, as client-go: no trust in another replica's clock). Every lease write is a JSON patch that
``test``s the spec (and ``resourceVersion``) it read, so of two candidates racing exactly one wins.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from recommender.controller.kube import Conflict, Kube, KubeFailure, NotFound, NotLeader
from recommender.controller.lease import RELEASED, LeaseTiming, LeaseView, lease_spec, micro, read_lease

log = logging.getLogger("rightsizer.leader")


class LeaderElector:
    """Acquire, renew and release one Lease; ``kube`` is the raw client (its writes are not fenced)."""

    def __init__(self, kube: Kube, namespace: str, name: str, identity: str, timing: LeaseTiming | None = None,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.kube, self.namespace, self.name, self.identity = kube, namespace, name, identity
        self.timing, self.clock = timing or LeaseTiming(), clock
        self.last_error: str | None = None
        self._lock = threading.Lock()
        self._renewed_at: datetime | None = None  # clock read before our last successful lease write
        self._sent: deque[datetime] = deque(maxlen=4)  # renew times we wrote: a Lease showing one is ours
        self._seen: tuple[str, datetime] | None = None  # (the Lease as last read, when first seen so)
        self._warned = ""  # the bad Lease last logged
        self._met = False  # whether this process has read or created the Lease yet
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def holds(self) -> bool:
        """Whether this replica may write now: the last renewal is younger than the renew deadline."""
        with self._lock:
            at = self._renewed_at
        return at is not None and self.clock() < at + timedelta(seconds=self.timing.renew_deadline_s)

    def fence(self, action: str) -> None:
        """Called by the controller's Kube before each write; raises :class:`NotLeader` to stop it."""
        if not self.holds():
            with self._lock:
                at = self._renewed_at
            since = f"last renewed {micro(at)}" if at is not None else "not held"
            raise NotLeader(f"{action}: not sent, this replica does not hold lease {self.namespace}/{self.name} "
                            f"({since}, renew deadline {self.timing.renew_deadline_s:g} s)")

    def tick(self) -> bool:
        """Acquire or renew once; whether we hold the lease after it. Never raises for an API failure or a
        bad Lease (one log line); a failed renewal does not extend the lease."""
        try:
            lease = self.kube.get("Lease", self.namespace, self.name)
        except NotFound:
            first = not self._met  # a new install: create at once; a Lease deleted since: wait it out
            self._lose(None)
            return (first or self._unchanged_for("absent") >= self.timing.lease_duration_s) and self._create()
        except KubeFailure as exc:
            return self._failed(f"could not read lease: {exc}")
        view = read_lease(lease)
        self.last_error, self._met = None, True
        if view.holder == self.identity and view.renewed in self._sent:
            return self._write(view, takeover=False)
        self._lose(view.holder)
        if not self._may_take(view):
            return False
        return self._write(view, takeover=True)

    def start(self) -> None:
        """Acquire or renew now, then every ``retry_period_s`` on a daemon thread until :meth:`stop` (after
        which this elector writes the Lease no more, but for the release)."""
        self._stop.clear()
        self.tick()
        self._thread = threading.Thread(target=self._renew_forever, name="lease-renewal", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop renewing (a renewal in flight finishes), then release the lease."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2 * self.timing.api_timeout_s + self.timing.retry_period_s)
            self._thread = None
        self.release()

    def release(self) -> None:
        """On graceful shutdown, after the last write: let another replica take over at once."""
        with self._lock:
            self._renewed_at = None  # first: no write of ours passes the fence any more
        try:
            view = read_lease(self.kube.get("Lease", self.namespace, self.name))
            if view.holder != self.identity or view.renewed not in self._sent:
                return
            spec = {**view.raw_spec, "holderIdentity": "", "renewTime": micro(RELEASED)}
            self.kube.patch("Lease", self.namespace, self.name,
                            [*view.guard(), {"op": "replace", "path": "/spec", "value": spec}])
        except KubeFailure as exc:
            log.warning("could not release lease %s/%s: %s", self.namespace, self.name, exc)

    def _renew_forever(self) -> None:
        while not self._stop.wait(self.timing.retry_period_s):
            try:
                self.tick()
            except Exception:  # a bug: the thread must live on (the fence stops writes meanwhile)
                log.exception("lease renewal failed; retried in %g s", self.timing.retry_period_s)

    def _unchanged_for(self, key: str) -> float:
        """Seconds since we first read the Lease as ``key`` (0 when it just changed): a follower's own clock."""
        now = self.clock()
        if self._seen is None or self._seen[0] != key:
            self._seen = (key, now)
        return (now - self._seen[1]).total_seconds()

    def _may_take(self, view: LeaseView) -> bool:
        """A released lease at once; any other only after we saw it unchanged for the lease duration."""
        unchanged_s = self._unchanged_for(view.key)
        if view.problems:
            self.last_error = (f"lease {self.namespace}/{self.name} edited by hand? {'; '.join(view.problems)}: "
                               "not leading; taken over once unchanged for the lease duration")
            if self._warned != view.key:
                self._warned = view.key
                log.warning("%s", self.last_error)
        if view.released(self.clock(), self.timing.lease_duration_s):
            return True
        return unchanged_s >= max(self.timing.lease_duration_s, view.duration_s or 0)

    def _write(self, view: LeaseView, *, takeover: bool) -> bool:
        """Renew or take over with a guarded patch; a spec that is not a mapping is only repaired to {}."""
        if self._stop.is_set():
            return False  # stopped (or stopping): never write the Lease again, not even a renewal in flight
        if not isinstance(view.raw_spec, dict):
            return self._patch([*view.guard(), {"op": "add", "path": "/spec", "value": {}}], None, "repair")
        stamp = self.clock()  # read before the write: ours until stamp + renew deadline
        self._sent.append(stamp)  # before sending: a write that times out but lands is still ours
        spec = lease_spec(view, self.identity, self.timing.lease_duration_s, stamp)
        ok = self._patch([*view.guard(), {"op": "replace", "path": "/spec", "value": spec}], stamp,
                         "take over" if takeover else "renew")
        if ok and takeover:
            log.info("acquired lease %s/%s as %s (transition %s)", self.namespace, self.name, self.identity,
                     spec.get("leaseTransitions"))
        return ok

    def _patch(self, ops: list[dict[str, object]], stamp: datetime | None, what: str) -> bool:
        try:
            self.kube.patch("Lease", self.namespace, self.name, ops)
        except Conflict:
            return False  # someone else renewed or took over between our read and our write
        except KubeFailure as exc:
            return self._failed(f"could not {what} lease: {exc}")
        if stamp is None:
            return False
        with self._lock:
            self._renewed_at = stamp
        self.last_error = None
        return True

    def _create(self) -> bool:
        if self._stop.is_set():
            return False
        stamp = self.clock()
        self._sent.append(stamp)
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": lease_spec(None, self.identity, self.timing.lease_duration_s, stamp)}
        try:
            self.kube.create("Lease", self.namespace, body)
        except Conflict:
            return False  # another candidate created it first
        except KubeFailure as exc:
            return self._failed(f"could not create lease: {exc}")
        with self._lock:
            self._renewed_at = stamp
        self.last_error, self._met = None, True
        log.info("created lease %s/%s as %s", self.namespace, self.name, self.identity)
        return True

    def _lose(self, holder: str | None) -> None:
        """The Lease is not the one we wrote (or is gone): stop writing at once."""
        with self._lock:
            had, self._renewed_at = self._renewed_at is not None, None
        if had:
            log.warning("lost lease %s/%s %s", self.namespace, self.name,
                        f"to {holder!r}" if holder is not None else "(deleted or unreadable)")

    def _failed(self, message: str) -> bool:
        """One log line per new failure; the lease we hold (if any) runs out by itself."""
        if message != self.last_error:
            log.warning("%s", message)
        self.last_error = message
        return self.holds()
