"""Whether a range answer comes gzip-compressed, chosen by how fast each way delivers answers.

A large range answer is mostly JSON numbers: gzip makes it about 8× smaller, and costs the server about as much CPU
as evaluating the query (and the client some to inflate it). Over a slow link (a port-forward, a WAN) the bytes
decide and gzip is faster; over a fast one (loopback, a cluster's pod network) the CPU decides and an uncompressed
answer is. Which holds is measured, not assumed: the first queries ask each way in turn, then each query asks the
way whose recent answers' bodies brought more bytes of JSON per second, and one in :data:`CHECK_EVERY` asks the
other, so that a change of link or of server load is seen and followed. A body is timed from the answer's headers
to its last byte read and inflated: Prometheus sends the headers once it has evaluated the query and encoded the
JSON, which the encoding does not change, so what is timed is what it does change (compressing, carrying,
inflating), whatever the query cost to evaluate.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Literal

GZIP = "gzip"
IDENTITY = "identity"
Compression = Literal["auto", "gzip", "identity"]
WAYS = (GZIP, IDENTITY)
FIRST = 2  # answers asked each way before either is preferred
KEPT = 8  # the last answers of each way that its rate is taken over
CHECK_EVERY = 8  # of the queries after the first, one in this many asks the way not preferred


class Encodings:
    """The ``Accept-Encoding`` each range query asks for: ``compression`` fixed (``gzip``, ``identity``), or ``auto``:
    the way with the higher rate (JSON bytes per second, over each way's last :data:`KEPT` answers); ties and no
    measure yet go to gzip (fewer bytes). Safe to share between threads."""

    def __init__(self, compression: Compression = "auto") -> None:
        self.compression = compression
        self._lock = threading.Lock()
        self._asked = dict.fromkeys(WAYS, 0)
        self._seen: dict[str, deque[tuple[int, float]]] = {w: deque(maxlen=KEPT) for w in WAYS}
        self._since_check = 0  # queries that asked the preferred way since the other was last asked

    def pick(self) -> str:
        """The encoding the next query asks for."""
        with self._lock:
            if self.compression != "auto":
                way: str = self.compression
            elif min(self._asked.values()) < FIRST:  # each way in turn until each has been asked FIRST times
                way = min(WAYS, key=lambda w: self._asked[w])
            elif self._since_check >= CHECK_EVERY - 1:
                way, self._since_check = IDENTITY if self._preferred() == GZIP else GZIP, 0
            else:
                way = self._preferred()
                self._since_check += 1
            self._asked[way] += 1
            return way

    def saw(self, way: str, body_bytes: int, seconds: float) -> None:
        """An answer asked ``way`` brought ``body_bytes`` of JSON (inflated) in ``seconds``, from its headers to its
        last byte read and inflated. An answer no rate can be taken from (no time, no bytes) is not kept."""
        if way in self._seen and seconds > 0 and body_bytes > 0:
            with self._lock:
                self._seen[way].append((body_bytes, seconds))

    def preferred(self) -> str:
        """The way with the higher rate over its kept answers; gzip where either way has none or they tie."""
        with self._lock:
            return self._preferred()

    def _preferred(self) -> str:
        rates = {}
        for w in WAYS:
            kept = self._seen[w]
            if not kept:
                return GZIP
            rates[w] = sum(b for b, _ in kept) / sum(s for _, s in kept)
        return IDENTITY if rates[IDENTITY] > rates[GZIP] else GZIP

    def asked(self, way: str) -> int:
        """Queries that asked ``way`` so far."""
        with self._lock:
            return self._asked.get(way, 0)
