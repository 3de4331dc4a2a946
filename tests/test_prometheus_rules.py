"""Recording rules and the memory budget against a real Prometheus.

The TSDB holds the raw series of tests/promcluster.py over the whole 48 h window and, for its second half only,
the shipped recording rules (deploy/monitoring/recording-rules.yaml) as ``promtool tsdb create-blocks-from
rules`` evaluates them over those raw series: a cluster whose rules were installed a day ago. A collection that
reads them must give the frames a raw-only collection gives (same metrics, pods, steps and values). The step
rules (10 min) are backfilled for the last quarter only, so a report at 10 min steps mixes raw, range rules,
step rules, and range rules again for the last two steps (whose blocks are not evaluated yet).
"""

from __future__ import annotations

import itertools
import subprocess
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import requests
import yaml

from collectors.pods import PodUsage
from collectors.prometheus import PromClient, QueryStats, chunks, collect_pod_usage
from collectors.prometheus.ahead import census_ahead
from collectors.prometheus.cache import UsageCache
from collectors.prometheus.client import PrometheusLimitError
from collectors.prometheus.store import DiskCache
from recommender.core import usage as m
from recommender.core.progress import RecordingProgress
from recommender.core.settings import Settings
from recommender.core.settings_sources import PrometheusSettings
from tests import promcluster as pc
from tests.promfixture import PromServer, build_tsdb, prometheus_binaries, write_openmetrics

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(prometheus_binaries() is None,
                       reason="Debian's prometheus/promtool not installed (apt-get install -y prometheus)"),
]
RULES = Path(__file__).resolve().parents[1] / "deploy" / "monitoring" / "recording-rules.yaml"


RANGE_GROUP, STEP_GROUP = "gpu-rightsizer.usage", "gpu-rightsizer.usage-steps"


def _rules_file(path: Path, group: str = RANGE_GROUP) -> Path:
    doc = yaml.safe_load(RULES.read_text())
    path.write_text(yaml.safe_dump({"groups": [g for g in doc["spec"]["groups"] if g["name"] == group]}))
    return path


def _backfill(url: str, rules: Path, start_s: int, end_s: int, out: Path) -> None:
    done = subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "rules", "--quiet", f"--url={url}", f"--start={start_s}",
         f"--end={end_s}", f"--output-dir={out}", str(rules)], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def _rules_in_phase(work: Path, url: str, start_s: int) -> Path:
    """A rules file whose group promtool evaluates 5-25 s before each whole minute.

    promtool places a group's evaluations at an offset hashed from the group's name and file path (Prometheus'
    ``Group.EvalTimestamp``), so a temporary path gives a different phase each run; an evaluation within a
    few seconds of a scrape (at :30) reads one raw window or the next by chance. Probe paths on 10 minutes of
    history (read back with ``promtool tsdb dump``) until one evaluates at 35-55 s past the minute, where its
    2 min window holds the same two scrapes as the raw query's window at the next whole minute.
    """
    for k in range(40):
        rules, probe = _rules_file(work / f"rules-{k}.yaml"), work / f"probe-{k}"
        _backfill(url, rules, start_s, start_s + 600, probe)
        (probe / "wal").mkdir()  # dump opens the folder as a database
        dump = subprocess.run(["promtool", "tsdb", "dump", str(probe)], capture_output=True, text=True, timeout=120,
                              check=True).stdout
        phases = {int(line.split()[-1]) % 60_000 / 1000 for line in dump.splitlines() if line.strip()}  # s past :00
        if phases and all(35 <= s <= 55 for s in phases):
            return rules
    raise AssertionError("no rules path among 40 gave promtool an evaluation phase of 35-55 s")


@pytest.fixture(scope="module")
def half_recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, datetime]]:
    """A server over raw series for 48 h and recorded series for the last 24 h of them."""
    work = tmp_path_factory.mktemp("rules")
    end_s = int(datetime.now(UTC).timestamp()) // 3600 * 3600
    write_openmetrics(pc.cluster_series(end_s), work / "data.om", pc.TYPES)
    build_tsdb(work / "data.om", work / "tsdb")
    mid_s = end_s - int(pc.HOURS * 3600 / 2)
    with PromServer.from_tsdb(work / "tsdb") as raw:
        _backfill(raw.url, _rules_in_phase(work, raw.url, mid_s), mid_s, end_s, work / "tsdb")
    with PromServer.from_tsdb(work / "tsdb") as prom:
        yield prom.url, datetime.fromtimestamp(end_s, UTC)


@pytest.fixture(scope="module")
def stepped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, datetime]]:
    """Raw series for 48 h, the range rules for the last 24 h (phase pinned as above), the step rules for the
    last 12 h (at whatever phase promtool gives their group: the reader does not depend on it)."""
    work = tmp_path_factory.mktemp("steps")
    end_s = int(datetime.now(UTC).timestamp()) // 3600 * 3600
    write_openmetrics(pc.cluster_series(end_s), work / "data.om", pc.TYPES)
    build_tsdb(work / "data.om", work / "tsdb")
    mid_s, late_s = end_s - int(pc.HOURS * 3600 / 2), end_s - int(pc.HOURS * 3600 / 4)
    with PromServer.from_tsdb(work / "tsdb") as raw:
        _backfill(raw.url, _rules_in_phase(work, raw.url, mid_s), mid_s, end_s, work / "tsdb")
        _backfill(raw.url, _rules_file(work / "steps.yaml", STEP_GROUP), late_s, end_s, work / "tsdb")
    with PromServer.from_tsdb(work / "tsdb") as prom:
        yield prom.url, datetime.fromtimestamp(end_s, UTC)


def _steps_in_phase(work: Path, url: str, start_s: int) -> tuple[Path, float]:
    """A step rules file whose group promtool evaluates 1-4 min past each 10 min (probed as in
    :func:`_rules_in_phase`), and that phase (s): its latest sample at each whole hour is 6-9 min old, beyond
    the instant lookback (5 min), so only the census' look 5 min earlier sees it."""
    for k in range(40):
        rules, probe = _rules_file(work / f"steps-{k}.yaml", STEP_GROUP), work / f"step-probe-{k}"
        _backfill(url, rules, start_s, start_s + 1800, probe)
        (probe / "wal").mkdir()
        dump = subprocess.run(["promtool", "tsdb", "dump", str(probe)], capture_output=True, text=True, timeout=120,
                              check=True).stdout
        phases = {int(line.split()[-1]) % 600_000 / 1000 for line in dump.splitlines() if line.strip()}
        if len(phases) == 1 and 60 <= min(phases) <= 240:
            return rules, phases.pop()
    raise AssertionError("no rules path among 40 gave promtool a step group phase of 1-4 min")


@pytest.fixture(scope="module")
def gapped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, datetime, float, float]]:
    """Raw series for 48 h and the step rules, evaluated 1-4 min past each 10 min, in two runs starting at odd
    times: 40 h to 24 h before the end, then a 10 h gap, then from 13 h 39 min before the end to the end; the
    range rules for the last 2 h only (so the census' instants there have recorded series within the lookback,
    besides the step series 6-9 min earlier). Yields the URL, the end, the gap's end and the step phase (s)."""
    work = tmp_path_factory.mktemp("gapped")
    end_s = int(datetime.now(UTC).timestamp()) // 3600 * 3600
    write_openmetrics(pc.cluster_series(end_s), work / "data.om", pc.TYPES)
    build_tsdb(work / "data.om", work / "tsdb")
    first = (end_s - 40 * 3600 + 1234, end_s - 24 * 3600 + 1234)
    second = end_s - 14 * 3600 + 1234
    with PromServer.from_tsdb(work / "tsdb") as raw:
        steps, phase = _steps_in_phase(work, raw.url, first[0])
        _backfill(raw.url, steps, *first, work / "tsdb")
        _backfill(raw.url, steps, second, end_s, work / "tsdb")
        _backfill(raw.url, _rules_file(work / "range.yaml"), end_s - 7200, end_s, work / "tsdb")
    with PromServer.from_tsdb(work / "tsdb") as prom:
        yield prom.url, datetime.fromtimestamp(end_s, UTC), float(second), phase


class Client(PromClient):
    """A real client that remembers the ranges it read and may read every raw window ``offset_s`` earlier."""

    def __init__(self, p: PrometheusSettings, offset_s: int = 0) -> None:
        super().__init__(p, QueryStats())
        self.offset_s = offset_s
        self.ranges: list[tuple[str, float]] = []
        self.spans: list[tuple[str, float, float]] = []

    def query_range(self, promql: str, start_s: float, end_s: float, step_s: float) -> list:  # type: ignore[type-arg]
        self.ranges.append((promql, start_s))
        self.spans.append((promql, start_s, end_s))
        if self.offset_s:
            promql = promql.replace("[120s]", f"[120s] offset {self.offset_s}s")
        return super().query_range(promql, start_s, end_s, step_s)


def _collect(url: str, end: datetime, offset_s: int = 0, **prom: object) -> tuple[PodUsage, Client]:
    """A collection over the fixture's 48 h (at 2 min steps; ``target_points=288``: 10 min)."""
    s = Settings(history_s=pc.HOURS * 3600,
                 prometheus=PrometheusSettings(**{"url": url, "retries": 0, **prom}))  # type: ignore[arg-type]
    client = Client(s.prometheus, offset_s)
    usage = collect_pod_usage(s, end - timedelta(hours=pc.HOURS), end, RecordingProgress(), client=client)
    return usage, client


def _collect_cached(url: str, end: datetime, cache: UsageCache, **prom: object) -> tuple[PodUsage, Client]:
    """:func:`_collect` with a cache: after a first collection, only the steps it lacks (and the last two)."""
    s = Settings(history_s=pc.HOURS * 3600,
                 prometheus=PrometheusSettings(**{"url": url, "retries": 0, **prom}))  # type: ignore[arg-type]
    client = Client(s.prometheus)
    usage = collect_pod_usage(s, end - timedelta(hours=pc.HOURS), end, RecordingProgress(), client=client,
                              cache=cache)
    return usage, client


def _same_frames(a: PodUsage, b: PodUsage) -> None:
    assert sorted(a.series) == sorted(b.series)
    for metric in a.series:
        pd.testing.assert_frame_equal(a.series[metric], b.series[metric], rtol=1e-9, atol=1e-12, obj=metric)


def _rule_lag_s(url: str, at_s: float) -> float:
    """How long before a whole minute the rules were evaluated (their group's phase: real servers and promtool
    alike offset each group)."""
    got = requests.get(f"{url}/api/v1/query", params={"query": "namespace_pod:fb_used_mib:2m[5m]", "time": at_s},
                       timeout=30).json()["data"]["result"][0]["values"]
    return (at_s - float(got[-1][0])) % 60


def test_half_recorded_window_reads_rules_for_its_second_half_and_agrees_with_raw(
        half_recorded: tuple[str, datetime]) -> None:
    url, end = half_recorded
    raw, raw_client = _collect(url, end, recording_rules=False)
    mixed, client = _collect(url, end)
    # same metrics, pods, steps and units; before the rules, the raw values themselves
    assert sorted(mixed.series) == sorted(raw.series)
    first = min(start for q, start in client.ranges if "s:120s])" in q)  # the recorded reads
    mid = end.timestamp() - pc.HOURS * 3600 / 2
    assert mid + 120 <= first <= mid + 3600 + 120  # within a census step (hourly here) and a window of the start
    cut = pd.Timestamp(first, unit="s", tz="UTC")
    # from the first recorded step on: a rule evaluated at t - lag read the raw samples in (t - lag - 120 s,
    # t - lag]; scrapes are at :30, so with the fixture's lag of 5-25 s that is the raw window at t
    assert 5 <= _rule_lag_s(url, end.timestamp() - 3600) <= 25
    earlier, _ = _collect(url, end, offset_s=60, recording_rules=False)
    for metric, frame in mixed.series.items():
        assert list(frame.columns) == list(raw.series[metric].columns), metric
        pd.testing.assert_frame_equal(frame[frame.index < cut], raw.series[metric][frame.index < cut], obj=metric)
        got, want = frame[frame.index >= cut].to_numpy(), raw.series[metric][frame.index >= cut].to_numpy()
        same = np.isclose(got, want, rtol=1e-9, atol=1e-12, equal_nan=True)
        assert same.mean() > 0.98, f"{metric}: {same.mean():.3f} of the recorded steps equal raw"
        # promtool restarts the group's phase at each block it writes: a few steps read the window a minute before
        before = np.isclose(got, earlier.series[metric][frame.index >= cut].to_numpy(), rtol=1e-9, atol=1e-12,
                            equal_nan=True)
        assert (same | before).all(), f"{metric}: {(~(same | before)).sum()} recorded steps equal neither window"
    assert len(mixed.series[m.KV_USAGE_FRAC].columns) == 3 and mixed.series[m.TTFT_P95_S].notna().any().any()
    # every family present was read from the rules for the second half (W = R = 120 s), raw before
    line = client.stats.line()
    assert "recording rules: 10 of 11 families recorded (2m every" in line and "10 only from" in line, line
    assert "raw before" in line and raw_client.stats.sources == ""
    # the cluster has no 2.5 s TTFT bucket: the over-objective rule records nothing (as the raw query answers)
    assert "raw: ttft_over_objective_per_s (no recorded series)" in line
    assert client.stats.queries > raw_client.stats.queries  # the recorded halves are queries of their own


def test_rules_the_step_cannot_use_fall_back_to_raw_and_say_why(half_recorded: tuple[str, datetime]) -> None:
    url, end = half_recorded
    # a user's rule named with a 5m range: the 2 min step window is not a multiple of it
    user = {m.FB_USED_MIB: "namespace_pod:fb_used_mib:2m[5m]"}
    raw, _ = _collect(url, end, recording_rules=False)
    mixed, client = _collect(url, end, recorded_series=user)
    pd.testing.assert_frame_equal(mixed.series[m.FB_USED_MIB], raw.series[m.FB_USED_MIB])
    assert "fb_used_mib (step window 2m is not a multiple of the rule's 5m)" in client.stats.sources
    assert "9 of 11 families recorded" in client.stats.sources


def test_a_budgeted_collection_equals_an_unbudgeted_one(cluster: pc.Cluster) -> None:
    wide, wide_client = _collect(cluster.url, cluster.end, query_memory_mib=1024)
    tight, tight_client = _collect(cluster.url, cluster.end, query_memory_mib=0.25)
    _same_frames(tight, wide)
    assert tight.devices == wide.devices and tight.vllm == wide.vllm
    assert tight_client.stats.queries > wide_client.stats.queries and tight_client.stats.splits == 0
    # the server's own count (stats=all) of the samples its largest query held stays within the budget
    budget = chunks.budget_samples(PrometheusSettings(query_memory_mib=0.25))
    assert 0 < tight_client.stats.peak_samples <= budget < wide_client.stats.peak_samples
    assert "samples loaded, at most" in tight_client.stats.line()
    assert np.isfinite(tight.series[m.FB_USED_MIB].to_numpy(dtype=float)).any()


STEP_READ = "[600s] offset 1ms)"  # how a step series is read at 10 min steps (rules.step_query)
ULPS = 1e-14  # relative: a few units in the last place of a double; a wrong step or window differs far more


def _sources(client: Client, metric_names: tuple[str, ...], frame: pd.DataFrame) -> pd.Series:
    """Per grid step of ``frame``, which source the client read it from: step, range or raw."""
    src = pd.Series("raw", index=frame.index)
    for promql, start, end in client.spans:
        kind = "step" if STEP_READ in promql else "range" if "s:120s])" in promql else None
        if kind and any(n in promql for n in metric_names):
            shift = 1200 if kind == "step" else 0
            t = np.array([x.timestamp() for x in frame.index])
            src[(t >= start - shift) & (t <= end - shift)] = kind
    return src


def test_a_window_at_10m_steps_reads_step_rules_where_they_cover_it_and_equals_raw_there(
        stepped: tuple[str, datetime]) -> None:
    url, end = stepped
    raw, raw_client = _collect(url, end, recording_rules=False, target_points=288)
    mixed, client = _collect(url, end, target_points=288)
    assert raw.series[m.FB_USED_MIB].index.freq == pd.Timedelta(minutes=10)  # the report's step is the rules'
    assert sorted(mixed.series) == sorted(raw.series)
    step_reads = [(q, start) for q, start in client.ranges if STEP_READ in q]
    assert {q.split('"')[1] for q, _ in step_reads} == {f"namespace_pod:{k}:step10m" for k in raw.series
                                                        if k not in (m.FB_TOTAL_MIB, m.TTFT_OVER_OBJECTIVE_RATE)}
    late = end.timestamp() - pc.HOURS * 3600 / 4
    first_step = min(start for _, start in step_reads) - 1200  # read 2 S after each step
    assert late < first_step <= late + 3600 + 600  # within a census step and a window of the rules starting
    for metric, frame in mixed.series.items():
        want = raw.series[metric]
        assert list(frame.columns) == list(want.columns), metric
        src = _sources(client, (f":{metric}:",), frame)
        if metric in (m.FB_TOTAL_MIB, m.TTFT_OVER_OBJECTIVE_RATE):
            continue
        # four sources in time order: raw, the 2 min rules, the step rules, the 2 min rules for the last 2 steps
        # (raw for TTFT p95: a quantile does not combine from 2 min ones)
        fine = "raw" if metric == m.TTFT_P95_S else "range"
        runs = [k for k, _ in itertools.groupby(src)]
        assert runs == (["raw", "step", "raw"] if fine == "raw" else ["raw", "range", "step", "range"]), (metric, runs)
        assert (src.iloc[-2:] == fine).all() and (src == "step").sum() >= 60
        # the step rules: the raw query's own answer at that step, within a few ulps (ULPS: Prometheus sums series
        # in no fixed order, so the same sum evaluated twice may differ in its last bit)
        pd.testing.assert_frame_equal(frame[src == "step"], want[src == "step"], rtol=ULPS, atol=0, obj=metric)
        pd.testing.assert_frame_equal(frame[src == "raw"], want[src == "raw"], obj=metric)
        # the 2 min rules in 5 tiles of 2 min: peaks and means of the same scrapes (phase pinned), and counter
        # rates of a steady counter, equal; the request rate's growth term (deriv of gauges) is the mean of 5
        # tiles' slopes, not one slope over the step: within 2.5 % here (2.0 % measured)
        got, ref = frame[src == "range"].to_numpy(), want[src == "range"].to_numpy()
        close = np.isclose(got, ref, rtol=0.025 if metric == m.REQUEST_RATE else 1e-9, atol=1e-12, equal_nan=True)
        assert fine == "raw" or close.mean() > 0.98, f"{metric}: {close.mean():.3f} of the range-rule steps agree"
    line = client.stats.line()
    assert "10 read at 10m steps (every 10m) from" in line and "finer series or raw around them" in line, line
    assert "raw: ttft_over_objective_per_s (no recorded series)" in line and raw_client.stats.sources == ""
    # a step series is one sample per step and pod: far fewer samples than raw
    assert client.stats.samples < raw_client.stats.samples


class RefusesRecordedListings(Client):
    """The same server, refusing to list recorded series as too large (a cap such as VictoriaMetrics'), the raw
    ones listed as usual."""

    def series(self, match: str, start_s: float, end_s: float) -> list:  # type: ignore[type-arg]
        if "namespace_pod:" in match:
            raise PrometheusLimitError("the number of matching timeseries exceeds 30000")
        return super().series(match, start_s, end_s)


class NotPrometheus(Client):
    """The same server, without Prometheus' runtime page (as Thanos, Mimir or VictoriaMetrics answer), whose
    listings may not be as fine as its chunks."""

    def _ask_cores(self) -> int | None:
        return None


@pytest.mark.parametrize("other", [RefusesRecordedListings, NotPrometheus])
def test_recorded_series_are_listed_at_each_census_instant_or_counted_where_listing_is_refused(
        stepped: tuple[str, datetime], other: type[Client]) -> None:
    url, end = stepped
    listed, client = _collect(url, end, target_points=288)
    s = Settings(history_s=pc.HOURS * 3600, prometheus=PrometheusSettings(url=url, retries=0, target_points=288))
    refusing = other(s.prometheus)
    counted = collect_pod_usage(s, end - timedelta(hours=pc.HOURS), end, RecordingProgress(), client=refusing)
    assert not [q for q, _ in client.ranges if q.startswith("count by (__name__)")]  # listed: no sample read
    assert [q for q, _ in refusing.ranges if q.startswith("count by (__name__)") and "namespace_pod:" in q]
    # the same rules found, from the same steps, and the same frames
    assert client.stats.sources == refusing.stats.sources and "10 read at 10m steps" in client.stats.sources
    for metric, frame in listed.series.items():
        pd.testing.assert_frame_equal(counted.series[metric], frame, obj=metric)


def test_a_collection_of_the_new_steps_reads_them_from_the_sources_a_full_one_would(
        stepped: tuple[str, datetime]) -> None:
    url, end = stepped
    cache = UsageCache()
    _collect_cached(url, end - timedelta(hours=1), cache, target_points=288)
    again, client = _collect_cached(url, end, cache, target_points=288)  # 6 new steps and the last 2 again
    full, _ = _collect(url, end, target_points=288)
    assert all(start >= end.timestamp() - 4200 for q, start in client.ranges if STEP_READ in q or "s:120s])" in q)
    # the steps read again and the new ones from the step series (the last two from the 2 min series), as the
    # full collection reads them: not raw because the census of the new steps alone is too short to vouch for
    # the rules or to tell a 10 min interval
    step_reads = sorted(start - 1200 for q, start in client.ranges if STEP_READ in q and ":fb_used_mib:" in q)
    assert step_reads and step_reads[0] == end.timestamp() - 4200, client.stats.sources
    for metric, frame in full.series.items():
        pd.testing.assert_frame_equal(again.series[metric], frame, rtol=1e-12, atol=0, obj=metric)


def test_step_rules_the_step_cannot_use_fall_back_and_a_users_range_series_still_reads(
        stepped: tuple[str, datetime]) -> None:
    url, end = stepped
    # at 2 min steps the 10 min blocks do not combine into a step: the range rules serve
    _, client = _collect(url, end)
    assert not any(STEP_READ in q or "[120s] offset 1ms" in q for q, _ in client.ranges)
    assert "step series unused: " in client.stats.sources and "step window 2m is not a multiple of the step " \
        "series' 10m" in client.stats.sources
    # a user's range series in settings (here the shipped one under the user's name and range) comes before
    # the shipped range series, and the step series still comes first where it covers the window
    user = {m.FB_USED_MIB: "namespace_pod:fb_used_mib:2m[2m]"}
    raw, _ = _collect(url, end, recording_rules=False, target_points=288)
    mine, client = _collect(url, end, recorded_series=user, target_points=288)
    src = _sources(client, (":fb_used_mib:",), mine.series[m.FB_USED_MIB])
    assert [k for k, _ in itertools.groupby(src)] == ["raw", "range", "step", "range"]
    pd.testing.assert_frame_equal(mine.series[m.FB_USED_MIB], raw.series[m.FB_USED_MIB], rtol=1e-9, atol=1e-12)


def test_step_rules_after_a_gap_are_read_only_where_the_census_saw_them_and_equal_raw(
        gapped: tuple[str, datetime, float, float]) -> None:
    url, end, resumed_s, phase = gapped
    raw, raw_client = _collect(url, end, recording_rules=False, target_points=288)
    mixed, client = _collect(url, end, target_points=288)
    first_eval = resumed_s + (phase - resumed_s) % 600  # the rules' first evaluation after the gap
    step_reads = [start for q, start in client.ranges if STEP_READ in q]
    assert step_reads, client.stats.sources  # seen although no sample is within 5 min of a census instant
    first_read = min(step_reads) - 1200  # read 2 S after each step
    # never before the rules resumed and a whole window after (a step s needs the evaluation in [s + S, s + 2 S)),
    # at most a census step (hourly here) and a window later; the run before the gap is not read
    assert first_eval <= first_read <= resumed_s + 3600 + 1200
    for metric, frame in mixed.series.items():
        want = raw.series[metric]
        if metric in (m.FB_TOTAL_MIB, m.TTFT_OVER_OBJECTIVE_RATE):
            pd.testing.assert_frame_equal(frame, want, obj=metric)
            continue
        src = _sources(client, (f":{metric}:",), frame)
        # raw (the first run of rules included), the step series, then the last two steps (not evaluated yet)
        # from the range rules (raw for TTFT p95: a quantile does not combine from 2 min ones)
        fine = "raw" if metric == m.TTFT_P95_S else "range"
        assert [k for k, _ in itertools.groupby(src)] == ["raw", "step", fine], metric
        assert src[src == "step"].index[0].timestamp() == first_read and (src.iloc[-2:] == fine).all()
        # where the step series is read, the raw query's own answer within a few ulps (ULPS); raw elsewhere (the
        # range rules' phase is not pinned here: their tiles may hold other scrapes)
        keep = src != "range"
        pd.testing.assert_frame_equal(frame[keep], want[keep], rtol=ULPS, atol=0, obj=metric)
    line = client.stats.line()
    assert f"10 read at 10m steps (every 10m) from {datetime.fromtimestamp(first_read, UTC):%Y-%m-%d %H:%M}" in line
    assert raw_client.stats.sources == ""


def _warm(url: str, end: datetime, folder: Path) -> Settings:
    """Settings with the report cache in ``folder``, filled by a collection of the window ending at ``end``."""
    s = Settings(history_s=pc.HOURS * 3600, prometheus=PrometheusSettings(url=url, retries=0, cache_dir=str(folder)))
    disk = DiskCache(folder, s)
    cache, _ = disk.load()
    collect_pod_usage(s, end - timedelta(hours=pc.HOURS), end, RecordingProgress(), cache=cache)
    assert disk.save(cache) is None
    return s


def _from_disk(s: Settings, end: datetime, client: PromClient) -> PodUsage:
    """A collection ending at ``end`` with the cache on disk, through ``client``."""
    cache, _ = DiskCache(Path(str(s.prometheus.cache_dir)), s).load()
    return collect_pod_usage(s, end - timedelta(hours=pc.HOURS), end, RecordingProgress(), client=client,
                             cache=cache)


def test_a_warm_collection_takes_the_census_sent_ahead_and_asks_nothing_twice(
        half_recorded: tuple[str, datetime], tmp_path: Path) -> None:
    url, end = half_recorded
    s = _warm(url, end, tmp_path)
    ahead = census_ahead(s, end)
    assert ahead is not None and ahead.promised >= 2  # the raw and recorded census (then the intervals' query)
    warm = _from_disk(s, end, ahead)
    for sending in [t for t in threading.enumerate() if t.name == "ahead"]:  # whatever it still sends, it has sent
        sending.join(timeout=60)
    plain_client = PromClient(s.prometheus, QueryStats())
    plain = _from_disk(s, end, plain_client)
    assert ahead.promised == 0  # every request sent ahead was taken, the intervals' query too
    assert ahead.stats.queries == plain_client.stats.queries  # and none was sent again
    assert "recording rules: 10 of 11 families recorded" in ahead.stats.sources  # the intervals were read
    assert ahead.stats.sources == plain_client.stats.sources
    _same_frames(warm, plain)


def test_a_census_sent_ahead_for_another_window_is_never_used(half_recorded: tuple[str, datetime],
                                                              tmp_path: Path) -> None:
    url, end = half_recorded
    s = _warm(url, end, tmp_path)
    ahead = census_ahead(s, end)
    assert ahead is not None
    earlier = end - timedelta(minutes=30)  # before the cache's last step: the collection reads everything
    moved = _from_disk(s, earlier, ahead)
    assert ahead.promised >= 2  # what was sent ahead for the other window is left untaken
    _same_frames(moved, _from_disk(s, earlier, PromClient(s.prometheus, QueryStats())))


def test_no_census_is_sent_ahead_without_a_cache_that_says_where_to_start(half_recorded: tuple[str, datetime],
                                                                          tmp_path: Path) -> None:
    url, end = half_recorded
    s = Settings(history_s=pc.HOURS * 3600, prometheus=PrometheusSettings(url=url, cache_dir=str(tmp_path)))
    assert census_ahead(s, end) is None  # no file
    s = _warm(url, end, tmp_path)
    assert census_ahead(s.model_copy(update={"namespaces": ("other",)}), end) is None  # another reading's file
    assert census_ahead(s, end + timedelta(days=3)) is None  # a window past the cached one: a full read
    off = s.model_copy(update={"prometheus": s.prometheus.model_copy(update={"cache": False})})
    assert census_ahead(off, end) is None
