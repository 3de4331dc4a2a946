"""Collect pod-level usage and inventory from Prometheus: plan the queries, run them in a bounded pool.

The plan is fixed by the number of metric families and time chunks, never by the number of pods: a
census first counts the series behind each family from the server's index (so absent families cost nothing
and chunks are sized to the fleet), then every (family, chunk) query and the coarse inventory queries run in a
pool of ``max_workers``. A query the server refuses as too large is halved and retried.

A loop (the controller) passes a :class:`UsageCache`: then only the steps added since its last
collection are read (and the last ``cachefile.OVERLAP_STEPS`` again), usage and inventory alike, and joined to
what it already holds, instead of the whole history every cycle.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime

import numpy as np
import pandas as pd

from collectors.pods import PodDevices, PodUsage, pod_key
from collectors.prometheus import census, chunks, parse, queries, rules
from collectors.prometheus.cache import UsageCache
from collectors.prometheus.cachefile import code_version, collection_key
from collectors.prometheus.census import RULE_CENSUS
from collectors.prometheus.chunks import Chunk, Grid
from collectors.prometheus.client import NoSeriesListing, PromClient, PrometheusLimitError, QueryStats
from collectors.prometheus.devices import DeviceTable, gpu_nodes
from collectors.prometheus.jobs import GPU_NODES, Job, plan, run_jobs
from collectors.prometheus.parse import Accumulator, Result
from collectors.prometheus.queries import RENAMED, Scope
from collectors.prometheus.rules import RulePlan
from collectors.prometheus.window import Window, window_for
from recommender.core import usage as m
from recommender.core.errors import PrometheusError
from recommender.core.inventory import WorkloadRef
from recommender.core.progress import Progress
from recommender.core.settings import Settings
from recommender.core.settings_sources import PrometheusSettings


def _missing(counts: dict[str, int]) -> list[str]:
    """Warnings for the families a report cannot do without."""
    out = []
    for fam in queries.FAMILIES:
        if fam.hint and parse.total(counts, fam.all_names) == 0:
            out.append(f"no {' or '.join(fam.all_names)} series in the selected namespaces: {fam.hint}")
    return out


# Families read into float32 arrays while every value is exact there (``parse.Accumulator.compact``): DCGM gives FB
# used in whole MiB and the query takes ``max_over_time``. The others are fractions, means or rates: on real data
# they would turn to float64 at their first values, so they are read at float64 from the start.
COMPACT = frozenset({m.FB_USED_MIB})


def exact_float32(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` at float32 when every value reads back as the same float64 (NaN stays NaN, -0.0 stays -0.0),
    a slice of columns at a time; else ``frame`` itself. Readers take float64 (``Snapshot.series`` upcasts), so
    they see the same numbers; a frame already float32, empty or of another dtype is returned as it is."""
    if frame.empty or not all(dt == np.float64 for dt in frame.dtypes):
        return frame
    values = frame.to_numpy()  # one block: a view
    out = np.empty(values.shape, dtype=np.float32, order="F")  # pandas' layout: taken as is
    for lo in range(0, values.shape[1], 256):
        part = values[:, lo: lo + 256]
        small = out[:, lo: lo + 256]
        with np.errstate(over="ignore", invalid="ignore"):  # beyond float32: inf, and then not exact
            small[...] = part
        back = small.astype(np.float64)
        if not np.array_equal(back, part, equal_nan=True) or not np.array_equal(
                np.signbit(back), np.signbit(part)):
            return frame
    return pd.DataFrame(out, index=frame.index, columns=frame.columns, copy=False)


def _device_memory(used: pd.DataFrame | None, devices: tuple[PodDevices, ...]) -> pd.DataFrame | None:
    """FB used + free per pod, wherever FB used has data (device memory does not change under a pod).

    float32 where every size is a whole number of MiB below 2**24 (held exactly: the readers' float64 values
    are the same), float64 otherwise."""
    if used is None:
        return None
    mib = {pod_key(d.namespace, d.pod): d.device_memory_mib for d in devices if d.device_memory_mib}
    where = [i for i, c in enumerate(used.columns) if c in mib]
    if not where:
        return None
    cols = used.columns[where]
    exact = all(float(v).is_integer() and abs(v) < 2**24 for v in mib.values())
    dtype = np.float32 if exact else np.float64
    values = np.full((len(used.index), len(cols)), np.nan, dtype=dtype, order="F")  # pandas' layout: taken as is
    for lo in range(0, len(cols), 256):  # a slice of columns at a time: no copy of FB used, a small mask
        part = slice(lo, lo + 256)
        present = used.iloc[:, where[part]].notna().to_numpy()
        np.copyto(values[:, part], np.array([mib[c] for c in cols[part]], dtype=dtype), where=present)
    return pd.DataFrame(values, index=used.index, columns=cols, copy=False)


def collect_pod_usage(s: Settings, start: datetime, end: datetime, progress: Progress, *,
                      with_ksm: bool = True, client: PromClient | None = None, cache: UsageCache | None = None
                      ) -> PodUsage:
    """Usage series, devices, vLLM config and (``with_ksm``) owners and requests of every GPU pod.
    With a ``cache``, only the usage steps it does not hold are read, and the cache is updated."""
    p = s.prometheus
    client = client or PromClient(p, QueryStats())
    with _reading(cache):
        return _collect(client, s, window_for(start, end, p), progress, with_ksm, cache)


@contextmanager
def _reading(cache: UsageCache | None) -> Iterator[None]:
    """A limit no split can meet as one line; after any other failure the cache reads everything next."""
    try:
        yield
    except PrometheusLimitError as exc:
        raise PrometheusError(f"{exc}, even split into smaller queries; shorten --history, select fewer "
                              "namespaces (-n) or raise the server's query limits") from None
    except BaseException:
        if cache is not None:  # it may hold part of this collection: the next one reads everything
            cache.key = None
        raise


def collect_workload_replicas(s: Settings, refs: Sequence[WorkloadRef], start: datetime, end: datetime,
                              progress: Progress, *, client: PromClient | None = None, cache: UsageCache | None = None
                              ) -> pd.DataFrame | None:
    """How many pods each Deployment or StatefulSet in ``refs`` had at each step of the usage grid, from
    kube-state-metrics (the most within the step, so 0 only where it had none throughout): columns are
    ``WorkloadRef.key``, NaN where kube-state-metrics said nothing. None when it has none of them (not
    installed, other kinds). Read after the usage, for the workloads it found: a step at zero has no vLLM
    metric, and only this tells it from a step without metrics. With a ``cache`` only the new steps are read."""
    p = s.prometheus
    win = window_for(start, end, p)
    wanted = sorted({r for r in refs if r.kind in queries.KSM_WORKLOAD_REPLICAS}, key=lambda r: r.key)
    if not wanted:
        return None
    client = client or PromClient(p, QueryStats())
    extra = p.extra_selector.strip(" ,{}")
    sub = None
    if cache is not None:
        sub = cache.workloads = cache.workloads or UsageCache(refresh_s=cache.refresh_s)
    key = (client.url, extra, win.grid.step_s, win.window_s, tuple(r.key for r in wanted), code_version())
    first = sub.fresh_start(key, win.grid) if sub is not None else None
    fine = win.fine if first is None else Chunk(first, win.fine.end_s, win.grid.step_s)
    grid = Grid(fine.start_s, fine.step_s, fine.steps)
    jobs: list[Job] = []
    for kind in queries.KSM_WORKLOAD_REPLICAS:
        names = tuple((r.namespace, r.name) for r in wanted if r.kind == kind)
        if names:
            promql = queries.workload_replicas_query(kind, names, win.window_s, extra)
            per = chunks.steps_per_chunk(len(names), fine.step_s, p)
            jobs += [Job(kind, promql, c, 0) for c in chunks.chunks(fine.start_s, fine.end_s, fine.step_s, per)]
    jobs = [replace(j, origin=i) for i, j in enumerate(jobs)]
    acc = {kind: Accumulator(grid) for kind in queries.KSM_WORKLOAD_REPLICAS}

    def on_result(job: Job, result: Result) -> None:
        acc[job.key].add(result, "namespace", queries.KSM_WORKLOAD_REPLICAS[job.key][1])

    with _reading(sub):
        run_jobs(client, jobs, on_result, progress, "reading replica counts")
    keys = {r.key for r in wanted}
    frames = []
    for kind, a in acc.items():
        frame = a.frame()  # columns "namespace/name", as pod_key forms them
        frame.columns = pd.Index([WorkloadRef(ns, kind, name).key
                                  for ns, name in (c.split("/", 1) for c in frame.columns)])
        frames.append(frame[[c for c in frame.columns if c in keys]])
    found = {"replicas": pd.concat(frames, axis=1)}
    if sub is not None:
        found = sub.keep(key, found, win.grid, first)
    replicas = found.get("replicas")
    return None if replicas is None or replicas.columns.empty else replicas[sorted(replicas.columns)]


RULE_LISTINGS = "listing recorded series"  # the progress task of the recorded series' census
CENSUS_LOOKBACK_S = rules.LOOKBACK_S  # the census counts what the first inventory step sees


def _census(client: PromClient, scope: Scope, win: Window, p: PrometheusSettings, progress: Progress,
            since: Chunk | None = None, known: dict[str, int] | None = None,
            recorded: dict[str, list[list[object]]] | None = None
            ) -> tuple[dict[str, int], Chunk, int | None, Clusters | None]:
    """Series per exported name over the window, listed from the server's index (:func:`_raw_counts`): no sample
    is read, where counting at each inventory step decoded every sample of every raw series and mapped all their
    blocks into the server's memory. A series counts once whatever part of the window it covers, so a pod
    replaced within it counts again: the series a query selects over it, at most, which is what sizing it needs.
    Over ``since`` only (a cached collection's new steps), the series are counted at each of those steps
    instead, and added to what was ``known`` before them. With ``recorded``, the recorded series are counted as
    well at the coarser steps of :func:`rules.census_chunk` (or :func:`rules.census_since`), their counts at each
    step kept in ``recorded``: listed at each step where the raw series could be listed at once and the server is
    Prometheus itself, whose listings are as fine as its chunks (:func:`_listed_rules`; coverage needs them at
    each step), else by a query of their own; returns the counts, the range of that census, how many raw
    series are another scraped again and the cluster labels' values per pod (:class:`RawCensus`; None where not
    all were listed, or none)."""
    counts: dict[str, int] = dict(known or {})

    def merge(job: Job, result: Result) -> None:
        if job.key == RULE_CENSUS and recorded is not None:
            census.add_recorded(recorded, result)
            return
        parse.keep_most(counts, parse.series_counts(result))

    jobs: list[Job] = []
    twice, clusters = None, None
    if since is not None:  # a few new steps (the asks ``ahead`` may have sent before the imports)
        asks, span = census.since_asks(scope, win, p, since)
        jobs = [Job(a.key, a.promql, a.chunk, i) for i, a in enumerate(asks)]
    else:
        span = rules.census_chunk(win.coarse)
        raw = _raw_counts(client, scope, win.coarse, p, progress)
        found, listed, twice, clusters = raw.counts, raw.listed, raw.twice, raw.clusters
        parse.keep_most(counts, found)
        if recorded is not None and not (listed and client.is_prometheus
                                         and _listed_rules(client, scope, p, span, recorded, progress)):
            # recorded series: one per pod and family per kind of rule, about as many as the raw ones, the step
            # series selected twice: held as two samples a series and step (as sample_s = step counts them)
            per = chunks.steps_per_chunk(max(sum(found.values()), 1), span.step_s, p, sample_s=span.step_s)
            rule_promql = rules.census_query(scope, p)
            jobs = [Job(RULE_CENSUS, rule_promql, c, i)
                    for i, c in enumerate(chunks.chunks(span.start_s, span.end_s, span.step_s, per))]
    if jobs:
        run_jobs(client, jobs, merge, progress, "counting series")
    return counts, span, twice, clusters


def _listed_rules(client: PromClient, scope: Scope, p: PrometheusSettings, span: Chunk,
                  recorded: dict[str, list[list[object]]], progress: Progress) -> bool:
    """The census of recorded series at each instant of ``span`` from series listings (:func:`rules.census_listings`),
    ``in_flight`` at a time, into ``recorded`` as the count query's answers would fill it: counting at each instant
    decoded a chunk of every recorded series and mapped most of their blocks into the server's memory. False (and
    ``recorded`` untouched) where the server lists no series or refuses a listing as too large: count instead."""
    asks = [(t, sel, t - before) for t in (span.start_s + k * span.step_s for k in range(span.steps))
            for sel, before in rules.census_listings(scope, p)]
    progress.start(RULE_LISTINGS, len(asks))
    found = []
    try:
        with ThreadPoolExecutor(max_workers=client.in_flight, thread_name_prefix="census") as pool:
            for names in pool.map(lambda a: parse.series_names(client.series(a[1], a[2], a[0])), asks):
                found.append(names)
                progress.advance(RULE_LISTINGS)
    except (NoSeriesListing, PrometheusLimitError):
        return False
    for (t, _, _), names in zip(asks, found, strict=True):
        for name, n in names.items():
            recorded.setdefault(name, []).append([t, str(n)])
    return True


Clusters = dict[str, dict[str, set[str]]]  # per pod, the values of each cluster label on its series


@dataclass(frozen=True)
class RawCensus:
    """Series per exported name, whether the server listed them all at once, how many of them are another
    series scraped again by another job (``parse.scraped_twice``; None where some were counted, not listed), and
    per pod the values of the cluster labels on the series listed (``parse.pod_clusters``; None where none was)."""

    counts: dict[str, int]
    listed: bool
    twice: int | None
    clusters: Clusters | None = None


def _raw_counts(client: PromClient, scope: Scope, span: Chunk, p: PrometheusSettings, progress: Progress
                ) -> RawCensus:
    """Series per exported name over ``span`` (and an instant lookback before it), listed by the server
    (:class:`RawCensus`). A server that caps what one listing returns (VictoriaMetrics'
    ``-search.maxSeries``) is asked one name at a time, and a name it still refuses is counted by a query at each
    of ``span``'s steps: the most series it had at once. A gateway that passes only the query endpoints (404, 405
    or 501 from the listing, or 403: a check query has passed by then) has every name counted that way, as the
    census always did."""
    start_s = span.start_s - CENSUS_LOOKBACK_S
    counts: dict[str, int] = {}
    twice = 0
    clusters: Clusters = {}

    def listed(names: tuple[str, ...]) -> None:
        nonlocal twice
        listing = client.series(scope.matchers(names), start_s, span.end_s)
        counts.update(parse.series_names(listing))
        twice += parse.scraped_twice(listing, p.target_labels)
        parse.pod_clusters(listing, *scope.pod_labels(names), p.cluster_labels, clusters)

    try:
        for part in queries.census_parts(scope):
            listed(part)
        return RawCensus(counts, True, twice, clusters)
    except PrometheusLimitError:
        listable = queries.CENSUS_NAMES
    except NoSeriesListing as exc:
        progress.log(f"{exc}: counting series at each inventory step instead")
        listable = ()
    counts.clear()
    clusters.clear()
    twice = 0
    refused = [name for name in queries.CENSUS_NAMES if name not in listable]
    for name in listable:
        try:
            listed((name,))
        except PrometheusLimitError:
            refused.append(name)
    if not refused:
        return RawCensus(counts, False, twice, clusters)

    def merge(job: Job, result: Result) -> None:
        parse.keep_most(counts, parse.series_counts(result))

    # cut by the series it selects (one instant count) and into a query per one in flight: a query runs on one core
    jobs: list[Job] = []
    for selector in queries.census_selectors(scope, tuple(sorted(refused))):
        now = client.query(f"count({selector})", span.end_s)
        series = max((int(float(r["value"][1])) for r in now if r.get("value")), default=1)
        per = min(chunks.steps_per_chunk(series, span.step_s, p, sample_s=span.step_s),
                  math.ceil(span.steps / client.in_flight))
        jobs += [Job("census", queries.census_query(selector), c, len(jobs) + i)
                 for i, c in enumerate(chunks.chunks(span.start_s, span.end_s, span.step_s, per))]
    run_jobs(client, jobs, merge, progress, "counting series")
    return RawCensus(counts, False, None, clusters if listable else None)


def _exporter_labels(client: PromClient, scope: Scope, start_s: float, end_s: float
                     ) -> tuple[tuple[str, str] | None, bool, str | None]:
    """Where dcgm-exporter's series from ``start_s`` to ``end_s`` name the pods using each GPU, where not in the
    scope's labels (``Scope.exporter``), whether kube-state-metrics' name theirs in the renamed labels, and a
    warning where renamed series are not read: the renamed ones, where a scrape did not honour them, unless another
    job's series name pods in its own (then the renamed ones are another scrape's, a tenant's exporter's or a
    second one of dcgm-exporter, and read as the scrape would turn every GPU's reading); else its own, where they
    are not the scope's and its FB used has them (the scope's then name its own pod, as the scrape's target
    labels)."""
    own = Scope(scope.namespaces, *queries.EXPORTER_LABELS, scope.extra)
    configured = (scope.namespace_label, scope.pod_label) != queries.EXPORTER_LABELS  # other target labels
    found = _listed(client, own.matchers((queries.FB_USED, queries.KSM_POD_OWNER), renamed=True), start_s, end_s)
    ksm = any(labels.get("__name__") == queries.KSM_POD_OWNER for labels in found)
    renamed = [labels for labels in found if labels.get("__name__") == queries.FB_USED]
    plain = _listed(client, own.matchers(queries.FB_USED, also=f'{queries.RENAMED_LABELS[1]}=""'), start_s, end_s) \
        if renamed or configured else []
    jobs = {labels.get("job") for labels in renamed}  # the renamed scrape's: its free GPUs name its own pods
    beside = {labels.get(queries.EXPORTER_LABELS[1]) for labels in plain if labels.get("job") not in jobs}
    if renamed and not beside:
        return queries.RENAMED_LABELS, ksm, None
    why = (f"{len(renamed):,} dcgm-exporter series name their pods in {' and '.join(queries.RENAMED_LABELS)}, beside "
           f"{len(beside):,} pods named in {' and '.join(queries.EXPORTER_LABELS)}: another target scraped without "
           "honouring its labels (a tenant's exporter, or a second scrape), whose series are not read") \
        if renamed else None
    if configured and plain:
        return queries.EXPORTER_LABELS, ksm, why
    return None, ksm, why


def _listed(client: PromClient, selector: str, start_s: float, end_s: float, by: str = "__name__"
            ) -> list[dict[str, str]]:
    """The label sets of the series ``selector`` picks from ``start_s`` to ``end_s``: listed from the server's
    index, or counted by ``by`` at ``end_s`` where it lists no series or refuses to list that many (``by`` alone)."""
    try:
        found = client.series(selector, start_s, end_s)
    except (NoSeriesListing, PrometheusLimitError):
        found = client.query(f"count by ({by}) ({selector})", end_s)
    return [dict(item.get("metric") or {}) for item in found]


def _idle(client: PromClient, scope: Scope, exporter: tuple[str, str], new_s: float, start_s: float,
          end_s: float) -> bool:
    """Whether dcgm-exporter's series from ``new_s`` to ``end_s`` name no pod in ``exporter`` because no pod holds a
    GPU, not because the scrape was changed: every pod the scope's labels name on them then is an exporter's own,
    one its series from ``start_s`` named beside a pod in ``exporter`` (none at all: nothing to tell)."""
    pod = scope.pod_label

    def pods(selector: str, since_s: float) -> set[str]:
        return {v for labels in _listed(client, selector, since_s, end_s, by=pod) if (v := labels.get(pod))}

    plain = pods(scope.matchers(queries.FB_USED), new_s)
    if not plain:
        return True
    anywhere = Scope((), scope.namespace_label, pod, scope.extra)  # the exporters' namespace, whichever it is
    return plain <= pods(anywhere.matchers(queries.FB_USED, also=f'{exporter[1]}!=""'), start_s)


# kube-state-metrics scraped without its labels (``_exporter_labels``): read from the renamed ones
# (Scope.either_scrape)
KSM_RENAMED = (f"note: kube-state-metrics' series name their pods in {RENAMED}namespace and {RENAMED}pod: the scrape "
               "does not honour its labels (honorLabels: false), so namespace and pod name its own pod. Its owners, "
               "GPU requests and replica counts are read from the renamed ones; set honorLabels: true on its "
               "ServiceMonitor")


def _labels(exporter: tuple[str, str] | None, scope: Scope) -> str:
    """``exporter`` (``Scope.exporter``; None: the scope's own) in words."""
    ns, pod = exporter or (scope.namespace_label, scope.pod_label)
    return f"{ns} and {pod}"


def _rule_plan(client: PromClient, scope: Scope, win: Window, p: PrometheusSettings, fine: Chunk,
               span: Chunk, objective_s: float, recorded: dict[str, list[list[object]]]) -> RulePlan:
    """Which families recording rules cover over ``fine``, from the census' counts of recorded series at each
    step of ``span`` and one instant query for their evaluation intervals."""
    present, promql = census.interval_ask(recorded, span, scope)
    every = rules.intervals(client.query(promql, span.end_s), present, span.end_s) if promql is not None else {}
    return rules.choose(present, every, p, win.window_s, fine, objective_s)


def _collect(client: PromClient, s: Settings, win: Window, progress: Progress, with_ksm: bool,
             cache: UsageCache | None = None) -> PodUsage:
    p = s.prometheus
    scope = Scope.of(s.namespaces, p)
    objective_s = s.scaling.ttft_objective_s
    key = collection_key(s, client.url, win.window_s, with_ksm)
    first = cache.fresh_start(key, win.grid) if cache is not None else None
    client.check()
    grid, fine, where = win.grid, None, ""
    recorded: dict[str, list[list[object]]] | None = {} if p.recording_rules else None
    exporter, ksm_renamed, ignored = _exporter_labels(
        client, scope, (win.coarse.start_s if first is None else first) - CENSUS_LOOKBACK_S, win.coarse.end_s)
    if first is not None and cache is not None and exporter is None and cache.exporter is not None \
            and _idle(client, scope, cache.exporter, first - CENSUS_LOOKBACK_S, win.coarse.start_s, win.coarse.end_s):
        exporter = cache.exporter  # no pod held a GPU over the new steps: the labels are as they were
    if first is not None and cache is not None and exporter != cache.exporter:
        first = None  # the scrape was changed since: the cached steps were read by the other labels
        progress.log(f"note: dcgm-exporter's series name their pods in {_labels(exporter, scope)} now, in "
                     f"{_labels(cache.exporter, scope)} when last read: reading everything again")
        exporter, ksm_renamed, ignored = _exporter_labels(client, scope, win.coarse.start_s - CENSUS_LOOKBACK_S,
                                                          win.coarse.end_s)
    scope = replace(scope, exporter=exporter)  # a cached read's: as its full read found it
    if ksm_renamed:
        progress.log(KSM_RENAMED)
    if first is not None and cache is not None:
        grid = Grid(first, win.grid.step_s, round((win.fine.end_s - first) / win.grid.step_s) + 1)
        fine = Chunk(first, win.fine.end_s, grid.step_s)
        counts, span, twice, _ = _census(client, scope, win, p, progress, fine, cache.counts, recorded)
        where = f" ({win.grid.n - grid.n:,} earlier steps from the last collection)"
        apart = cache.clusters  # the last full read's listing: the new steps are counted, not listed
    else:
        if scope.exporter == queries.RENAMED_LABELS:
            progress.log(f"note: dcgm-exporter's series name the pods using each GPU in {_labels(exporter, scope)}: "
                         "the scrape does not honour its labels (honorLabels: false), so namespace and pod name the "
                         "exporter's own pods. They are read from the renamed ones, and its families from raw series")
        elif scope.exporter is not None:
            progress.log(f"note: dcgm-exporter's series name the pods using each GPU in {_labels(exporter, scope)}, "
                         f"and {_labels(None, scope)} (prometheus.namespace_label and pod_label) the exporter's own "
                         "pods: its families are read from its labels, and from raw series")
        counts, span, twice, clusters = _census(client, scope, win, p, progress, recorded=recorded)
        apart = parse.several_clusters(clusters or {})
    if twice == 0:  # listed, each once: nothing to take once before it is summed per pod (a costly aggregation)
        scope = replace(scope, target_labels=())
    elif twice:
        progress.log(f"note: {twice:,} series are another one scraped again by another job (the same labels but "
                     f"{', '.join(p.target_labels)}): each is read once")
    rule_plan = _rule_plan(client, scope, win, p, fine or win.fine, span, objective_s, recorded) \
        if recorded is not None else None
    if rule_plan is not None and scope.exporter is not None:
        rule_plan = rules.exporter_raw(rule_plan)
    jobs = plan(counts, scope, win, p, with_ksm, fine, objective_s, rule_plan)
    progress.log(f"{client.url}: {len(jobs)} queries over {grid.n:,} steps of {grid.step_s:g} s{where} "
                 f"for {', '.join(scope.namespaces) or 'all namespaces'}, {client.in_flight} at a time"
                 + (" (the server's cores)" if client.in_flight < p.max_workers else ""))
    acc = {fam.metric: Accumulator(grid, parse.total(counts, fam.all_names), fam.metric in COMPACT)
           for fam in queries.FAMILIES}
    device_table = DeviceTable(scope.namespace_label, scope.pod_label, p.node_labels)
    inventory: dict[str, parse.Latest] = defaultdict(list)
    labels: dict[tuple[str, ...], dict[str, str]] = {}  # one dict per inventory series, while answers come
    if first is not None and cache is not None:  # what the cache saw that is still in the window
        if cache.devices is not None:
            device_table = cache.devices.forget(win.coarse.start_s)
        for k, found in cache.inventory.items():
            if k != GPU_NODES:
                inventory[k] = [x for x in found if x[2] >= win.coarse.start_s]

    def on_result(job: Job, result: Result) -> None:
        """Fold an answer in at once (usage into arrays, inventory to its latest values); keep none."""
        if job.key in acc:
            acc[job.key].add(result, scope.namespace_label, scope.pod_label, job.shift_s)
        elif job.key == "devices":
            device_table.add(result)
        else:
            inventory[job.key] += parse.latest(result, labels)

    run_jobs(client, jobs, on_result, progress)
    labels.clear()
    if rule_plan is not None:
        client.stats.sources = rule_plan.line({j.key for j in jobs if j.key in acc}, grid.start_s)
    progress.log(client.stats.line())
    inv = {k: sorted(v, key=lambda x: x[2]) for k, v in inventory.items()}  # chunks arrive in any order
    series = {metric: a.frame() for metric, a in acc.items() if a.pods}
    if cache is not None:
        series = cache.keep(key, series, win.grid, first)
        cache.counts, cache.devices = counts, device_table
        cache.inventory = {k: parse.newest(v) for k, v in inv.items()}
        cache.clusters, cache.exporter = apart, scope.exporter
    used = series.get(m.FB_USED_MIB)
    if used is not None:  # DCGM gives whole MiB: held at float32 when exact (the cache's copy too); read so
        # already (COMPACT), this is for the steps a cache joins to it
        series[m.FB_USED_MIB] = used = exact_float32(used)
        if cache is not None:
            cache.series = {**cache.series, m.FB_USED_MIB: used}
    devices = device_table.records()
    total_mib = _device_memory(used, devices)
    if total_mib is not None:
        series[m.FB_TOTAL_MIB] = total_mib
    return PodUsage(
        series=series,
        devices=devices,
        owners=parse.owners(inv.get("pod_owner", []), inv.get("rs_owner", []), inv.get("job_owner", [])),
        requests=parse.requests(inv.get("requests", [])),
        vllm=parse.vllm_info(inv.get("cache_config", []), inv.get("models", []),
                             scope.namespace_label, scope.pod_label),
        warnings=(*_missing(counts), *([ignored] if ignored else [])),
        gpu_nodes=gpu_nodes(inv.get(GPU_NODES, []), p.node_labels, p.cluster_labels),
        clusters=apart,
    )
