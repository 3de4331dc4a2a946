"""Whether range answers come compressed (``prometheus.compression``): the choice by measure (pure), and through a
real link in front of a real Prometheus that forwards the encoding asked, slowly where a test says so."""

from __future__ import annotations

import contextlib
import itertools
import math
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import numpy as np
import pytest

from collectors.pods import PodUsage
from collectors.prometheus import PromClient, QueryStats, collect_pod_usage
from collectors.prometheus.encoding import CHECK_COST, FIRST, GZIP, IDENTITY, KEPT, MIN_BYTES, Encodings
from recommender.core.progress import RecordingProgress
from recommender.core.settings import Settings
from recommender.core.settings_sources import PrometheusSettings
from tests import promcluster as pc
from tests.promcluster import Cluster
from tests.promfixture import PromServer, Series, loopback_http, require_prometheus, tsdb_of

BIG = 1_000_000  # JSON bytes of an answer that measures its way


def picks(e: Encodings, n: int) -> list[str]:
    return [e.pick() for _ in range(n)]


def every(ratio: float) -> int:
    """One query in how many asks the slower way, where the other is ``ratio`` times as fast."""
    return math.ceil(max(2.0, (ratio - 1) / CHECK_COST))


def test_fixed_compression_asks_one_way_whatever_is_measured() -> None:
    for way in (GZIP, IDENTITY):
        e = Encodings(way)
        for _ in range(KEPT):
            e.saw(GZIP if way == IDENTITY else IDENTITY, BIG, 0.001)  # the other way, far faster
        assert set(picks(e, 50)) == {way}


def test_auto_asks_each_way_in_turn_until_each_has_measures() -> None:
    e = Encodings()
    first = picks(e, 2 * FIRST)
    assert first.count(GZIP) == first.count(IDENTITY) == FIRST
    assert all(a != b for a, b in itertools.pairwise(first))  # in turn
    assert e.preferred() == GZIP  # nothing measured yet: the fewer bytes
    for way in first:  # small answers measure nothing: their time is mostly fixed costs
        e.saw(way, MIN_BYTES - 1, 0.000001 if way == IDENTITY else 1.0)
    assert picks(e, 4).count(IDENTITY) == 2
    for _ in range(FIRST):
        e.saw(IDENTITY, BIG, 1.0)
    assert picks(e, 3) == [GZIP] * 3  # the way still without measures
    for _ in range(FIRST):
        e.saw(GZIP, BIG, 1.0)
    assert e.preferred() == GZIP  # a tie


@pytest.mark.parametrize("ratio", [8.0, 1.5, 1.05])
def test_auto_asks_the_faster_way_and_the_other_as_often_as_that_costs_little(ratio: float) -> None:
    e = Encodings()
    picks(e, 2 * FIRST)
    for _ in range(FIRST):
        e.saw(GZIP, BIG, 1.0)
        e.saw(IDENTITY, int(BIG * ratio), 1.0)  # a fast link, where compressing and inflating cost most
    n = every(ratio)
    later = picks(e, 10 * n)
    assert later.count(GZIP) == e.checks == 10  # one in n, evenly
    assert all(later[i] == GZIP for i in range(n - 1, len(later), n))
    # what the checks cost, in queries' time at the faster way's rate: within the budget
    assert later.count(GZIP) * (ratio - 1) <= CHECK_COST * len(later) or n == 2


def test_auto_follows_a_link_that_becomes_slow() -> None:
    e = Encodings()
    picks(e, 2 * FIRST)
    for _ in range(KEPT):
        e.saw(GZIP, BIG, 1.0)
        e.saw(IDENTITY, 8 * BIG, 1.0)
    assert e.preferred() == IDENTITY
    for _ in range(KEPT // 2):  # the link slows (a port-forward): uncompressed answers now take 20x as long
        e.saw(IDENTITY, 8 * BIG, 20.0)
    assert e.preferred() == GZIP
    ratio = BIG / (KEPT * 8 * BIG / (KEPT // 2 * 21.0))  # gzip's rate over identity's last KEPT answers
    later = picks(e, 10 * every(ratio))
    assert abs(later.count(IDENTITY) - 10) <= 1


def test_answers_no_rate_can_be_taken_from_are_not_kept() -> None:
    e = Encodings()
    e.saw(IDENTITY, BIG, 0.0)  # no time
    e.saw(IDENTITY, MIN_BYTES - 1, 1.0)  # too small
    e.saw("br", BIG, 0.001)  # not a way it asks
    e.saw(GZIP, BIG, 1.0)
    assert e.preferred() == GZIP  # identity has no measure
    e.saw(IDENTITY, 4 * BIG, 1.0)
    assert e.preferred() == IDENTITY


def test_auto_is_safe_to_share_between_the_querying_threads() -> None:
    e = Encodings()
    rng = np.random.default_rng(0)
    rates = {GZIP: 1.0, IDENTITY: 3.0}

    def work(seed: int) -> None:
        r = np.random.default_rng(seed)
        for _ in range(500):
            way = e.pick()
            e.saw(way, int(rates[way] * BIG * (1 + r.random())), 0.001)

    threads = [threading.Thread(target=work, args=(int(rng.integers(1 << 30)),)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert e.asked(GZIP) + e.asked(IDENTITY) == 2000
    assert e.preferred() == IDENTITY and e.asked(IDENTITY) > e.asked(GZIP)


@dataclass
class Link:
    """A real HTTP link in front of a server: it forwards the Accept-Encoding asked and the answer as the server
    encoded it, at ``bytes_per_s`` (None: as fast as it goes), and records each range answer's encoding."""

    target: str
    bytes_per_s: float | None = None
    seen: list[tuple[str, str, int]] = field(default_factory=list)  # (asked, answered, bytes) of range answers
    lock: threading.Lock = field(default_factory=threading.Lock)

    @contextlib.contextmanager
    def serve(self) -> Iterator[str]:
        link = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # as Go's servers: the body's first piece is not held for an ACK

            def do_GET(self) -> None:
                asked = self.headers.get("Accept-Encoding", "")
                req = urllib.request.Request(link.target + self.path,
                                             headers={"Accept-Encoding": asked} if asked else {})
                with urllib.request.urlopen(req, timeout=60) as answer:
                    body, encoding = answer.read(), answer.headers.get("Content-Encoding", "")
                    status, kind = answer.status, answer.headers.get("Content-Type", "application/json")
                if self.path.startswith("/api/v1/query_range"):
                    with link.lock:
                        link.seen.append((asked, encoding, len(body)))
                self.send_response(status)
                self.send_header("Content-Type", kind)
                if encoding:
                    self.send_header("Content-Encoding", encoding)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                for i in range(0, len(body), 16_384):
                    piece = body[i:i + 16_384]
                    if link.bytes_per_s:
                        time.sleep(len(piece) / link.bytes_per_s)
                    self.wfile.write(piece)

            def log_message(self, *args: object) -> None:
                pass

        with loopback_http(Handler) as url:
            yield url


def collect(url: str, cluster: Cluster, **prom: object) -> tuple[PromClient, PodUsage]:
    s = Settings(history_s=pc.HOURS * 3600,
                 prometheus=PrometheusSettings(**{"url": url, "retries": 0, "max_workers": 2, **prom}))  # type: ignore[arg-type]
    client = PromClient(s.prometheus, QueryStats())
    return client, collect_pod_usage(s, cluster.end - timedelta(hours=pc.HOURS), cluster.end, RecordingProgress(),
                                     client=client)


@pytest.mark.prometheus
def test_each_way_reads_the_same_answers_and_asks_what_it_says(cluster: Cluster) -> None:
    read = {}
    for compression in ("gzip", "identity", "auto"):
        link = Link(cluster.url)
        with link.serve() as url:
            client, read[compression] = collect(url, cluster, compression=compression)
        asked = {a for a, _, _ in link.seen}
        answered = {e for _, e, _ in link.seen}
        if compression == "gzip":  # as requests asks by default; Prometheus answers gzip
            assert all("gzip" in a for a in asked) and answered == {"gzip"}
            assert client.stats.uncompressed == 0
        elif compression == "identity":
            assert asked == {"identity"} and answered == {""}
            assert client.stats.uncompressed == len(link.seen)
        else:
            assert answered == {"gzip", ""}
            assert client.stats.uncompressed == sum(1 for _, e, _ in link.seen if not e) >= FIRST
            assert "answers uncompressed" in client.stats.line()
    for compression in ("identity", "auto"):
        got, want = read[compression], read["gzip"]
        assert got.series.keys() == want.series.keys() and len(want.series) >= 5
        for name, frame in want.series.items():
            assert frame.equals(got.series[name]), name
        assert (got.devices, got.owners, got.requests, got.vllm, got.warnings) == \
            (want.devices, want.owners, want.requests, want.vllm, want.warnings)


HOURS = 24
PODS = 40


@pytest.fixture(scope="module")
def big_answers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Prometheus whose one family holds a day at 60 s for 40 pods, each pod's memory a level held for half
    an hour at a time, as framebuffer use is: 6 h of it at 60 s steps is about 0.4 MB of JSON, 1/8 of it gzipped."""
    require_prometheus()
    end_s = 1_790_000_000
    ts = np.arange(end_s - HOURS * 3600, end_s + 1, 60, dtype=np.int64)
    rng = np.random.default_rng(7)
    levels = rng.integers(1000, 70000, size=(PODS, ts.size // 30 + 1)).astype(float)
    series = [Series("DCGM_FI_DEV_FB_USED", {"namespace": "ml", "pod": f"p-{i}", "gpu": "0"}, ts,
                     np.repeat(levels[i], 30)[:ts.size]) for i in range(PODS)]
    with PromServer.from_tsdb(tsdb_of(series, Path(tmp_path_factory.mktemp("enc")) / "t")) as prom:
        yield f"{prom.url}#{end_s}"


@pytest.mark.prometheus
def test_over_a_slow_link_auto_asks_for_compressed_answers(big_answers: str) -> None:
    url, end_s = big_answers.split("#")
    link = Link(url, bytes_per_s=4 * 1024 * 1024)
    with link.serve() as via:
        client = PromClient(PrometheusSettings(url=via, retries=0), QueryStats())
        for hours in range(12):  # 6 h each, one at a time, so each pick follows the measures before it
            until = int(end_s) - hours * 3600
            client.query_range("max by (pod) (DCGM_FI_DEV_FB_USED)", until - 6 * 3600, until, 60)
    assert client.encodings is not None
    plain = [n for _, e, n in link.seen if not e]
    packed = [n for _, e, n in link.seen if e == "gzip"]
    assert len(plain) == FIRST and client.encodings.checks == 0 and client.encodings.preferred() == GZIP, \
        (len(plain), len(packed))
    assert client.stats.uncompressed == FIRST
    assert min(plain) > 4 * max(packed)  # what made the difference: the bytes


@pytest.mark.prometheus
def test_an_accept_encoding_the_user_set_is_sent_as_given(cluster: Cluster) -> None:
    link = Link(cluster.url)
    with link.serve() as url:
        client, _ = collect(url, cluster, compression="identity", headers={"accept-encoding": "gzip"})
    assert client.encodings is None and client.stats.uncompressed == 0
    assert {(a, e) for a, e, _ in link.seen} == {("gzip", "gzip")}

