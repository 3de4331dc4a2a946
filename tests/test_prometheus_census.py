"""The census against a real Prometheus: which exported names have series over the window, and how many, from the
server's index (``/api/v1/series``), so that counting reads no sample.

The cluster here is two pods of tests/promcluster.py over 48 h, one of them replaced half-way (a new pod name,
as a rollout gives), and an SM-activity series that lives three minutes between two inventory steps. A server
that refuses large listings is the real one behind a client that refuses for it (Prometheus has no such cap); a
gateway that passes only the query endpoints is a real HTTP server in front of it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from collectors.prometheus import PromClient, collect_pod_usage, rules, window_for
from collectors.prometheus import queries as q
from collectors.prometheus.cache import UsageCache
from collectors.prometheus.client import PrometheusLimitError
from recommender.core import usage as m
from recommender.core.progress import RecordingProgress
from recommender.core.settings import Settings
from recommender.core.settings_sources import PrometheusSettings
from tests import promcluster as pc
from tests.promfixture import PromServer, Series, build_tsdb, gateway, prometheus_binaries, write_openmetrics
from tests.test_prometheus_collect import LoggingClient

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(prometheus_binaries() is None,
                       reason="Debian's prometheus/promtool not installed (apt-get install -y prometheus)"),
]
STEADY, ROLLED = pc.PODS[0], pc.PODS[6]  # a vLLM pod for the whole window; a DCGM-only pod, replaced half-way
SUCCESSOR = replace(ROLLED, name="ts-a-5d6f7b8c9d-zzzzz")


@dataclass(frozen=True)
class Fleet:
    url: str
    start: datetime
    end: datetime
    brief_s: tuple[float, ...]  # when the brief SM-activity series has samples


def _settings(url: str) -> Settings:
    return Settings(history_s=pc.HOURS * 3600, prometheus=PrometheusSettings(url=url, retries=0))


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    work = tmp_path_factory.mktemp("census")
    end_s = int(datetime.now(UTC).timestamp()) // 3600 * 3600
    end = datetime.fromtimestamp(end_s, UTC)
    start = end - timedelta(hours=pc.HOURS)
    ts = pc.timestamps(end_s)
    half = ts.size // 2
    series = pc._pod_series(STEADY, 0, ts) + pc._pod_series(ROLLED, 1, ts[:half]) \
        + pc._pod_series(SUCCESSOR, 1, ts[half:]) + pc._ksm_series((STEADY, ROLLED, SUCCESSOR), ts)
    # three samples just after an inventory step: the next step's instant lookback (5 min) starts after them
    coarse = window_for(start, end, PrometheusSettings()).coarse
    assert coarse.step_s >= 300 + 240, "an inventory step too short to leave samples between two lookbacks"
    at = coarse.start_s + coarse.step_s * (coarse.steps // 2)
    brief = np.array([at + 60, at + 120, at + 180], dtype=np.int64)
    dcgm = {"namespace": STEADY.ns, "pod": STEADY.name, "container": "main", "gpu": "0", "UUID": STEADY.uuid,
            "modelName": STEADY.product, "Hostname": "a100-0"}
    series.append(Series(q.SM_ACTIVE, dcgm, brief, np.array([0.5, 0.6, 0.7])))
    write_openmetrics(series, work / "data.om", pc.TYPES)
    build_tsdb(work / "data.om", work / "tsdb")
    with PromServer.from_tsdb(Path(work / "tsdb")) as prom:
        yield Fleet(prom.url, start, end, tuple(float(t) for t in brief))


def test_the_census_reads_the_index_not_the_samples(fleet: Fleet) -> None:
    s = _settings(fleet.url)
    client, progress = LoggingClient(s.prometheus), RecordingProgress()
    collect_pod_usage(s, fleet.start, fleet.end, progress, client=client)
    # whether dcgm-exporter's pod labels were renamed, then one lookup of every name the families read, over the
    # window and an instant lookback before it
    probe, (match, start_s, end_s), *recorded = client.lookups
    coarse = window_for(fleet.start, fleet.end, s.prometheus).coarse
    assert probe == (PROBE, coarse.start_s - 300, coarse.end_s)
    assert match == q.census_selectors(q.Scope.of((), s.prometheus))[0]
    assert (start_s, end_s) == (coarse.start_s - 300, coarse.end_s)
    # then the recorded series (none here), listed at each instant of their census: the range series over the
    # instant lookback, the step series over 10 min (as the count looked 5 min earlier for them)
    span = rules.census_chunk(coarse)
    instants = [span.start_s + k * span.step_s for k in range(span.steps)]
    listings = rules.census_listings(q.Scope.of((), s.prometheus), s.prometheus)
    assert sorted(recorded) == sorted((sel, t - before, t) for t in instants for sel, before in listings)
    assert progress.done["listing recorded series"] == progress.totals["listing recorded series"] == len(recorded)
    # no query counts series: the census reads no sample
    assert not [x for x in client.sent if x.startswith("count by (__name__)")]


def test_a_replaced_pod_counts_as_two_series_and_a_brief_family_is_found(fleet: Fleet) -> None:
    s = _settings(fleet.url)
    cache = UsageCache()
    usage = collect_pod_usage(s, fleet.start, fleet.end, RecordingProgress(), client=PromClient(s.prometheus),
                              cache=cache)
    # FB used: the steady pod, the replaced one and its successor, each a series of its own over the window
    assert cache.counts[q.FB_USED] == 3
    assert cache.counts[q.SM_ACTIVE] == 1
    # the three minutes of SM activity are read, though no inventory step's lookback holds one of them
    seen = usage.series[m.SM_ACTIVE_FRAC][STEADY.key].dropna()
    win = window_for(fleet.start, fleet.end, s.prometheus)
    assert not seen.empty and seen.between(0.5, 0.7).all()  # averages of the three samples within a step
    times = seen.index.as_unit("s").asi8
    assert fleet.brief_s[0] <= times.min() and times.max() < fleet.brief_s[-1] + win.window_s + win.grid.step_s


PROBE = '{__name__=~"DCGM_FI_DEV_FB_USED|kube_pod_owner",exported_namespace!="",exported_pod!=""}'  # renamed?


class Capped(LoggingClient):
    """A real client to a server that refuses to list more than one name at once (as VictoriaMetrics refuses a
    listing over ``-search.maxSeries``), or, with ``refuse_all``, to list anything."""

    def __init__(self, p: PrometheusSettings, refuse_all: bool = False) -> None:
        super().__init__(p)
        self.refuse_all = refuse_all

    def series(self, match: str, start_s: float, end_s: float) -> list:  # type: ignore[type-arg]
        if self.refuse_all or "__name__=~" in match:
            self.lookups.append((match, start_s, end_s))
            raise PrometheusLimitError("the number of matching timeseries exceeds 30000")
        return super().series(match, start_s, end_s)


def test_a_server_that_caps_listings_is_asked_one_name_at_a_time(fleet: Fleet) -> None:
    s = _settings(fleet.url)
    listed, capped = UsageCache(), UsageCache()
    client = Capped(s.prometheus)
    collect_pod_usage(s, fleet.start, fleet.end, RecordingProgress(), client=PromClient(s.prometheus), cache=listed)
    collect_pod_usage(s, fleet.start, fleet.end, RecordingProgress(), client=client, cache=capped)
    assert capped.counts == listed.counts
    assert [x[0] for x in client.lookups[:2]] == [PROBE, q.census_selectors(q.Scope.of((), s.prometheus))[0]]
    assert len(client.lookups) == 2 + len(q.CENSUS_NAMES)
    assert not [x for x in client.sent if x.startswith("count by (__name__)") and "namespace_pod:" not in x]


def test_a_server_that_lists_nothing_is_counted_at_each_step(fleet: Fleet) -> None:
    s = _settings(fleet.url)
    cache = UsageCache()
    client = Capped(s.prometheus, refuse_all=True)
    usage = collect_pod_usage(s, fleet.start, fleet.end, RecordingProgress(), client=client, cache=cache)
    counting = [x for x in client.sent if x.startswith("count by (__name__)") and "namespace_pod:" not in x]
    assert counting and all(x.startswith(f"count by (__name__) ({q.census_selectors(q.Scope.of((), s.prometheus))[0]}")
                            for x in counting)
    # counted at each inventory step: the most at once, so the replaced pod and its successor are one series
    assert cache.counts[q.FB_USED] == 2
    assert usage.series[m.FB_USED_MIB].shape[1] == 3  # every pod is still read


@pytest.fixture(params=[404, 403])
def query_only_gateway(fleet: Fleet, request: pytest.FixtureRequest) -> Iterator[str]:
    """A real HTTP gateway in front of the server that passes the query endpoints and answers the rest with 404
    (no such path) or 403 (not allowed to these credentials), as tenancy proxies do."""
    with gateway(lambda: fleet.url, ("/api/v1/query", "/api/v1/status/"), request.param) as url:
        yield url


def test_a_gateway_without_listings_has_every_name_counted_at_each_step(fleet: Fleet, query_only_gateway: str) -> None:
    s = _settings(query_only_gateway)
    cache, listed = UsageCache(), UsageCache()
    client, progress = LoggingClient(s.prometheus), RecordingProgress()
    usage = collect_pod_usage(s, fleet.start, fleet.end, progress, client=client, cache=cache)
    direct = _settings(fleet.url)
    expected = collect_pod_usage(direct, fleet.start, fleet.end, RecordingProgress(),
                                 client=PromClient(direct.prometheus), cache=listed)
    # asked whether dcgm-exporter's labels were renamed and for the census, then counted, and said so
    assert [x[0] for x in client.lookups] == [PROBE, q.census_selectors(q.Scope.of((), s.prometheus))[0]]
    assert any("lists no series (HTTP" in x and "counting series at each inventory step" in x
               for x in progress.messages)
    assert any(x.startswith("count by (__name__)") and "namespace_pod:" not in x for x in client.sent)
    assert cache.counts[q.FB_USED] == 2 and listed.counts[q.FB_USED] == 3
    assert set(usage.series) == set(expected.series) - {m.SM_ACTIVE_FRAC}  # the brief family is not seen then
