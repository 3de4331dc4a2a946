"""The edge that wires a source, the pure pipeline and a formatter together for the CLI."""

from __future__ import annotations

import sys
from contextlib import nullcontext
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from collectors.registry import SourceRequest, get_source
from recommender.core.errors import ConfigError
from recommender.core.settings import Settings
from recommender.core.usage import Snapshot

if TYPE_CHECKING:
    from collectors.prometheus.cache import UsageCache
    from collectors.prometheus.client import PromClient
    from recommender.cli.reportmemo import ReportMemo
    from recommender.controller.policy import LabelSelector
    from recommender.pipeline.memostore import DiskMemo

POLICY = "gpu-rightsize"  # the report's sizing policy (run_once's default)


class RichProgress:
    """Progress on stderr: bars on a terminal, one line per finished task otherwise (CI logs).

    ``quiet`` holds lines not to log again (the last controller cycle's ``said``), so a note that holds every
    cycle (no replica counts, no Kubernetes API) is logged when it starts to hold, not every interval.
    """

    def __init__(self, console: Console | None = None, quiet: frozenset[str] = frozenset()) -> None:
        self.console = console or Console(stderr=True)
        self.quiet = quiet
        self.said: set[str] = set()  # every line this run was asked to log, shown or not
        self.live = self.console.is_terminal
        self._bars = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                              TimeElapsedColumn(), console=self.console, transient=True)
        self._tasks: dict[str, TaskID] = {}
        self._totals: dict[str, tuple[int, int]] = {}

    def __enter__(self) -> RichProgress:
        if self.live:
            self._bars.start()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        if self.live:
            self._bars.stop()

    def start(self, task: str, total: int) -> None:
        self._totals[task] = (0, total)
        if self.live:
            self._tasks[task] = self._bars.add_task(task, total=total)
        else:
            self.console.print(f"{task}: 0/{total}", highlight=False)

    def advance(self, task: str, n: int = 1) -> None:
        done, total = self._totals.get(task, (0, 0))
        self._totals[task] = (done + n, total)
        if self.live and task in self._tasks:
            self._bars.advance(self._tasks[task], n)
        elif not self.live and done + n == total:
            self.console.print(f"{task}: {total}/{total} done", highlight=False)

    def log(self, message: str) -> None:
        self.said.add(message)
        if message not in self.quiet:
            self.console.print(message, highlight=False, soft_wrap=True)


def collect(source: str, path: str | None, settings: Settings, end: datetime, cache: UsageCache | None = None,
            progress: RichProgress | None = None, client: PromClient | None = None) -> Snapshot:
    """One snapshot from a source; ``cache`` (a loop's) lets the Prometheus source read only new steps, with
    ``client`` where one was made before (``collectors.prometheus.ahead``)."""
    with nullcontext(progress) if progress is not None else RichProgress() as shown:
        return get_source(source)(SourceRequest(settings, end, path, cache, client), shown)


def collect_once(source: str, path: str | None, settings: Settings, end: datetime,
                 client: PromClient | None = None) -> Snapshot:
    """One snapshot for a report or ``snapshot``: from Prometheus with the cache of earlier ones on disk (unless
    ``prometheus.cache`` is off), so only the steps added since are read; a cache folder or file that cannot be
    used gives one warning line and a collection that reads everything. ``client``: Prometheus' where one was made
    before (``collectors.prometheus.ahead``)."""
    return _collect_cached(source, path, settings, end, client=client)[0]


@dataclass(frozen=True)
class _LazyMemo:
    """Where the pipeline's memo lies: its module (and the analysis it imports) only for a report that runs."""

    path: Path
    quiet: bool

    def load(self) -> tuple[DiskMemo, str | None]:
        from recommender.pipeline.memostore import DiskMemo

        memo = DiskMemo(self.path, quiet=self.quiet)
        return memo, memo.load()


def _collect_cached(source: str, path: str | None, settings: Settings, end: datetime, with_memo: bool = False,
                    client: PromClient | None = None) -> tuple[Snapshot, _LazyMemo | None, ReportMemo | None]:
    """:func:`collect_once`, and (``with_memo``) the pipeline's memo (where it lies: made and read on a report
    memo's miss) and the report memo beside the cache file (``recommender.pipeline.memostore``,
    ``recommender.cli.reportmemo``): None where the cache is off or its folder cannot be used. The cache folder
    gives a report one warning line at most: the memos say nothing where the cache file warned."""
    p = settings.prometheus
    if source != "prometheus" or not p.cache:
        return collect(source, path, settings, end), None, None
    from collectors.prometheus.cachefile import cache_folder
    from collectors.prometheus.store import CacheFileError, DiskCache
    from recommender.cli.reportmemo import ReportMemo

    disk = DiskCache(cache_folder(p), settings)
    with RichProgress() as shown:
        cache, warning = disk.load()
        if warning:
            shown.log(f"warning: {warning}")
        try:
            snap = collect(source, path, settings, end, cache, shown, client)
        except CacheFileError as exc:  # its frames, decoded while the queries ran, could not be read after all
            cache, warning = disk.discard(exc)
            shown.log(f"warning: {warning}")
            snap = collect(source, path, settings, end, cache, shown)
        failed = disk.save(cache)
        if failed and not warning:
            shown.log(f"warning: {failed}")
    quiet = bool(warning or failed)
    if disk.broken or not with_memo:
        return snap, None, None
    whole = ReportMemo(disk.path.with_suffix(".report"), settings, quiet=quiet)
    return snap, _LazyMemo(disk.path.with_suffix(".memo"), quiet), whole


def make_report(source: str, path: str | None, settings: Settings, end: datetime, fmt: str) -> str:
    """Collect, plan and render one report; the plan's clock is the window's end for reproducibility."""
    return make_report_files(source, path, settings, end, fmt)[0]


def make_report_files(source: str, path: str | None, settings: Settings, end: datetime, fmt: str
                      ) -> tuple[str, dict[str, str]]:
    """The report and the files its format writes beside it when it goes to a file (suffix -> text)."""
    return make_reports(source, path, settings, end, (fmt,))[fmt]


def make_reports(source: str, path: str | None, settings: Settings, end: datetime, fmts: tuple[str, ...],
                 selector: LabelSelector | None = None, client: PromClient | None = None
                 ) -> dict[str, tuple[str, dict[str, str]]]:
    """Several formats of one plan (collected and planned once): format -> (report, files beside it);
    ``selector`` keeps the workloads whose labels match (``-l``); ``client``: Prometheus' where one was made
    before (``collectors.prometheus.ahead``)."""
    from recommender.cli.reportmemo import FORMATS, report_key
    from recommender.outputs import PLAN_ONLY, get_companions, get_formatter

    # an unknown format fails before the run (those a report memo keeps are built in: looked up on a miss only)
    renderers = None if set(fmts) <= FORMATS else {f: (get_formatter(f), get_companions(f)) for f in fmts}
    snap, lazy, whole = _collect_cached(source, path, settings, end, with_memo=True, client=client)
    if selector is not None:
        from recommender.cli.selector import select_labels  # the selector's parser (and apscheduler) only for -l

        found, snap = len(snap.workloads), select_labels(snap, selector)
        if found and not snap.workloads:
            raise ConfigError(f"none of the {found} workloads found has labels that -l matches")
    key = report_key(snap, settings, POLICY) if whole is not None and renderers is None else None
    if whole is not None and key is not None:
        kept, warning = whole.found(key, fmts)
        if warning:
            RichProgress().log(f"warning: {warning}")
        if kept is not None:  # the same inputs as the report that rendered it: no pipeline, no rendering
            return kept
    from recommender.pipeline.run import run_cycle

    if renderers is None:
        renderers = {f: (get_formatter(f), get_companions(f)) for f in fmts}
    memo, unused = lazy.load() if lazy is not None else (None, None)
    if unused:
        RichProgress().log(f"warning: {unused}")
    plan_only = set(fmts) <= PLAN_ONLY  # the usage frames are not read after the plan: handed to it (release)
    cycled = run_cycle(snap, settings, snap.end, policy=POLICY, memo=memo,
                       release=plan_only and isinstance(snap.usage, dict), fork=True)
    plan, snap = cycled.plan, cycled.snapshot  # the formats draw the series as the plan read them
    if plan_only:  # gone before the memo is written and rendering
        snap = replace(snap, usage={})
    if memo is not None and (failed := memo.save()):
        RichProgress().log(f"warning: {failed}")
    rendered = {f: (render(plan, snap), companions(plan) if companions else {})
                for f, (render, companions) in renderers.items()}
    if whole is not None and key is not None and (failed := whole.keep(key, rendered)):
        RichProgress().log(f"warning: {failed}")
    return rendered


def save_snapshot(source: str, path: str | None, settings: Settings, end: datetime, out: Path,
                  client: PromClient | None = None) -> None:
    from collectors.files import write_snapshot
    from recommender.core.writes import replace_dir

    snap = collect_once(source, path, settings, end, client)
    replace_dir(out, lambda folder: write_snapshot(snap, folder))  # the previous snapshot stays whole on failure


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use the rightsizer command")
