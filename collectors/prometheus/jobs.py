"""The query plan of one collection and the pool that runs it: one range query per (metric family, time
chunk), chunks sized by the series a census counted, plus the coarse inventory queries; at most
``max_workers`` in flight (fewer where the server has fewer cores), each answer handed on as soon as it is
read, a family's chunks not yet sent cut again from what the server said its answered ones held
(``chunks.Measured``), a query the server refuses as too large halved and retried (at most ``MAX_SPLITS`` times).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace

from collectors.prometheus import chunks, parse, queries
from collectors.prometheus.chunks import Chunk, Cost, Measured
from collectors.prometheus.client import PromClient, PrometheusLimitError
from collectors.prometheus.parse import Result
from collectors.prometheus.queries import Scope
from collectors.prometheus.rules import RulePlan, recorded_query, segments, step_query
from collectors.prometheus.window import Window
from recommender.core.memory import give_back_freed
from recommender.core.progress import Progress
from recommender.core.settings_sources import TARGET_LABELS, PrometheusSettings

MAX_SPLITS = 6  # a chunk is halved at most this often (1/64 of its steps) before we give up
_DEVICE_LABELS = ("UUID", "uuid", "gpu", "Hostname", "GPU_I_ID", "GPU_I_PROFILE", "modelName")
TASK = "querying Prometheus"
GPU_NODES = "gpu_nodes"
_GPU_RESOURCES = 'resource=~"nvidia.*"'  # KSM's sanitised names of nvidia.com/* resources start "nvidia_com_"
_KSM_TARGET = ("namespace", "pod", "container")  # labels of kube-state-metrics' pod series a scrape sets too


@dataclass(frozen=True)
class Job:
    """One query of the plan: what it fills (a metric or an inventory name), its PromQL and range."""

    key: str
    promql: str
    chunk: Chunk
    origin: int  # index of the planned job it was split from (for progress)
    depth: int = 0
    shift_s: float = 0.0  # evaluated at each step + shift_s (a step series' blocks are recorded after them)
    cost: Cost | None = None  # how a family's chunk was sized, so its later chunks can be cut again

    @property
    def family(self) -> tuple[str, str, float, float]:
        """Jobs that differ only in their chunk."""
        return self.key, self.promql, self.shift_s, self.chunk.step_s


def inventory_queries(scope: Scope, win: Window, with_ksm: bool, node_labels: tuple[str, ...] = (),
                      target_labels: tuple[str, ...] = TARGET_LABELS, cluster_labels: tuple[str, ...] = ()
                      ) -> dict[str, str]:
    """Coarse queries for what the spec cannot say: devices, vLLM config, and (without the API) owners
    and GPU nodes. ``target_labels``: what a scrape adds, so kube-state-metrics scraped twice is read once (the
    census, which sees only the exporters' series, cannot tell)."""
    by = scope.by
    out = {
        "devices": queries.device_query(scope, tuple(dict.fromkeys((*_DEVICE_LABELS, *node_labels)))),
        "cache_config": f"max by ({by}, num_gpu_blocks, block_size, gpu_memory_utilization, model_name) "
                        f"(last_over_time({scope.matchers(queries.CACHE_CONFIG)}[{int(win.coarse.step_s)}s]))",
        "models": f"group by ({by}, model_name) ({scope.matchers(queries.RUNNING)})",
    }
    if with_ksm:  # its labels as it gave them, whether or not the scrape honoured them (Scope.either_scrape)
        ksm = Scope(scope.namespaces, *queries.EXPORTER_LABELS, scope.extra,
                    (*target_labels, *(queries.RENAMED + x for x in _KSM_TARGET)))
        ns = ("namespace",)
        out |= {
            "pod_owner": "max by (namespace, pod, owner_kind, owner_name, owner_is_controller) "
                         f"({ksm.either_scrape((queries.KSM_POD_OWNER,), _KSM_TARGET, queries.EXPORTER_LABELS)})",
            "rs_owner": "max by (namespace, replicaset, owner_kind, owner_name) "
                        f"({ksm.either_scrape((queries.KSM_REPLICASET_OWNER,), ns, (*ns, 'replicaset'), pods=False)})",
            "job_owner": "max by (namespace, job_name, owner_kind, owner_name) "
                         f"({ksm.either_scrape((queries.KSM_JOB_OWNER,), ns, (*ns, 'job_name'), pods=False)})",
            # each container's, each copy once: the copies differ only in target labels once the renamed are copied back
            "requests": "sum by (namespace, pod, resource) (" + ksm.once(ksm.either_scrape(
                (queries.KSM_REQUESTS,), _KSM_TARGET, queries.EXPORTER_LABELS, also=_GPU_RESOURCES)) + ")",
        }
        if node_labels:
            out[GPU_NODES] = queries.node_query(scope, node_labels, int(win.coarse.step_s), cluster_labels)
    return out


def coarse_chunks(win: Window, p: PrometheusSettings, series: int = 1, instant: bool = False) -> list[Chunk]:
    """The inventory step over the whole window, cut by the same limits as usage queries. ``instant``: its
    selectors are instant vectors (no range), which hold one sample per series and step."""
    c = win.coarse
    per = chunks.steps_per_chunk(series, c.step_s, p, sample_s=c.step_s if instant else None)
    return chunks.chunks(c.start_s, c.end_s, c.step_s, per)


def plan(counts: dict[str, int], scope: Scope, win: Window, p: PrometheusSettings,
         with_ksm: bool, fine: Chunk | None = None, objective_s: float | None = None,
         rules: RulePlan | None = None) -> list[Job]:
    """Every query of one collection: each present family over its chunks, then the inventory. ``fine``: the
    steps to read (those a cache lacks), for the inventory too; by default the whole grid, and the inventory
    at its coarse step. ``objective_s``: the TTFT objective the over-objective rate counts against. ``rules``:
    families read from recorded series, from which step (raw before it)."""
    jobs: list[Job] = []
    step = win.grid.step_s
    for fam in queries.FAMILIES:
        series = parse.total(counts, fam.all_names)
        rec = rules.recorded.get(fam.metric) if rules is not None else None
        stepped = rules.stepped.get(fam.metric) if rules is not None else None
        if series == 0 and rec is None and stepped is None:
            continue
        pods = max(series, parse.total(counts, (queries.FB_USED,)), 1)
        for source, f in segments(fine or win.fine, rec, stepped):
            shift = 0.0
            if source == "raw":
                if not series:
                    continue
                cost = Cost(series, parse.total(counts, fam.read_names), win.window_s)
                promql = queries.usage_query(fam.metric, scope, win.window_s, objective_s)
            elif source == "range" and rec is not None:  # one series per pod, one sample per tile of range_s
                cost = Cost(pods, window_s=win.window_s, sample_s=rec.range_s)
                promql = recorded_query(rec, scope, win.window_s)
            elif stepped is not None:  # one series per pod, one sample per evaluation
                cost = Cost(pods, window_s=win.window_s, sample_s=stepped.interval_s)
                promql, shift = step_query(stepped, scope, win.window_s)
            jobs += [Job(fam.metric, promql, c, 0, shift_s=shift, cost=cost)
                     for c in chunks.chunks(f.start_s, f.end_s, f.step_s, cost.steps(step, p))]
    pods = max(parse.total(counts, (queries.FB_USED,)), 1)  # inventory series are about one per pod
    last = Chunk(win.coarse.end_s, win.coarse.end_s, win.coarse.step_s)
    for key, promql in inventory_queries(scope, win, with_ksm, p.node_labels, p.target_labels,
                                         p.cluster_labels).items():
        instant = "_over_time(" not in promql  # each selector's series and a result as large: 2 x selectors x pods
        spans = [fine] if fine is not None else coarse_chunks(win, p, pods * promql.count("{"), instant=instant)
        # GPU nodes as they are now: MIG devices an earlier layout had are gone
        jobs += [Job(key, promql, c, 0) for c in ([last] if key == GPU_NODES else spans)]
    return [replace(j, origin=i) for i, j in enumerate(jobs)]


def run_jobs(client: PromClient, jobs: list[Job], on_result: Callable[[Job, Result], None],
             progress: Progress, task: str = TASK) -> None:
    """Run the plan in a bounded pool; halve a query the server finds too large; stop at the first error.

    At most ``client.in_flight`` queries (``max_workers``, or the server's cores where fewer) are in flight and
    each answer is handed to ``on_result`` as soon as it is read, so no more than that many decoded answers exist
    at once (memory); once the pool is gone, the pages its threads freed go back to the system
    (``give_back_freed``).
    """
    progress.start(task, len(jobs))
    parts = {j.origin: 1 for j in jobs}
    waiting = deque(jobs)
    measured: dict[tuple[str, str, float, float], Measured] = {}
    with ThreadPoolExecutor(max_workers=client.in_flight, thread_name_prefix="promql") as pool:
        pending: dict[Future[Result], Job] = {}
        try:
            while waiting or pending:
                while waiting and len(pending) < client.in_flight:
                    job = waiting.popleft()
                    c = job.chunk
                    pending[pool.submit(client.query_range, job.promql, c.start_s + job.shift_s,
                                        c.end_s + job.shift_s, c.step_s)] = job
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    job = pending.pop(fut)
                    try:
                        result = fut.result()
                    except PrometheusLimitError:
                        halves = chunks.split(job.chunk) if job.depth < MAX_SPLITS else None
                        if halves is None:
                            raise
                        client.stats.count("splits")
                        parts[job.origin] += 1
                        waiting.extendleft(Job(job.key, job.promql, h, job.origin, job.depth + 1, job.shift_s)
                                           for h in reversed(halves))
                        continue
                    on_result(job, result)
                    if job.cost is not None:
                        seen = measured.setdefault(job.family, Measured())
                        seen.add(job.cost, job.chunk, client.settings, getattr(result, "peak_samples", None),
                                 sum(len(r.get("values") or ()) for r in result))
                        if _recut(waiting, job, seen.steps(job.cost, job.chunk.step_s, client.settings), parts,
                                  progress, task):
                            client.stats.count("recuts")
                    del result
                    parts[job.origin] -= 1
                    if parts[job.origin] == 0:
                        progress.advance(task)
        finally:
            for fut in pending:
                fut.cancel()
    give_back_freed()  # the pool's threads freed the answers into their own arenas: pages the main thread never reuses


def _recut(waiting: deque[Job], answered: Job, per: int, parts: dict[int, int], progress: Progress, task: str
           ) -> bool:
    """Cut the chunks of ``answered``'s family that are still waiting into chunks of ``per`` steps, where that
    changes them (True); halves of a refused query stay as they are. Progress counts the planned jobs: the new
    chunks take the old ones' places (the last of them any extra), and a place no chunk takes any more is done."""
    def ours(j: Job) -> bool:
        return j.depth == 0 and j.family == answered.family

    same = [j for j in waiting if ours(j)]
    fresh = chunks.recut([j.chunk for j in same], per)
    if fresh == [j.chunk for j in same]:
        return False
    origins = [j.origin for j in same]
    for o in origins:
        parts[o] -= 1
    new = [replace(same[0], chunk=c, origin=origins[min(i, len(origins) - 1)]) for i, c in enumerate(fresh)]
    for j in new:
        parts[j.origin] += 1
    done = {o for o in origins if parts[o] == 0}
    if done:
        progress.advance(task, len(done))
    kept = [j for j in waiting if not ours(j)]
    at = next(i for i, j in enumerate(waiting) if ours(j))
    waiting.clear()
    waiting.extend(kept[:at] + new + kept[at:])
    return True
