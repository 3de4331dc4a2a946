"""Where a collection's wall time goes, on raw series and on recording rules: the census, the rule plan, the
usage and inventory queries (server and transfer time, and our decoding, per kind of query), and what follows.

Runs ``collect_pod_usage`` in this process (no pipeline, no report) against a TSDB kept by ``scale.py --rules
--keep``, once with ``recording_rules`` off and once on, and prints one line per phase and per kind of query.
Queries run ``--workers`` at a time as in a report, so per-kind seconds are summed over concurrent queries
(they add up to more than the wall time).

    nice -n 10 python benchmarks/collect_phases.py --reuse /tmp/rules2-bench/tsdb-1000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from scale_tsdb import PARAMS_FILE  # noqa: E402

from tests.promfixture import PromServer, require_prometheus  # noqa: E402


def kind_of(promql: str, raw: set[str]) -> str:
    """A query's kind: census, rule census, step or range series reads, raw usage (one of ``raw``), inventory."""
    if promql.startswith("count by (__name__)"):
        return "rule census" if "namespace_pod:" in promql else "census"
    if ":step" in promql and "offset 1ms" in promql:
        return "step series"
    if "namespace_pod:" in promql and "s:" in promql:
        return "range series"
    return "raw usage" if promql in raw else "inventory"


@contextmanager
def timed(totals: dict[str, float], name: str) -> Iterator[None]:
    t0 = time.perf_counter()
    try:
        yield
    finally:
        totals[name] = totals.get(name, 0.0) + time.perf_counter() - t0


def collect(url: str, days: float, end_s: int, rules: bool, workers: int | None) -> dict[str, Any]:
    """One collection: wall, phase and per-kind figures."""
    from collectors.prometheus import PromClient, QueryStats
    from collectors.prometheus import collect as collect_mod
    from collectors.prometheus.client import _RANGE_ANSWER, Answer, decode_points  # the client's own decoding
    from collectors.prometheus.queries import FAMILIES, Scope, usage_query
    from collectors.prometheus.window import window_for
    from recommender.core.progress import NullProgress
    from recommender.core.settings import Settings
    from recommender.core.settings_sources import PrometheusSettings

    prom = {"url": url, "recording_rules": rules} | ({"max_workers": workers} if workers else {})
    s = Settings(history_s=days * 86_400, prometheus=PrometheusSettings(**prom))
    per: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    end = datetime.fromtimestamp(end_s, UTC)
    window_s = window_for(end - timedelta(days=days), end, s.prometheus).window_s
    scope = Scope.of(s.namespaces, s.prometheus)
    raw = {usage_query(f.metric, scope, window_s, s.scaling.ttft_objective_s) for f in FAMILIES}

    class Timed(PromClient):
        """The client's range query with its HTTP exchange and its decoding timed apart; its series listing (the
        census) timed whole."""

        def _get_series(self, params: dict[str, Any]) -> Any:
            k = per["series listing"]
            t0 = time.perf_counter()
            try:
                out = super()._get_series(params)
            finally:
                k["queries"] += 1
                k["http_s"] += time.perf_counter() - t0
            return out

        def _range(self, params: dict[str, Any]) -> Any:
            k = per[kind_of(str(params["query"]), raw)]
            t0 = time.perf_counter()
            r = self._session.get(f"{self.url}/api/v1/query_range", params=params, timeout=self.settings.timeout_s)
            t1 = time.perf_counter()
            data = _RANGE_ANSWER.decode(r.content)["data"]
            samples = data.get("stats", {}).get("samples", {})
            self.stats.loaded(samples.get("totalQueryableSamples", 0), samples.get("peakSamples", 0))
            result = data["result"]
            points = iter(decode_points([item["values"] for item in result if "values" in item]))
            out = Answer({"metric": item["metric"], "values": next(points)} if "values" in item else
                         {"metric": item["metric"]} for item in result)
            out.peak_samples = samples.get("peakSamples")  # as the client's: later chunks are cut from it
            t2 = time.perf_counter()
            k["queries"] += 1
            k["http_s"] += t1 - t0
            k["decode_s"] += t2 - t1
            k["samples"] += samples.get("totalQueryableSamples", 0)
            k["points"] += sum(len(x.get("values") or ()) for x in out)
            k["mib"] += len(r.content) / 2**20
            return out

    client = Timed(s.prometheus, QueryStats())
    phases: dict[str, float] = {}

    def wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def inner(*a: Any, **kw: Any) -> Any:  # run_jobs: named by its task (the census: "counting series")
            with timed(phases, (a[4] if len(a) > 4 else "usage and inventory queries") if name == "run_jobs" else name):
                return fn(*a, **kw)
        return inner

    saved = {n: getattr(collect_mod, n) for n in ("_census", "_rule_plan", "run_jobs")}
    collect_mod._census = wrap("census (both)", saved["_census"])
    collect_mod._rule_plan = wrap("rule plan (interval query)", saved["_rule_plan"])
    collect_mod.run_jobs = wrap("run_jobs", saved["run_jobs"])
    try:
        t0 = time.perf_counter()
        collect_mod.collect_pod_usage(s, end - timedelta(days=days), end, NullProgress(), client=client)
        wall = time.perf_counter() - t0
        phases["after the queries (frames, devices, owners)"] = wall - sum(phases.values()) + \
            phases.get("counting series", 0.0)  # the census' pool is inside its own phase
    finally:
        for n, fn in saved.items():
            setattr(collect_mod, n, fn)
    return {"wall_s": wall, "phases": phases, "kinds": {k: dict(v) for k, v in per.items()},
            "line": client.stats.line(), "sources": client.stats.sources}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reuse", type=Path, required=True, help="a TSDB kept by scale.py --rules --keep")
    ap.add_argument("--workers", type=int, help="queries in flight (default: the settings' max_workers)")
    ap.add_argument("--modes", default="raw,rules", help="raw, rules or both (comma-separated), in this order")
    args = ap.parse_args()
    require_prometheus()
    params = json.loads((args.reuse / PARAMS_FILE).read_text())
    if params.get("rules_from") is None:
        raise SystemExit(f"{args.reuse} holds no recorded series: build it with scale.py --rules --keep")
    with PromServer.from_tsdb(args.reuse) as prom:
        for mode in args.modes.split(","):
            load = os.getloadavg()[0]
            got = collect(prom.url, params["days"], int(params["end_s"]), mode == "rules", args.workers)
            print(f"{mode}: collect_wall_s={got['wall_s']:.1f} load={load:.1f}..{os.getloadavg()[0]:.1f} "
                  + " ".join(f"[{k}]={v:.1f}s" for k, v in got["phases"].items()), flush=True)
            for kind, f in sorted(got["kinds"].items()):
                n = defaultdict(float, f)  # a listing has no decode, samples or points of its own
                print(f"  {kind}: queries={n['queries']:.0f} http_s={n['http_s']:.1f} decode_s={n['decode_s']:.1f} "
                      f"samples={n['samples']:,.0f} points={n['points']:,.0f} answer_mib={n['mib']:.1f}")
            print(f"  {got['line']}")


if __name__ == "__main__":
    main()
