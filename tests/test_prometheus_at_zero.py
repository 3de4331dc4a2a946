"""Steps a workload spent at zero, on a real Prometheus: kube-state-metrics' replica counts tell them from steps
without metrics, so demand there reads 0 (an idle gap) and not unknown.

One day of history: ``chat`` (a Deployment) serves, scales to zero for 6 h, and wakes with a new pod; ``sts-llm``
(a StatefulSet) is at zero for 4 h; ``no-ksm`` has a 4 h gap and no replica count; and for the hour ``OUTAGE``
Prometheus scraped nothing at all.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest

from collectors.prometheus import collect_workload_replicas
from collectors.prometheus.cache import UsageCache
from collectors.prometheus.cachefile import OVERLAP_STEPS
from collectors.registry import SourceRequest, get_source
from policies.replicas import history_from_snapshot, idle_gaps_s
from recommender.core import usage as m
from recommender.core.inventory import WorkloadRef
from recommender.core.progress import RecordingProgress
from recommender.core.settings import Settings
from recommender.core.settings_sources import KubernetesSettings, PrometheusSettings
from recommender.core.usage import Snapshot
from tests import promcluster as pc
from tests.promfixture import (
    PromServer,
    Series,
    build_tsdb,
    dishonoured,
    instant_query,
    prometheus_binaries,
    tsdb_of,
    write_openmetrics,
)
from tests.test_prometheus_collect import LoggingClient

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(prometheus_binaries() is None,
                       reason="Debian's prometheus/promtool not installed (apt-get install -y prometheus)"),
]
HOURS = 24.0
STEP_S = 60  # 24 h / 2,016 target points → the 60 s floor
CHAT = WorkloadRef("inference", "Deployment", "chat")
STS = WorkloadRef("inference", "StatefulSet", "sts-llm")
NO_KSM = WorkloadRef("inference", "Deployment", "no-ksm")
CHAT_ZERO = (10.0, 16.0)  # hours into the window: no pod
STS_ZERO = (4.0, 8.0)
NO_KSM_GAP = (4.0, 8.0)
OUTAGE = (20.0, 21.0)  # nothing scraped, replica counts included
RS = "5d6f7b8c9d"
PODS = (
    pc.Pod("inference", f"chat-{RS}-aaaaa", ("ReplicaSet", f"chat-{RS}"), uuid="GPU-a1", vllm="new"),
    pc.Pod("inference", f"chat-{RS}-bbbbb", ("ReplicaSet", f"chat-{RS}"), uuid="GPU-a2", vllm="new"),
    pc.Pod("inference", "sts-llm-0", ("StatefulSet", "sts-llm"), uuid="GPU-b1", vllm="new"),
    pc.Pod("inference", f"no-ksm-{RS}-ccccc", ("ReplicaSet", f"no-ksm-{RS}"), uuid="GPU-s1", vllm="new"),
)
RUNS = {  # the hours each pod ran: chat's second pod is the one its wake started
    PODS[0].name: [(0.0, CHAT_ZERO[0])],
    PODS[1].name: [(CHAT_ZERO[1], HOURS)],
    PODS[2].name: [(0.0, STS_ZERO[0]), (STS_ZERO[1], HOURS)],
    PODS[3].name: [(0.0, NO_KSM_GAP[0]), (NO_KSM_GAP[1], HOURS)],
}


@dataclass(frozen=True)
class Day:
    url: str
    end: datetime


def _hours(ts: np.ndarray, first: float) -> np.ndarray:
    return (ts - first) / 3600.0


def _within(h: np.ndarray, spans: list[tuple[float, float]]) -> np.ndarray:
    return np.logical_or.reduce([(h >= a) & (h < b) for a, b in spans])


def day_series(end_s: int) -> list[Series]:
    """The pods' exporter series over the hours each ran, kube-state-metrics' owners and replica counts, and
    nothing at all during the outage."""
    ts = pc.timestamps(end_s, HOURS)
    first = float(ts[0])
    raw = pc.cluster_series(end_s, PODS, HOURS)
    raw += [Series("kube_replicaset_owner", {"namespace": "inference", "replicaset": f"{n}-{RS}",
                                             "owner_kind": "Deployment", "owner_name": n}, ts, np.ones(ts.size))
            for n in ("chat", "no-ksm")]
    h = _hours(ts, first)
    raw += [Series("kube_deployment_status_replicas", {"namespace": "inference", "deployment": "chat"}, ts,
                   np.where(_within(h, [CHAT_ZERO]), 0.0, 1.0)),
            Series("kube_statefulset_status_replicas", {"namespace": "inference", "statefulset": "sts-llm"}, ts,
                   np.where(_within(h, [STS_ZERO]), 0.0, 1.0)),
            Series("kube_deployment_status_replicas", {"namespace": "inference", "deployment": "web"}, ts,
                   np.zeros(ts.size))]  # no GPU pod: never asked for
    out = []
    for s in raw:
        keep = ~_within(_hours(s.timestamps_s, first), [OUTAGE])
        runs = RUNS.get(s.labels.get("pod", ""))
        if runs is not None:
            keep &= _within(_hours(s.timestamps_s, first), runs)
        out.append(Series(s.name, s.labels, s.timestamps_s[keep], s.values[keep]))
    return [s for s in out if s.timestamps_s.size]


@pytest.fixture(scope="module")
def day(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Day]:
    work = tmp_path_factory.mktemp("at-zero")
    end_s = int(time.time()) // 3600 * 3600
    write_openmetrics(day_series(end_s), work / "data.om", pc.TYPES)
    build_tsdb(work / "data.om", work / "tsdb")
    with PromServer.from_tsdb(work / "tsdb") as prom:
        yield Day(prom.url, datetime.fromtimestamp(end_s, UTC))


def settings(url: str) -> Settings:
    return Settings(history_s=HOURS * 3600, kubernetes=KubernetesSettings(enabled=False),
                    prometheus=PrometheusSettings(url=url, retries=0))


@pytest.fixture(scope="module")
def snap(day: Day) -> Snapshot:
    return get_source("prometheus")(SourceRequest(settings(day.url), day.end), RecordingProgress())


def part(series: pd.Series, hours: tuple[float, float], margin_steps: int = 3) -> pd.Series:
    """The steps well inside ``hours`` of the window (a step's value reads the 2 min before it)."""
    first = series.index[0]
    a = first + pd.Timedelta(hours=hours[0]) + pd.Timedelta(seconds=margin_steps * STEP_S)
    b = first + pd.Timedelta(hours=hours[1]) - pd.Timedelta(seconds=margin_steps * STEP_S)
    return series[(series.index >= a) & (series.index < b)]


def test_demand_reads_zero_while_a_workload_is_at_zero(snap: Snapshot) -> None:
    for ref, zero in ((CHAT, CHAT_ZERO), (STS, STS_ZERO)):
        rate = snap.series(m.REQUEST_RATE, ref)
        assert rate is not None and snap.step_s == STEP_S
        at_zero = part(rate, zero)
        assert len(at_zero) > 100 and (at_zero == 0).all()
        assert (part(rate, (0.0, zero[0])) > 0).all()  # serving: vLLM's rate, untouched
        for metric in (m.SERVING_REPLICAS, m.REQUESTS_WAITING, m.REQUESTS_RUNNING):
            series = snap.series(metric, ref)
            assert series is not None and (part(series, zero) == 0).all(), metric
        fb = snap.series(m.FB_USED_MIB, ref)
        assert fb is not None and part(fb, zero).isna().all()  # no device: per-device metrics stay unknown
    served = snap.series(m.SERVING_REPLICAS, CHAT)
    assert served is not None and (part(served, (CHAT_ZERO[1], OUTAGE[0])) == 1).all()


def test_steps_without_metrics_stay_unknown(snap: Snapshot) -> None:
    rate = snap.series(m.REQUEST_RATE, CHAT)
    assert rate is not None and len(part(rate, OUTAGE)) > 30 and part(rate, OUTAGE).isna().all()
    no_ksm = snap.series(m.REQUEST_RATE, NO_KSM)  # a gap kube-state-metrics has no count for
    assert no_ksm is not None and part(no_ksm, NO_KSM_GAP).isna().all() and (part(no_ksm, (0.0, 4.0)) > 0).all()


def test_a_gap_spent_at_zero_is_an_idle_gap(snap: Snapshot) -> None:
    chat = next(w for w in snap.workloads if w.ref == CHAT)
    gaps = idle_gaps_s(history_from_snapshot(snap, chat))
    span = (CHAT_ZERO[1] - CHAT_ZERO[0]) * 3600
    assert gaps.size and span - 10 * STEP_S <= gaps.max() <= span + 3 * STEP_S
    no_ksm = next(w for w in snap.workloads if w.ref == NO_KSM)
    assert idle_gaps_s(history_from_snapshot(snap, no_ksm)).size == 0  # unknown, so no gap


def test_only_the_workloads_found_are_asked_for_in_one_query_per_kind(day: Day) -> None:
    s = settings(day.url)
    client = LoggingClient(s.prometheus)
    got = collect_workload_replicas(s, [CHAT, STS, NO_KSM, WorkloadRef("batch", "CronJob", "nightly")],
                                    day.end - timedelta(hours=HOURS), day.end, RecordingProgress(), client=client)
    assert got is not None and list(got.columns) == sorted([CHAT.key, STS.key])  # no count for no-ksm, web unasked
    assert {q.split("{")[1].split(",")[0] for q in client.sent} == \
        {'__name__="kube_deployment_status_replicas"', '__name__="kube_statefulset_status_replicas"'}
    assert all("web" not in q and "nightly" not in q for q in client.sent)
    h = _hours(got.index.to_numpy(dtype="datetime64[s]").astype(np.int64), got.index[0].timestamp())
    inside = _within(h, [(CHAT_ZERO[0] + 0.1, CHAT_ZERO[1] - 0.1)])
    assert (got[CHAT.key][inside] == 0).all() and (got[CHAT.key][_within(h, [(1.0, 9.0)])] == 1).all()


def test_no_replica_counts_at_all_is_none(day: Day) -> None:
    s = settings(day.url)
    other = WorkloadRef("elsewhere", "Deployment", "chat")
    assert collect_workload_replicas(s, [other], day.end - timedelta(hours=HOURS), day.end,
                                     RecordingProgress()) is None
    client = LoggingClient(s.prometheus)
    assert collect_workload_replicas(s, [WorkloadRef("batch", "Job", "x")], day.end - timedelta(hours=HOURS),
                                     day.end, RecordingProgress(), client=client) is None
    assert not client.sent  # no kind kube-state-metrics counts: nothing asked


def test_the_source_says_where_kube_state_metrics_has_no_counts(cluster: pc.Cluster) -> None:
    progress = RecordingProgress()  # the shared cluster has owners but no replica counts
    snap = get_source("prometheus")(SourceRequest(settings(cluster.url), cluster.end), progress)
    assert snap.workloads
    assert sum("no replica counts" in x for x in progress.messages) == 1


def test_a_cache_reads_only_the_new_steps_of_the_replica_counts(day: Day) -> None:
    s = settings(day.url)
    cache = UsageCache()
    refs = [CHAT, STS]

    def window(hours_before_end: float) -> tuple[datetime, datetime]:
        end = day.end - timedelta(hours=hours_before_end)
        return end - timedelta(hours=HOURS), end

    collect_workload_replicas(s, refs, *window(3), RecordingProgress(), client=LoggingClient(s.prometheus),
                              cache=cache)
    again = LoggingClient(s.prometheus)
    joined = collect_workload_replicas(s, refs, *window(0), RecordingProgress(), client=again, cache=cache)
    full = collect_workload_replicas(s, refs, *window(0), RecordingProgress())
    assert joined is not None and full is not None
    pd.testing.assert_frame_equal(joined, full, check_freq=False)
    assert again.ranges and all(round((b - a) / st) + 1 <= 3 * 3600 / STEP_S + OVERLAP_STEPS
                                for _, a, b, st in again.ranges)
    cache_before = cache.workloads
    collect_workload_replicas(s, [CHAT], *window(0), RecordingProgress(), client=(fresh := LoggingClient(s.prometheus)),
                              cache=cache)
    assert cache.workloads is cache_before  # another set of workloads: read afresh, the whole window
    assert max(round((b - a) / st) + 1 for _, a, b, st in fresh.ranges) > 3 * 3600 / STEP_S


FIXED_AT = 12.0  # hours into the window: from here kube-state-metrics' scrape honours its labels


@pytest.fixture(scope="module")
def fixed_day(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Day]:
    """``day_series`` with kube-state-metrics scraped without honouring its labels until ``FIXED_AT``, then with."""
    end_s = int(time.time()) // 3600 * 3600
    first = float(pc.timestamps(end_s, HOURS)[0])
    out = []
    for s in day_series(end_s):
        if not s.name.startswith("kube_"):
            out.append(s)
            continue
        before = _hours(s.timestamps_s, first) < FIXED_AT
        out += [dishonoured(Series(s.name, s.labels, s.timestamps_s[before], s.values[before]),
                            {"namespace": "monitoring", "pod": "kube-state-metrics-6d9f8-x7k2p",
                             "container": "kube-state-metrics"}),
                Series(s.name, s.labels, s.timestamps_s[~before], s.values[~before])]
    where = tmp_path_factory.mktemp("fixed")
    with PromServer.from_tsdb(tsdb_of([s for s in out if s.timestamps_s.size], where / "day", pc.TYPES)) as prom:
        yield Day(prom.url, datetime.fromtimestamp(end_s, UTC))


def test_replica_counts_read_across_a_scrape_that_stopped_renaming_their_labels(day: Day, fixed_day: Day,
                                                                              snap: Snapshot) -> None:
    """Before the fix the counts name their namespace in exported_namespace (and namespace is
    kube-state-metrics' own): both halves are read, so the snapshot is the honoured one's, at zero included."""
    assert fixed_day.end == day.end
    refs = [CHAT, STS]
    start = day.end - timedelta(hours=HOURS)
    both = collect_workload_replicas(settings(fixed_day.url), refs, start, day.end, RecordingProgress())
    honoured = collect_workload_replicas(settings(day.url), refs, start, day.end, RecordingProgress())
    assert honoured is not None and both is not None
    pd.testing.assert_frame_equal(both, honoured)
    fixed = get_source("prometheus")(SourceRequest(settings(fixed_day.url), fixed_day.end), RecordingProgress())
    assert [w.ref for w in fixed.workloads] == [w.ref for w in snap.workloads]
    for metric in (m.SERVING_REPLICAS, m.REQUEST_RATE):
        for ref in (CHAT, STS):
            a, b = fixed.series(metric, ref), snap.series(metric, ref)
            assert a is not None and b is not None
            pd.testing.assert_series_equal(a, b, obj=f"{metric} {ref.key}")


def test_where_both_scrapes_are_seen_each_request_counts_once(day: Day, fixed_day: Day) -> None:
    """Just after the scrape was changed, a step sees the last renamed sample and the first honoured one: the
    pods' GPU requests are each container's once, as on the honoured server."""
    from collectors.prometheus.jobs import inventory_queries
    from collectors.prometheus.queries import Scope
    from collectors.prometheus.window import window_for

    start = day.end - timedelta(hours=HOURS)
    p = settings(day.url).prometheus
    promql = inventory_queries(Scope.of((), p), window_for(start, day.end, p), True)["requests"]
    at = start.timestamp() + FIXED_AT * 3600 + 90

    def got(url: str) -> dict[tuple[str, str], float]:
        return {(r["metric"]["pod"], r["metric"]["resource"]): float(r["value"][1])
                for r in instant_query(url, promql, at)}

    honoured = got(day.url)
    assert honoured and set(honoured.values()) == {1.0}
    assert got(fixed_day.url) == honoured
