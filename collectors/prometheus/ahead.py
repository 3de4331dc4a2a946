"""A warm report's first requests, sent before the collector and pandas are imported: its cache's header
(:func:`cachefile.peek`) says from which step the collection will read, so the census of those steps and the
recorded series' intervals (``census``) can be asked while the rest of the program loads. Each is a promise on
the client the collection then uses (:meth:`PromClient.promise`): a request it makes that is the same as one
sent ahead takes that answer; any other is sent as it would have been. A wrong guess (a cache that turns out
unusable, a window that moved) costs the server a census, never a wrong answer."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import replace
from datetime import datetime, timedelta
from functools import partial

from collectors.prometheus import census
from collectors.prometheus.cachefile import cache_folder, collection_key, file_for, fresh_start, peek, writable
from collectors.prometheus.chunks import Chunk
from collectors.prometheus.client import PromClient, QueryStats, Result, range_params
from collectors.prometheus.queries import Scope
from collectors.prometheus.window import window_for
from recommender.core.settings import Settings


def census_ahead(s: Settings, end: datetime) -> PromClient | None:
    """A client that has sent the census a collection of the window ending at ``end`` would send first with the
    cache on disk, or None where that cache says nothing of it (none, another reading, a full read due)."""
    p = s.prometheus
    if not p.url or not p.cache:
        return None
    folder = cache_folder(p)
    mark = peek(file_for(folder, s)) if writable(folder) else None  # else the report reads uncached
    if mark is None:
        return None
    win = window_for(end - timedelta(seconds=s.history_s), end, p)
    client = PromClient(p, QueryStats())
    # the key holds whether kube-state-metrics gives the inventory, which the Kubernetes API decides later
    firsts = {fresh_start(mark, collection_key(s, client.url, win.window_s, ksm), win.grid) for ksm in (True, False)}
    first = min((f for f in firsts if f is not None), default=None)
    if first is None:
        return None
    scope = replace(Scope.of(s.namespaces, p), exporter=mark.exporter)
    asks, span = census.since_asks(scope, win, p, Chunk(first, win.fine.end_s, win.grid.step_s))
    rule_asks = [a for a in asks if a.key == census.RULE_CENSUS]
    intervals = _Intervals(client, span, scope, len(rule_asks))
    for ask in asks:
        params = range_params(ask.promql, ask.chunk.start_s, ask.chunk.end_s, ask.chunk.step_s)
        promised = client.promise("query_range", params)
        sent = partial(client.send, "query_range", params)
        _start(intervals.after if ask.key == census.RULE_CENSUS else _keep, promised, sent)
    return client


class _Intervals:
    """The intervals' query, once every recorded census answer is in: promised before the last of them is handed
    over, so the collection, which asks it once all have come, finds it promised."""

    def __init__(self, client: PromClient, span: Chunk, scope: Scope, answers: int) -> None:
        self.client, self.span, self.scope = client, span, scope
        self.left = answers
        self.recorded: census.Recorded = {}
        self.lock = threading.Lock()

    def after(self, promised: Future[Result], send: Callable[[], Result]) -> None:
        """Send one recorded census query; the last to answer promises (and then sends) the intervals' query."""
        try:
            answer = send()
        except BaseException as exc:  # no intervals' query: the collection stops on this error, or asks itself
            promised.set_exception(exc)
            return
        with self.lock:
            census.add_recorded(self.recorded, answer)
            self.left -= 1
            last = self.left == 0
        _, promql = census.interval_ask(self.recorded, self.span, self.scope) if last else (None, None)
        if promql is None:
            promised.set_result(answer)
            return
        query: dict[str, object] = {"query": promql, "time": self.span.end_s}
        intervals = self.client.promise("query", query)
        promised.set_result(answer)
        _keep(intervals, partial(self.client.send, "query", query))


def _keep(promised: Future[Result], send: Callable[[], Result]) -> None:
    try:
        promised.set_result(send())
    except BaseException as exc:  # raised to the collection, if it makes this request
        promised.set_exception(exc)


def _start(run: Callable[..., None], *args: object) -> None:
    threading.Thread(target=run, args=args, name="ahead", daemon=True).start()
