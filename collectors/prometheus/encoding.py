"""Whether a range answer comes gzip-compressed, chosen by how fast each way delivers answers.

A large range answer is mostly JSON numbers: gzip makes it about 8× smaller, and costs the server about as much CPU
as evaluating the query (and the client some to inflate it). Over a slow link (a port-forward, a WAN) the bytes
decide and gzip is faster; over a fast one (loopback, a cluster's pod network) the CPU decides and an uncompressed
answer is. Which holds is measured, not assumed: the first answers come each way in turn, then each query asks the
way whose recent answers' bodies brought more bytes of JSON per second, and now and then one asks the other, so that
a change is seen and followed: as often as keeps those checks' cost within :data:`CHECK_COST` of the time (the
closer the two ways, the oftener). A body is timed from the answer's headers to its last byte read and inflated:
Prometheus sends the headers once it has evaluated the query and encoded the JSON, which the encoding does not
change, so what is timed is what it does change (compressing, carrying, inflating), whatever the query cost.
"""

from __future__ import annotations

import threading
from collections import deque

from recommender.core.settings_sources import Compression

GZIP = "gzip"
IDENTITY = "identity"
WAYS = (GZIP, IDENTITY)
FIRST = 2  # measured answers each way before either is preferred
KEPT = 8  # the last measured answers of each way that its rate is taken over
MIN_BYTES = 64 * 1024  # an answer measures its way from this much JSON: a smaller one's time is mostly fixed costs
CHECK_COST = 0.05  # the share of the time that asking the slower way now and then may cost


class Encodings:
    """The ``Accept-Encoding`` each range query asks for: ``compression`` fixed (``gzip``, ``identity``), or ``auto``:
    the way with the higher rate (JSON bytes per second, over each way's last :data:`KEPT` measured answers); ties
    and no measure yet go to gzip (fewer bytes). Asking the slower way costs ``ratio - 1`` of a query's time, where
    ``ratio`` is how many times faster the other is, so it is asked once in ``(ratio - 1) / CHECK_COST`` queries (at
    least every other one). Safe to share between threads."""

    def __init__(self, compression: Compression = "auto") -> None:
        self.compression = compression
        self._lock = threading.Lock()
        self._asked = dict.fromkeys(WAYS, 0)
        self._seen: dict[str, deque[tuple[int, float]]] = {w: deque(maxlen=KEPT) for w in WAYS}
        self._since_check = 0  # queries that asked the preferred way since the other was last asked
        self.checks = 0  # queries that asked the way not preferred, once both had measures

    def pick(self) -> str:
        """The encoding the next query asks for."""
        with self._lock:
            if self.compression != "auto":
                way: str = self.compression
            elif min(len(kept) for kept in self._seen.values()) < FIRST:  # in turn until each way has measures
                way = min(WAYS, key=lambda w: (len(self._seen[w]), self._asked[w]))
            else:
                way, ratio = self._preferred()
                if self._since_check + 1 >= max(2.0, (ratio - 1) / CHECK_COST):
                    way, self._since_check = IDENTITY if way == GZIP else GZIP, 0
                    self.checks += 1
                else:
                    self._since_check += 1
            self._asked[way] += 1
            return way

    def saw(self, way: str, body_bytes: int, seconds: float) -> None:
        """An answer asked ``way`` brought ``body_bytes`` of JSON (inflated) in ``seconds``, from its headers to its
        last byte read and inflated. One under :data:`MIN_BYTES`, or with no time, is not kept."""
        if way in self._seen and seconds > 0 and body_bytes >= MIN_BYTES:
            with self._lock:
                self._seen[way].append((body_bytes, seconds))

    def preferred(self) -> str:
        """The way with the higher rate over its kept answers; gzip where either way has none or they tie."""
        with self._lock:
            return self._preferred()[0]

    def _preferred(self) -> tuple[str, float]:
        """The preferred way, and how many times the other's rate its rate is (1.0 where either has no measure)."""
        rates = {}
        for w in WAYS:
            kept = self._seen[w]
            if not kept:
                return GZIP, 1.0
            rates[w] = sum(b for b, _ in kept) / sum(s for _, s in kept)
        best = IDENTITY if rates[IDENTITY] > rates[GZIP] else GZIP
        return best, rates[best] / rates[IDENTITY if best == GZIP else GZIP]

    def asked(self, way: str) -> int:
        """Queries that asked ``way`` so far."""
        with self._lock:
            return self._asked.get(way, 0)
