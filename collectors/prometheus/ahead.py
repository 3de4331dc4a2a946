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
from datetime import datetime, timedelta
from functools import partial

from collectors.prometheus import census
from collectors.prometheus.cachefile import cache_folder, file_for, fresh_start, peek, reading, writable
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
    firsts = {fresh_start(mark, (*reading(s), client.url, win.window_s, ksm), win.grid) for ksm in (True, False)}
    first = min((f for f in firsts if f is not None), default=None)
    if first is None:
        return None
    scope = Scope.of(s.namespaces, p)
    asks, span = census.since_asks(scope, win, p, Chunk(first, win.fine.end_s, win.grid.step_s))
    for ask in asks:
        params = range_params(ask.promql, ask.chunk.start_s, ask.chunk.end_s, ask.chunk.step_s)
        promised = client.promise("query_range", params)
        if ask.key == census.RULE_CENSUS:
            _start(_then_intervals, client, promised, params, span, scope)
        else:
            _start(_keep, promised, partial(client.send, "query_range", params))
    return client


def _then_intervals(client: PromClient, promised: Future[Result], params: dict[str, object], span: Chunk,
                    scope: Scope) -> None:
    """The recorded census, then the intervals' query its answer calls for, promised before the census is handed
    over (so the collection, woken by it, finds the intervals' promise)."""
    try:
        answer = client.send("query_range", params)
    except BaseException as exc:
        promised.set_exception(exc)
        return
    recorded: census.Recorded = {}
    census.add_recorded(recorded, answer)
    _, promql = census.interval_ask(recorded, span, scope)
    if promql is None:
        promised.set_result(answer)
        return
    query: dict[str, object] = {"query": promql, "time": span.end_s}
    intervals = client.promise("query", query)
    promised.set_result(answer)
    _keep(intervals, partial(client.send, "query", query))


def _keep(promised: Future[Result], send: Callable[[], Result]) -> None:
    try:
        promised.set_result(send())
    except BaseException as exc:  # raised to the collection, if it makes this request
        promised.set_exception(exc)


def _start(run: Callable[..., None], *args: object) -> None:
    threading.Thread(target=run, args=args, name="ahead", daemon=True).start()
