"""Two controller replicas on one fake timeline: an in-process Lease server, a discrete-event clock, and a
spy on every write a controller sends.

Why a fake Lease server and not kmock for the Lease: the renewal ticks of two replicas every 5 s over
20 reconcile intervals of 300 s are thousands of Lease reads and patches per scenario; over HTTP that
is seconds of test time per scenario for nothing the fake does not do. The fake keeps the semantics the
protocol relies on: JSON patch applied by ``jsonpatch`` (the library kmock applies), a failed ``test``
op (or a bad path) a :class:`Conflict` as the real server's 422, a create of an existing Lease a
:class:`Conflict` as its 409, and a ``resourceVersion`` bumped on every write as a real server does
(kmock has none). ``tests/test_controller_leader.py`` runs the elector's rules on both backends. The
workloads the controllers write stay on kmock (real HTTP), where the spy sits in the ``ApiClient``, so
it sees what is really sent, whatever the fence does.
"""

from __future__ import annotations

import copy
import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import jsonpatch
from kubernetes import client

from recommender.controller.kube import Conflict, Kube, KubeFailure, NotFound
from recommender.core.timestamps import parse_time


class LeaseServer:
    """One Lease, written only through :class:`LeaseClient` (each replica has its own)."""

    def __init__(self, clock: Callable[[], datetime]) -> None:
        self.clock = clock
        self.obj: dict[str, Any] | None = None
        self.version = 0
        self.failing: set[tuple[str, str]] = set()  # (identity, "get" | "patch" | "create"): answers 500
        self.log: list[tuple[datetime, str, dict[str, Any]]] = []  # (when, who, spec written)

    def client(self, who: str) -> LeaseClient:
        return LeaseClient(self, who)

    def seed(self, obj: dict[str, Any]) -> None:
        self.obj = copy.deepcopy(obj)

    def spec(self) -> dict[str, Any]:
        return dict((self.obj or {}).get("spec") or {})

    def _store(self, obj: dict[str, Any], who: str) -> None:
        self.version += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        self.obj = obj
        self.log.append((self.clock(), who, copy.deepcopy(obj.get("spec") or {})))


class LeaseClient(Kube):
    """The Lease calls of :class:`Kube` (get, create, JSON patch) against a :class:`LeaseServer`."""

    def __init__(self, server: LeaseServer, who: str) -> None:  # no ApiClient: nothing goes over HTTP
        self.server, self.who = server, who
        self.timeout_s = self.write_timeout_s = 10.0
        self.fence = None

    def _fault(self, verb: str, action: str) -> None:
        if (self.who, verb) in self.server.failing:
            raise KubeFailure(f"{action}: HTTP 500 Internal Server Error (injected)", 500)

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any]:
        assert kind == "Lease"
        self._fault("get", f"read Lease {namespace}/{name}")
        if self.server.obj is None:
            raise NotFound(f"Lease {namespace}/{name} not found", 404)
        return copy.deepcopy(self.server.obj)

    def create(self, kind: str, namespace: str | None, body: dict[str, Any]) -> dict[str, Any]:
        assert kind == "Lease"
        self._fault("create", "create Lease")
        if self.server.obj is not None:
            raise Conflict("create Lease: already exists (HTTP 409)", 409)
        self.server._store(copy.deepcopy(body), self.who)
        return copy.deepcopy(body)

    def patch(self, kind: str, namespace: str | None, name: str, body: Any, *, subresource: str = "",
              merge: bool = False) -> dict[str, Any]:
        assert kind == "Lease" and isinstance(body, list) and not merge and not subresource
        self._fault("patch", f"patch Lease {namespace}/{name}")
        if self.server.obj is None:
            raise NotFound(f"Lease {namespace}/{name} not found", 404)
        try:
            new = jsonpatch.apply_patch(self.server.obj, body, in_place=False)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
            raise Conflict(f"patch Lease {namespace}/{name}: {exc} (HTTP 422)", 422) from None
        self.server._store(new, self.who)
        return copy.deepcopy(new)


class Timeline:
    """A fake clock and the jobs due on it; :meth:`run_until` runs them in time order (re-entrant: a job
    that takes time calls it again, so the other replica's ticks run meanwhile)."""

    def __init__(self, start: datetime) -> None:
        self.now = start
        self._queue: list[tuple[datetime, int, Callable[[], None]]] = []
        self._seq = itertools.count()

    def clock(self) -> datetime:
        return self.now

    def at(self, when: datetime, job: Callable[[], None]) -> None:
        heapq.heappush(self._queue, (when, next(self._seq), job))

    def every(self, first: datetime, period_s: float, job: Callable[[], None], *, after_end: bool) -> None:
        """``job`` at ``first`` and then every ``period_s``: counted from when it ended (a thread that waits
        between ticks) or from when it was due (apscheduler's interval trigger)."""
        def run(due: datetime) -> Callable[[], None]:
            def go() -> None:
                job()
                nxt = (self.now if after_end else due) + timedelta(seconds=period_s)
                self.at(nxt, run(nxt))
            return go
        self.at(first, run(first))

    def run_until(self, end: datetime) -> None:
        while self._queue and self._queue[0][0] <= end:
            when, _, job = heapq.heappop(self._queue)
            self.now = max(self.now, when)
            job()
        self.now = max(self.now, end)

    def advance(self, seconds: float) -> None:
        self.run_until(self.now + timedelta(seconds=seconds))


@dataclass
class Write:
    at: datetime
    who: str
    what: str
    holder: Any  # the Lease's holder when the write was sent
    expires: datetime | None  # renewTime + leaseDurationSeconds then


@dataclass
class Ledger:
    """Every write any replica sent, with the Lease as the server had it at that moment."""

    timeline: Timeline
    server: LeaseServer
    margin_s: float  # a write must land this long before the lease expires (the API timeout)
    write_s: float = 1.0  # how long each write takes; ticks due meanwhile run
    writes: list[Write] = field(default_factory=list)

    def sent(self, who: str, what: str) -> None:
        spec = self.server.spec()
        renewed, duration = parse_time(spec.get("renewTime")), spec.get("leaseDurationSeconds")
        expires = renewed + timedelta(seconds=duration) if renewed and isinstance(duration, int) else None
        self.writes.append(Write(self.timeline.now, who, what, spec.get("holderIdentity"), expires))
        self.timeline.advance(self.write_s)
        after = self.server.spec().get("holderIdentity")
        if after != who:  # taken over while our write was in flight: as bad as sent by a non-holder
            self.writes.append(Write(self.timeline.now, who, f"{what} (landed)", after, expires))

    def violations(self) -> list[Write]:
        """Writes sent by a replica the Lease did not name, or too close to (or past) its expiry."""
        margin = timedelta(seconds=self.margin_s)
        return [w for w in self.writes if w.holder != w.who or w.expires is None or w.at + margin >= w.expires]

    def by(self, who: str) -> list[Write]:
        return [w for w in self.writes if w.who == who]


class SpyApi(client.ApiClient):
    """An ApiClient that tells the ledger about each non-GET request before sending it."""

    def __init__(self, host: str, who: str, ledger: Ledger) -> None:
        super().__init__(client.Configuration(host=host))
        self.who, self.ledger = who, ledger

    def call_api(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if method != "GET":
            self.ledger.sent(self.who, f"{method} {urlsplit(url).path}")
        return super().call_api(method, url, *args, **kwargs)
