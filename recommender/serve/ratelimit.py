"""A per-client token bucket: a cheap brake on a misbehaving or hostile client, not a quota system.

Pure state plus an injected monotonic clock; the servers key it by the peer address (without port), or
by the end user the front proxy names. One client legitimately asks for every workload at once (KEDA's
operator for all ScaledObjects, the HPA controller for all HPAs), so :func:`budget` grows the bucket
with the number of workloads the plan scales and the servers :meth:`RateLimiter.resize` it per plan.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

MAX_CLIENTS = 10_000  # beyond this, forget full buckets first (they would allow a full burst anyway)


class RateLimiter:
    """``allow(client)`` spends one token; buckets hold ``burst`` and refill at ``rate_per_s``."""

    def __init__(self, rate_per_s: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        if rate_per_s <= 0 or burst < 1:
            raise ValueError("rate_per_s must be > 0 and burst >= 1")
        self.rate_per_s, self.burst, self._clock = rate_per_s, burst, clock
        self._buckets: dict[str, tuple[float, float]] = {}  # client → (tokens, at)
        self._lock = threading.Lock()

    def allow(self, client: str) -> bool:
        now = self._clock()
        with self._lock:
            tokens, at = self._buckets.get(client, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - at) * self.rate_per_s)
            allowed = tokens >= 1.0
            self._buckets[client] = (tokens - 1.0 if allowed else tokens, now)
            if len(self._buckets) > MAX_CLIENTS:
                self._forget(now)
            return allowed

    def resize(self, rate_per_s: float, burst: int) -> None:
        """New refill rate and bucket size for every client; tokens already held carry over (up to ``burst``)."""
        if rate_per_s <= 0 or burst < 1:
            raise ValueError("rate_per_s must be > 0 and burst >= 1")
        with self._lock:
            self.rate_per_s, self.burst = rate_per_s, burst

    def _forget(self, now: float) -> None:
        full = [c for c, (t, at) in self._buckets.items() if t + (now - at) * self.rate_per_s >= self.burst]
        for client in full or list(self._buckets)[: len(self._buckets) // 2]:
            del self._buckets[client]


BURST_S = 4.0  # seconds of the per-workload rate a client may spend at once: an HPA sync asks for all quickly


def budget(rate_per_s: float, burst: int, per_workload_s: float, workloads: int) -> tuple[float, int]:
    """(rate, burst) for one client: ``per_workload_s`` per scaled workload, never under the configured
    ``rate_per_s``; the burst gains ``BURST_S`` seconds of the workloads' rate."""
    added = per_workload_s * max(0, workloads)
    return max(rate_per_s, added), burst + math.ceil(added * BURST_S)


def client_of_peer(peer: str) -> str:
    """gRPC ``ipv4:10.0.0.1:5000`` / ``ipv6:[::1]:5000`` → the host part (one bucket per host)."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6" and rest.startswith("["):
        return rest[1:rest.find("]")] if "]" in rest else rest
    if kind == "ipv4":
        return rest.rsplit(":", 1)[0]
    return peer
