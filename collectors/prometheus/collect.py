"""Collect pod-level usage and inventory from Prometheus: plan the queries, run them in a bounded pool.

The plan is fixed by the number of metric families and time chunks, never by the number of pods: a
census query first counts the series behind each family (so absent families cost nothing and chunks
are sized to the fleet), then every (family, chunk) query and the coarse inventory queries run in a
pool of ``max_workers``. A query the server refuses as too large is halved and retried.

A loop (the controller) passes a :class:`UsageCache`: then only the steps added since its last
collection are read (and the last ``OVERLAP_STEPS`` again), usage and inventory alike, and joined to
what it already holds, instead of the whole history every cycle.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime

import numpy as np
import pandas as pd

from collectors.pods import PodDevices, PodUsage, pod_key
from collectors.prometheus import parse, queries
from collectors.prometheus.client import PromClient, PrometheusLimitError, QueryStats
from collectors.prometheus.parse import Accumulator, Grid, Result
from collectors.prometheus.queries import Chunk, Scope
from recommender.core import usage as m
from recommender.core.errors import PrometheusError
from recommender.core.inventory import WorkloadRef
from recommender.core.progress import Progress
from recommender.core.settings import Settings
from recommender.core.settings_sources import PrometheusSettings

INVENTORY_POINTS = 336  # coarse inventory series: hourly over 14 days
MAX_SPLITS = 6  # a chunk is halved at most this often (1/64 of its steps) before we give up
_DEVICE_LABELS = ("UUID", "uuid", "gpu", "Hostname", "GPU_I_ID", "GPU_I_PROFILE", "modelName")
TASK = "querying Prometheus"
GPU_NODES = "gpu_nodes"
_GPU_RESOURCES = 'resource=~"nvidia.*"'  # KSM's sanitised names of nvidia.com/* resources start "nvidia_com_"
OVERLAP_STEPS = 2  # steps of the last collection read again: samples scraped or written late fill them in


@dataclass(frozen=True)
class Window:
    """The aligned query grid of one collection, and the coarse step of the inventory queries."""

    grid: Grid
    window_s: int  # range of *_over_time and rate(): one step, at least two scrapes
    coarse: Chunk  # the whole window at the inventory step

    @property
    def fine(self) -> Chunk:
        g = self.grid
        return Chunk(g.start_s, g.start_s + (g.n - 1) * g.step_s, g.step_s)


def window_for(start: datetime, end: datetime, p: PrometheusSettings) -> Window:
    """Grid points on multiples of the step, so repeated runs and chunks line up.

    Example: 14 d ending 12:34:56 at step 600 s → last point 12:30:00, first 14 d later + 600 s, 2,016 points.
    """
    history_s = (end - start).total_seconds()
    step = queries.step_for(history_s, p)
    last = math.floor(end.timestamp() / step) * step
    n = max(1, int(history_s // step))
    first = last - (n - 1) * step
    coarse_step = max(step, math.ceil(history_s / INVENTORY_POINTS / step) * step)
    coarse_first = last - math.floor((last - first) / coarse_step) * coarse_step
    return Window(Grid(first, step, n), queries.rate_window_s(step, p), Chunk(coarse_first, last, coarse_step))


@dataclass
class UsageCache:
    """What the last collection read, so that the next reads only the steps added since (a loop's cycles).

    ``key`` is everything that shapes the queries and the grid (server, selection, step, window): when it
    changes, when the new window does not overlap the cached one, or ``refresh_s`` after the last full read
    (data corrected later than the overlap: a backfill, a late remote write), the next collection reads
    everything."""

    key: tuple[object, ...] | None = None
    series: dict[str, pd.DataFrame] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    inventory: dict[str, parse.Latest] = field(default_factory=dict)  # latest values, oldest first
    devices: parse.DeviceTable | None = None
    last_s: float = -math.inf  # the cached grid's last step
    full_s: float = -math.inf  # the grid's last step when everything was last read
    refresh_s: float = 86_400.0
    workloads: UsageCache | None = None  # the same for :func:`collect_workload_replicas` (its series: "replicas")

    def fresh_start(self, key: tuple[object, ...], grid: Grid) -> float | None:
        """The first step to read for ``grid``, or None when the cache cannot serve it (read everything)."""
        last = grid.start_s + (grid.n - 1) * grid.step_s
        if self.key is None or key != self.key or not self.series or not grid.start_s <= self.last_s <= last \
                or last - self.full_s >= self.refresh_s:
            return None
        return max(grid.start_s, self.last_s - (OVERLAP_STEPS - 1) * grid.step_s)

    def keep(self, key: tuple[object, ...], fresh: dict[str, pd.DataFrame], grid: Grid, first: float | None
             ) -> dict[str, pd.DataFrame]:
        """What a collection over ``grid`` read from ``first`` on (None: all of it, from :meth:`fresh_start`),
        joined to the cached steps before, and kept for the next collection."""
        series = fresh if first is None else join_usage(self.series, fresh, grid, first)
        last = grid.start_s + (grid.n - 1) * grid.step_s
        self.key, self.series, self.last_s = key, dict(series), last
        self.full_s = self.full_s if first is not None else last
        return series


def join_usage(cached: dict[str, pd.DataFrame], fresh: dict[str, pd.DataFrame], grid: Grid, fresh_start: float
               ) -> dict[str, pd.DataFrame]:
    """The cached steps before ``fresh_start`` that are still in ``grid``, then the fresh ones, per metric.

    Pods are the columns with a value in the window, as a full collection's answers would hold them (a pod
    whose only points in the window are NaN is left out: it says nothing either way)."""
    index = grid.index()
    cut = pd.Timestamp(fresh_start, unit="s", tz="UTC")
    out: dict[str, pd.DataFrame] = {}
    for metric in sorted(cached.keys() | fresh.keys()):
        old = cached.get(metric)
        kept = None if old is None else old[(old.index >= index[0]) & (old.index < cut)].dropna(axis=1, how="all")
        parts = [f for f in (kept, fresh.get(metric)) if f is not None and len(f.columns)]
        if not parts:
            continue
        frame = pd.concat(parts, axis=0).reindex(index=index)
        out[metric] = frame[sorted(frame.columns)]
    return out


@dataclass(frozen=True)
class Job:
    """One query of the plan: what it fills (a metric or an inventory name), its PromQL and range."""

    key: str
    promql: str
    chunk: Chunk
    origin: int  # index of the planned job it was split from (for progress)
    depth: int = 0


def inventory_queries(scope: Scope, win: Window, with_ksm: bool, node_labels: tuple[str, ...] = ()
                      ) -> dict[str, str]:
    """Coarse queries for what the spec cannot say: devices, vLLM config, and (without the API) owners
    and GPU nodes."""
    by = scope.by
    out = {
        "devices": queries.device_query(scope, tuple(dict.fromkeys((*_DEVICE_LABELS, *node_labels)))),
        "cache_config": f"max by ({by}, num_gpu_blocks, block_size, gpu_memory_utilization, model_name) "
                        f"(last_over_time({scope.matchers(queries.CACHE_CONFIG)}[{int(win.coarse.step_s)}s]))",
        "models": f"group by ({by}, model_name) ({scope.matchers(queries.RUNNING)})",
    }
    if with_ksm:
        ksm = Scope(scope.namespaces, "namespace", "pod", scope.extra)
        out |= {
            "pod_owner": f"max by (namespace, pod, owner_kind, owner_name) ({ksm.matchers(queries.KSM_POD_OWNER)})",
            "rs_owner": "max by (namespace, replicaset, owner_kind, owner_name) "
                        f"({ksm.matchers(queries.KSM_REPLICASET_OWNER, pods=False)})",
            "job_owner": "max by (namespace, job_name, owner_kind, owner_name) "
                         f"({ksm.matchers(queries.KSM_JOB_OWNER, pods=False)})",
            "requests": "sum by (namespace, pod, resource) "
                        f"({ksm.matchers(queries.KSM_REQUESTS, also=_GPU_RESOURCES)})",
        }
        if node_labels:
            out[GPU_NODES] = queries.node_query(scope, node_labels, int(win.coarse.step_s))
    return out


def coarse_chunks(win: Window, p: PrometheusSettings, series: int = 1, pieces: int = 1) -> list[Chunk]:
    """The inventory step over the whole window, cut by the same limits as usage queries and into at least
    ``pieces`` queries (where it has the steps): Prometheus evaluates one query on one core."""
    c = win.coarse
    per = min(queries.steps_per_chunk(series, c.step_s, p), math.ceil(c.steps / max(pieces, 1)))
    return queries.chunks(c.start_s, c.end_s, c.step_s, per)


def plan(counts: dict[str, int], scope: Scope, win: Window, p: PrometheusSettings,
         with_ksm: bool, fine: Chunk | None = None, objective_s: float | None = None) -> list[Job]:
    """Every query of one collection: each present family over its chunks, then the inventory. ``fine``: the
    steps to read (those a cache lacks), for the inventory too; by default the whole grid, and the inventory
    at its coarse step. ``objective_s``: the TTFT objective the over-objective rate counts against."""
    jobs: list[Job] = []
    for fam in queries.FAMILIES:
        series = parse.total(counts, fam.all_names)
        if series == 0:
            continue
        per = queries.steps_per_chunk(series, win.grid.step_s, p, parse.total(counts, fam.read_names))
        promql = queries.usage_query(fam.metric, scope, win.window_s, objective_s)
        f = fine or win.fine
        jobs += [Job(fam.metric, promql, c, 0) for c in queries.chunks(f.start_s, f.end_s, f.step_s, per)]
    pods = max(parse.total(counts, (queries.FB_USED,)), 1)  # inventory series are about one per pod
    last = Chunk(win.coarse.end_s, win.coarse.end_s, win.coarse.step_s)
    spans = [fine] if fine is not None else coarse_chunks(win, p, pods)
    for key, promql in inventory_queries(scope, win, with_ksm, p.node_labels).items():
        # GPU nodes as they are now: MIG devices an earlier layout had are gone
        jobs += [Job(key, promql, c, 0) for c in ([last] if key == GPU_NODES else spans)]
    return [Job(j.key, j.promql, j.chunk, i) for i, j in enumerate(jobs)]


def run_jobs(client: PromClient, jobs: list[Job], on_result: Callable[[Job, Result], None],
             progress: Progress, task: str = TASK) -> None:
    """Run the plan in a bounded pool; halve a query the server finds too large; stop at the first error.

    At most ``max_workers`` queries are in flight and each answer is handed to ``on_result`` as soon as
    it is read, so no more than that many decoded answers exist at once (memory).
    """
    progress.start(task, len(jobs))
    parts = {j.origin: 1 for j in jobs}
    waiting = deque(jobs)
    with ThreadPoolExecutor(max_workers=client.settings.max_workers, thread_name_prefix="promql") as pool:
        pending: dict[Future[Result], Job] = {}
        try:
            while waiting or pending:
                while waiting and len(pending) < client.settings.max_workers:
                    job = waiting.popleft()
                    c = job.chunk
                    pending[pool.submit(client.query_range, job.promql, c.start_s, c.end_s, c.step_s)] = job
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    job = pending.pop(fut)
                    try:
                        result = fut.result()
                    except PrometheusLimitError:
                        halves = queries.split(job.chunk) if job.depth < MAX_SPLITS else None
                        if halves is None:
                            raise
                        client.stats.count("splits")
                        parts[job.origin] += 1
                        waiting.extendleft(Job(job.key, job.promql, h, job.origin, job.depth + 1)
                                           for h in reversed(halves))
                        continue
                    on_result(job, result)
                    del result
                    parts[job.origin] -= 1
                    if parts[job.origin] == 0:
                        progress.advance(task)
        finally:
            for fut in pending:
                fut.cancel()


def _missing(counts: dict[str, int]) -> list[str]:
    """Warnings for the families a report cannot do without."""
    out = []
    for fam in queries.FAMILIES:
        if fam.hint and parse.total(counts, fam.all_names) == 0:
            out.append(f"no {' or '.join(fam.all_names)} series in the selected namespaces: {fam.hint}")
    return out


def _device_memory(used: pd.DataFrame | None, devices: tuple[PodDevices, ...]) -> pd.DataFrame | None:
    """FB used + free per pod, wherever FB used has data (device memory does not change under a pod)."""
    if used is None:
        return None
    mib = {pod_key(d.namespace, d.pod): d.device_memory_mib for d in devices if d.device_memory_mib}
    cols = [c for c in used.columns if c in mib]
    if not cols:
        return None
    present = used[cols].notna().to_numpy()
    values = np.where(present, np.array([mib[c] for c in cols]), np.nan)
    return pd.DataFrame(values, index=used.index, columns=pd.Index(cols))


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
    key = (client.url, extra, win.grid.step_s, win.window_s, tuple(r.key for r in wanted))
    first = sub.fresh_start(key, win.grid) if sub is not None else None
    fine = win.fine if first is None else Chunk(first, win.fine.end_s, win.grid.step_s)
    grid = Grid(fine.start_s, fine.step_s, fine.steps)
    jobs: list[Job] = []
    for kind in queries.KSM_WORKLOAD_REPLICAS:
        names = tuple((r.namespace, r.name) for r in wanted if r.kind == kind)
        if names:
            promql = queries.workload_replicas_query(kind, names, win.window_s, extra)
            per = queries.steps_per_chunk(len(names), fine.step_s, p)
            jobs += [Job(kind, promql, c, 0) for c in queries.chunks(fine.start_s, fine.end_s, fine.step_s, per)]
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


def _census(client: PromClient, scope: Scope, win: Window, p: PrometheusSettings, progress: Progress,
            since: Chunk | None = None, known: dict[str, int] | None = None) -> dict[str, int]:
    """Series per exported name, most at any one time (split like any query if the server insists): over the
    window at the inventory step, or over ``since`` only, added to what was ``known`` before it."""
    counts: dict[str, int] = dict(known or {})

    def merge(_: Job, result: Result) -> None:
        for name, n in parse.series_counts(result).items():
            counts[name] = max(counts.get(name, 0), n)

    promql = queries.census_query(scope)  # alone in the pool, so cut to keep every worker busy
    cut = [since] if since is not None else coarse_chunks(win, p, pieces=p.max_workers)
    run_jobs(client, [Job("census", promql, c, i) for i, c in enumerate(cut)], merge, progress, "counting series")
    return counts


def _collect(client: PromClient, s: Settings, win: Window, progress: Progress, with_ksm: bool,
             cache: UsageCache | None = None) -> PodUsage:
    p = s.prometheus
    scope = Scope.of(s.namespaces, p)
    objective_s = s.scaling.ttft_objective_s
    key = (client.url, scope, win.grid.step_s, win.window_s, with_ksm, objective_s)
    first = cache.fresh_start(key, win.grid) if cache is not None else None
    client.check()
    grid, fine, where = win.grid, None, ""
    if first is not None and cache is not None:
        grid = Grid(first, win.grid.step_s, round((win.fine.end_s - first) / win.grid.step_s) + 1)
        fine = Chunk(first, win.fine.end_s, grid.step_s)
        counts = _census(client, scope, win, p, progress, fine, cache.counts)
        where = f" ({win.grid.n - grid.n:,} earlier steps from the last collection)"
    else:
        counts = _census(client, scope, win, p, progress)
    jobs = plan(counts, scope, win, p, with_ksm, fine, objective_s)
    progress.log(f"{client.url}: {len(jobs)} queries over {grid.n:,} steps of {grid.step_s:g} s{where} "
                 f"for {', '.join(scope.namespaces) or 'all namespaces'}")
    acc = {fam.metric: Accumulator(grid) for fam in queries.FAMILIES}
    device_table = parse.DeviceTable(scope.namespace_label, scope.pod_label, p.node_labels)
    inventory: dict[str, parse.Latest] = defaultdict(list)
    if first is not None and cache is not None:  # what the cache saw that is still in the window
        if cache.devices is not None:
            device_table = cache.devices.forget(win.coarse.start_s)
        for k, found in cache.inventory.items():
            if k != GPU_NODES:
                inventory[k] = [x for x in found if x[2] >= win.coarse.start_s]

    def on_result(job: Job, result: Result) -> None:
        """Fold an answer in at once (usage into arrays, inventory to its latest values); keep none."""
        if job.key in acc:
            acc[job.key].add(result, scope.namespace_label, scope.pod_label)
        elif job.key == "devices":
            device_table.add(result)
        else:
            inventory[job.key] += parse.latest(result)

    run_jobs(client, jobs, on_result, progress)
    progress.log(client.stats.line())
    inv = {k: sorted(v, key=lambda x: x[2]) for k, v in inventory.items()}  # chunks arrive in any order
    series = {metric: a.frame() for metric, a in acc.items() if a.pods}
    if cache is not None:
        series = cache.keep(key, series, win.grid, first)
        cache.counts, cache.devices = counts, device_table
        cache.inventory = {k: parse.newest(v) for k, v in inv.items()}
    devices = device_table.records()
    total_mib = _device_memory(series.get(m.FB_USED_MIB), devices)
    if total_mib is not None:
        series[m.FB_TOTAL_MIB] = total_mib
    return PodUsage(
        series=series,
        devices=devices,
        owners=parse.owners(inv.get("pod_owner", []), inv.get("rs_owner", []), inv.get("job_owner", [])),
        requests=parse.requests(inv.get("requests", [])),
        vllm=parse.vllm_info(inv.get("cache_config", []), inv.get("models", []),
                             scope.namespace_label, scope.pod_label),
        warnings=tuple(_missing(counts)),
        gpu_nodes=parse.gpu_nodes(inv.get(GPU_NODES, []), p.node_labels),
    )
