"""Scale benchmark: a synthetic fleet of GPU workloads backfilled into a real Prometheus, then
``rightsizer report`` end to end against it, as a subprocess (the real CLI).

    python benchmarks/scale.py                                  # 2,000 workloads x 14 days at 60 s (the target)
    python benchmarks/scale.py --workloads 200 --days 2         # a quick run
    python benchmarks/scale.py --keep /tmp/scale-tsdb           # keep the TSDB for later runs ...
    python benchmarks/scale.py --reuse /tmp/scale-tsdb          # ... and serve it again without a rebuild
    python benchmarks/scale.py --reuse /tmp/scale-tsdb --per-workload  # ... beside a one-query-per-workload tool
    python benchmarks/scale.py --reuse /tmp/scale-tsdb --snapshot  # ... and a snapshot saved, then reported on

Prints the TSDB build time (separately), then the report's wall time, peak RSS, number of queries and
the largest query (points per query and per series). Target on the 2-core machine: <= 60 s and
<= 1 GiB peak RSS for the report. Then two cycles of the controller's collection 300 s apart, the second
with the first's cache (``--no-cycles`` skips them): what a cycle costs Prometheus once the controller runs.
The report runs twice with one ``--cache-dir``: cold (an empty cache) and warm (the same window again, so it
reads only the last two steps from Prometheus): both wall times and their ratio (``--no-warm`` skips the second).
``--pairs N`` runs N such cold and warm pairs, each with an empty cache, one after the other: the warm goal is then
the ratio of the median cold wall to the median warm wall (so that one cold report's spread does not decide it);
the other figures are the first pair's.
``--moved N`` runs the cold and warm reports N report steps before the TSDB's end, then a third report at its end
with the same cache: a warm report whose window moved (new steps: most workloads' derived results recomputed).
``--rules`` also writes the recorded series of ``deploy/monitoring/recording-rules.yaml`` (the 2 min range series
and the 10 min step series; for the whole window, or from ``--rules FROM`` x the history on) and adds two cold
reports, on raw series only and on the rules (the cold and warm reports above run with the default settings, so
they read the rules too): both wall times, the samples Prometheus loaded for each (its own query stats,
``stats=all``, summed over the range queries), the client's CPU seconds, and the ratios rules/raw (goals: samples
<= 1/5, wall <= 1/3).
Needs Debian's ``prometheus`` and ``promtool``.

Against issue 42's goals, per report: client peak RSS, Prometheus CPU seconds (``/proc/<pid>/stat`` before and
after), Prometheus RSS before and its peak during the report (``VmRSS`` sampled every 50 ms; its mapped files,
``RssFile``, and anonymous memory, ``RssAnon``, beside it; its Go heap in use from its ``/metrics``), samples touched
(Prometheus' own ``stats=all``: ``totalQueryableSamples`` of the same queries replayed) and the server's floor:
the report's queries (``$RIGHTSIZER_QUERY_LOG``) replayed from a bare HTTP client with the same concurrency,
the answers read and not decoded. Then each goal as a ratio measured in the same run, met or not.
The checkout's modules are compiled to bytecode first, as ``pip install`` does (``--no-bytecode`` skips it).
``--step`` above 60 s writes a settings file with ``prometheus.min_step_s`` at the scrape interval (and, above
150 s, serves with ``--query.lookback-delta`` at twice the scrape interval, as such a server needs), so a large
fleet can keep the report's grid (2,016 steps over 14 d) with fewer samples on disk.

``--churn N`` replaces (renames) every pod at every N-th block range of 54 h, as rollouts would, so the census
counts more series over the window than a query over a few hours selects.

``--snapshot`` also saves the window with ``rightsizer snapshot`` and runs ``report --snapshot`` on it (no
Prometheus): wall, CPU and peak RSS of each, the snapshot's size, and whether its summary is the cold report's.

Series per workload: DCGM FB_USED, FB_FREE, GR_ENGINE_ACTIVE (every pod) and, for every second
workload (vLLM), kv_cache_usage_perc, num_requests_waiting, num_requests_running,
request_success_total (a counter of the same daily cycle; the collector's request rate reads it with both
gauges), plus a sparse cache_config_info. Values follow a daily sine with noise, so percentiles are not
trivial. Pod names follow the Deployment convention (``svc-0001-7d9f8b6c5d-x2k4p``) and there is no
kube-state-metrics, so owners are inferred from the names.

The TSDB is cut by time, not by series: one ``promtool`` run per 54 h window (the largest block a
Prometheus with 60 d retention compacts to), each holding every series of the fleet. Blocks therefore
never overlap and the server has nothing to compact while the report runs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scale_tsdb import PARAMS_FILE, build_tsdb, check_blocks, per_workload_queries, stored_end  # noqa: E402

from tests.promfixture import PromServer, require_prometheus  # noqa: E402

TARGET_WALL_S, TARGET_RSS_MIB = 60.0, 1024.0
GOAL_WARM_X, GOAL_FLOOR_X, GOAL_PROM_RSS_X, GOAL_CLIENT_MIB = 20.0, 1.3, 1.1, 1024.0  # issue 42
QUERY_LOG_ENV = "RIGHTSIZER_QUERY_LOG"  # collectors/prometheus/client.py appends each query to it
STATS_LINE = re.compile(
    r"prometheus: (?P<queries>[\d,]+) queries \((?P<retried>[\d,]+) retried, (?P<split>[\d,]+) split"
    r"(?:, (?P<recut>[\d,]+) re-cut)?\), "
    r"(?P<series>[\d,]+) series, (?P<points>[\d,]+) points; largest answer (?P<max_points_per_query>[\d,]+) "
    r"points, (?P<max_points_per_series>[\d,]+) per series"
    r"(?:; (?P<samples_loaded>[\d,]+) samples loaded, at most (?P<peak_samples>[\d,]+) held by one query)?"
)


PACKAGES = ("recommender", "collectors", "policies")  # this checkout's code (pyproject's packages)


def compile_checkout() -> bool:
    """Compile this checkout's modules to bytecode in their ``__pycache__`` (git ignores them), as ``pip install``
    does for an installed package: a source checkout under ``PYTHONDONTWRITEBYTECODE=1`` (as here) otherwise
    compiles every module it imports from source in each report (~0.1 s of a warm report's CPU). Stale bytecode
    is never read (Python checks each file's size and time). Whether every module compiled."""
    import compileall

    return all(compileall.compile_dir(REPO / pkg, quiet=1) for pkg in PACKAGES)


def _cli() -> list[str]:
    """The installed ``rightsizer`` console script next to this interpreter, else the same entry point."""
    script = Path(sys.executable).with_name("rightsizer")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-c", "import sys; from recommender.cli.main import main; sys.exit(main())"]


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _hwm_mib(pid: int) -> float:
    hit = re.search(r"VmHWM:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    return int(hit.group(1)) / 1024 if hit else float("nan")


def _rss_mib(pid: int) -> dict[str, float]:
    """The process' resident memory, MiB: all of it (``rss``), its anonymous part (``anon``: heap and stacks,
    what only the OOM killer can take back) and its file part (``file``: mostly the TSDB's memory-mapped blocks,
    page cache the kernel reclaims under pressure)."""
    status = Path(f"/proc/{pid}/status").read_text()
    got = {}
    for key, field in (("rss", "VmRSS"), ("anon", "RssAnon"), ("file", "RssFile")):
        hit = re.search(rf"{field}:\s+(\d+) kB", status)
        got[key] = int(hit.group(1)) / 1024 if hit else float("nan")
    return got


def _heap_mib(url: str) -> float | None:
    """The server's Go heap in use, MiB, from its own ``/metrics`` (``go_memstats_heap_inuse_bytes``); None where
    it does not say."""
    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=2) as r:
            body = r.read().decode()
    except OSError:
        return None
    hit = re.search(r"^go_memstats_heap_inuse_bytes (\S+)$", body, re.MULTILINE)
    return float(hit.group(1)) / 2**20 if hit else None


@contextmanager
def rss_peak(pid: int | None, every_s: float = 0.05, url: str | None = None, heap_every_s: float = 0.25
             ) -> Iterator[dict[str, float]]:
    """The server's RSS before (MiB, ``before``) and its highest sample while the block runs (``peak``); the same
    for its anonymous memory (``anon_before``, ``anon_peak``) and its mapped files (``file_before``,
    ``file_peak``); with ``url``, its Go heap in use (``heap_before``, ``heap_peak``, every ``heap_every_s``)."""
    fig: dict[str, float] = {}
    if not pid:
        yield fig
        return
    now = _rss_mib(pid)
    for key, name in (("rss", ""), ("anon", "anon_"), ("file", "file_")):
        fig[f"{name}before"] = fig[f"{name}peak"] = now[key]
    heap = _heap_mib(url) if url else None
    if heap is not None:
        fig["heap_before"] = fig["heap_peak"] = heap
    stop = threading.Event()

    def take() -> None:
        now = _rss_mib(pid)
        for key, name in (("rss", ""), ("anon", "anon_"), ("file", "file_")):
            fig[f"{name}peak"] = max(fig[f"{name}peak"], now[key])

    def sample() -> None:
        last = time.monotonic()
        while not stop.wait(every_s):
            take()
            if heap is not None and time.monotonic() - last >= heap_every_s:
                last = time.monotonic()
                fig["heap_peak"] = max(fig["heap_peak"], _heap_mib(url) or 0.0)  # type: ignore[arg-type]

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield fig
    finally:
        stop.set()
        thread.join()
        take()


def replay(url: str, queries: list[dict[str, Any]], workers: int, stats: bool = False
           ) -> tuple[float, int | None]:
    """The report's queries sent again from a bare HTTP client, ``workers`` at a time as the report sends them
    (each asking the encoding the report asked: uncompressed, or gzip as ``requests`` asks; answers read, not
    decoded): wall seconds, and with ``stats`` the samples Prometheus says they touched (``totalQueryableSamples``;
    None where the server does not say)."""
    touched: list[int | None] = []

    def one(q: dict[str, Any]) -> None:
        params = {k: str(v) for k, v in q["params"].items()} | ({"stats": "all"} if stats else {})
        plain = stats or q.get("encoding") == "identity"
        req = urllib.request.Request(f"{url}/api/v1/{q['endpoint']}?{urllib.parse.urlencode(params)}",
                                     headers={"Accept-Encoding": "identity" if plain else "gzip, deflate"})
        with urllib.request.urlopen(req, timeout=600) as r:
            body = r.read()
        if stats:
            data = json.loads(body).get("data", {})
            if isinstance(data, list):  # a series lookup (the census): the index only, no sample touched
                touched.append(0)
                return
            touched.append(data.get("stats", {}).get("samples", {}).get("totalQueryableSamples"))

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(one, queries))
    wall = time.perf_counter() - t0
    return wall, (sum(t for t in touched if t is not None) if touched and None not in touched else None)


def server_memory(rss: dict[str, float]) -> dict[str, float]:
    """:func:`rss_peak`'s figures under the names the benchmark prints (MiB): RSS, anonymous memory, mapped files
    and, where the server said it, Go heap in use, each before and at its peak."""
    fig = {"prometheus_rss_before_mib": rss["before"], "prometheus_peak_rss_mib": rss["peak"]}
    for part in ("anon", "file", "heap"):
        if f"{part}_peak" in rss:
            fig[f"prometheus_{part}_before_mib"] = rss[f"{part}_before"]
            fig[f"prometheus_{part}_peak_mib"] = rss[f"{part}_peak"]
    return fig


def run_report(url: str, days: float, end_s: int, server_pid: int | None, extra: list[str],
               save: Path | None = None) -> dict[str, Any]:
    """Run ``rightsizer report`` as a child: wall time around it, its own rusage (os.wait4), the server's CPU
    and RSS, its figures; ``queries`` lists what it asked Prometheus (for :func:`replay`)."""
    with tempfile.TemporaryDirectory(prefix="scale-report-") as tmp:
        out, log = Path(tmp) / "report.json", Path(tmp) / "queries.jsonl"
        args = ["report", "--prometheus-url", url, "--no-kubernetes", "--history", f"{days:g}d", "--end", str(end_s),
                "-o", "json", "--output-file", str(out), *extra]
        server_cpu0, load_before = _cpu_s(server_pid) if server_pid else 0.0, os.getloadavg()[0]
        with rss_peak(server_pid, url=url) as server_rss:  # rich wraps at 80 columns off a terminal
            child, stderr = run_cli(args, {"COLUMNS": "1000", QUERY_LOG_ENV: str(log)})
        fig: dict[str, Any] = child | {"load_before": load_before,
                                       "load_after": os.getloadavg()[0]}  # the machine's 1-min load average
        if server_pid:
            fig["prometheus_cpu_s"] = _cpu_s(server_pid) - server_cpu0
            fig |= server_memory(server_rss)
            fig["prometheus_rss_hwm_mib"] = _hwm_mib(server_pid)
        fig["queries_sent"] = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        hit = STATS_LINE.search(" ".join(stderr.split()))
        if hit is None:
            print(f"warning: no query statistics line in the report's stderr:\n{stderr[-2000:]}", file=sys.stderr)
        else:
            fig |= {k: int(v.replace(",", "")) for k, v in hit.groupdict().items() if v is not None}
        doc = json.loads(out.read_text())
        if save:
            shutil.copyfile(out, save)
        s = doc["summary"]
        fig |= {"workloads": s["workloads"], "with_recommendation": s["with_recommendation"],
                "gpus_held": s["gpus_held"], "gpus_needed": s["gpus_needed"],
                "gpus_needed_packed": s["gpus_needed_packed"], "warnings": len(doc.get("warnings", ())),
                "report_kib": out.stat().st_size / 1024}
    return fig


def run_cli(args: list[str], env: dict[str, str] | None = None) -> tuple[dict[str, Any], str]:
    """One ``rightsizer`` command as a child (``env`` added to ours): wall time around it, its CPU and peak RSS
    (os.wait4), and its stderr; a command that fails ends the benchmark with its stderr's last lines."""
    env = {**os.environ, **(env or {}),  # this checkout's code, not the one an editable install of the script points at
           "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen([*_cli(), *args], cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        tail = "\n".join(stderr.strip().splitlines()[-15:])
        print(f"rightsizer {args[0]} failed with exit status {code}:\n{tail}", file=sys.stderr)
        raise SystemExit(code or 1)
    return {"wall_s": wall, "peak_rss_mib": usage.ru_maxrss / 1024, "cpu_s": usage.ru_utime + usage.ru_stime}, stderr


def run_snapshot(url: str, days: float, end_s: int, extra: list[str], cold: dict[str, Any]) -> str:
    """Save the report's window with ``rightsizer snapshot``, then report on it from the file: one line of figures."""
    with tempfile.TemporaryDirectory(prefix="scale-snapshot-") as tmp:
        snap, out = Path(tmp) / "snapshot", Path(tmp) / "report.json"
        saved, _ = run_cli(["snapshot", "--prometheus-url", url, "--no-kubernetes", "--history", f"{days:g}d",
                         "--end", str(end_s), "--no-cache", "--output-dir", str(snap), *extra])
        size = sum(f.stat().st_size for f in snap.iterdir()) / 2**20
        read, _ = run_cli(["report", "--snapshot", str(snap), "--no-cache", "-o", "json", "--output-file", str(out),
                        *_settings_only(extra)])
        summary = json.loads(out.read_text())["summary"]
    same = all(summary[k] == cold[k] for k in ("workloads", "with_recommendation", "gpus_held", "gpus_needed"))
    return (f"snapshot: write_wall_s={saved['wall_s']:.1f} write_cpu_s={saved['cpu_s']:.1f} "
            f"write_peak_rss_mib={saved['peak_rss_mib']:.0f} size_mib={size:.1f} "
            f"report_wall_s={read['wall_s']:.1f} report_cpu_s={read['cpu_s']:.1f} "
            f"report_peak_rss_mib={read['peak_rss_mib']:.0f} same_summary_as_cold={same}")


def _settings_only(extra: list[str]) -> list[str]:
    """The ``--settings FILE`` pairs of the report's extra arguments (``--workers`` is for Prometheus only)."""
    return [a for i, a in enumerate(extra) if a == "--settings" or (i and extra[i - 1] == "--settings")]


def run_cycles(url: str, days: float, end_s: int, server_pid: int | None, interval_s: int = 300) -> dict[str, Any]:
    """Two cycles of the controller's collection ``interval_s`` apart, the second with the first's cache (it
    reads only the steps added since): wall time, Prometheus CPU and points of each. In this process, without
    kube-state-metrics queries (the controller has the Kubernetes API)."""
    from collectors.prometheus import PromClient, QueryStats, collect_pod_usage
    from collectors.prometheus.cache import UsageCache
    from recommender.core.progress import NullProgress
    from recommender.core.settings import Settings
    from recommender.core.settings_sources import PrometheusSettings

    settings = Settings(history_s=days * 86_400, prometheus=PrometheusSettings(url=url))
    cache, fig = UsageCache(), {}
    for name, end in (("first", end_s - interval_s), ("next", end_s)):
        client = PromClient(settings.prometheus, QueryStats())
        cpu0, t0 = _cpu_s(server_pid) if server_pid else 0.0, time.perf_counter()
        until = datetime.fromtimestamp(end, UTC)
        collect_pod_usage(settings, until - timedelta(days=days), until, NullProgress(), with_ksm=False,
                          client=client, cache=cache)
        fig[f"cycle_{name}_s"] = time.perf_counter() - t0
        if server_pid:
            fig[f"cycle_{name}_prometheus_cpu_s"] = _cpu_s(server_pid) - cpu0
        fig[f"cycle_{name}_points"] = client.stats.points
    return fig


def run_rules(url: str, days: float, end_s: int, server_pid: int | None, extra: list[str], tmp: Path
              ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Cold reports on raw series only and on recording rules, each with its own empty cache."""
    raw_only = tmp / "raw-only.yaml"
    raw_only.write_text("prometheus:\n  recording_rules: false\n")
    out = []
    for name, settings in (("raw", ["--settings", str(raw_only)]), ("rules", [])):
        with tempfile.TemporaryDirectory(prefix=f"scale-{name}-") as cache_dir:
            out.append(run_report(url, days, end_s, server_pid, [*extra, *settings, "--cache-dir", cache_dir]))
    return out[0], out[1]


def run_per_workload(data: Path, extra_args: list[str], queries: list[dict[str, Any]], workers: int
                     ) -> dict[str, Any]:
    """A one-query-per-workload tool's queries (``scale_tsdb.per_workload_queries``) against a fresh server over
    the same blocks, ``workers`` at a time from the bare client: wall, the server's CPU, its RSS before and peak
    (files, anonymous, Go heap), so the report's server memory has its reference measured on the same fleet."""
    with PromServer.from_tsdb(data, extra_args=extra_args) as prom:
        for q in queries[:7]:  # the first workload's: each must find its series, or the figures mean nothing
            with urllib.request.urlopen(f"{prom.url}/api/v1/query?{urllib.parse.urlencode(q['params'])}",
                                        timeout=600) as r:
                if not json.loads(r.read())["data"]["result"]:
                    raise SystemExit(f"one-query-per-workload baseline: no series for {q['params']['query']}")
        cpu0, load = _cpu_s(prom.pid or 0), os.getloadavg()[0]
        with rss_peak(prom.pid, url=prom.url) as rss:
            wall, _ = replay(prom.url, queries, workers)
        fig: dict[str, Any] = {"wall_s": wall, "prometheus_cpu_s": _cpu_s(prom.pid or 0) - cpu0,
                               "queries": len(queries), "workers": workers, "load_before": load,
                               "load_after": os.getloadavg()[0]}
    return fig | server_memory(rss)


def per_workload_lines(cold: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    """The baseline's figures, and the report's server memory against it (the issue's reference for the budget)."""
    keys = ("wall_s", "prometheus_cpu_s", "queries", "workers", "prometheus_rss_before_mib",
            "prometheus_peak_rss_mib", "prometheus_anon_peak_mib", "prometheus_file_peak_mib",
            "prometheus_heap_peak_mib", "load_before", "load_after")
    lines = ["one query per workload and metric (KRR's way), fresh server, same blocks: "
             + " ".join(f"{k}={_fmt(theirs.get(k))}" for k in keys)]
    for what, key in (("RSS", "prometheus_peak_rss_mib"), ("anonymous memory", "prometheus_anon_peak_mib")):
        ours, base = cold.get(key), theirs.get(key)
        lines.append(goal(f"Prometheus peak {what} during the report <= a one-query-per-workload tool's",
                          ours / base if ours and base else None, 1.0,
                          how=f" (ours {ours or 0:.0f} MiB, theirs {base or 0:.0f} MiB)"))
    lines.append(f"Prometheus CPU and wall against it: ours {_fmt(cold.get('prometheus_cpu_s'))} s / "
                 f"{_fmt(cold.get('wall_s'))} s, theirs {_fmt(theirs.get('prometheus_cpu_s'))} s / "
                 f"{_fmt(theirs.get('wall_s'))} s")
    return lines


def _fmt(v: object) -> str:
    return f"{v:.1f}" if isinstance(v, float) else str(v)


def budget_mib(workers: int) -> float:
    """The Prometheus memory the default settings allow the report's queries in flight (``query_memory_mib`` each)."""
    from recommender.core.settings_sources import PrometheusSettings

    return float(PrometheusSettings().query_memory_mib) * workers


def goal(name: str, measured: float | None, limit: float, at_most: bool = True, how: str = "") -> str:
    if measured is None:
        return f"goal {name}: not measured{how}"
    met = measured <= limit if at_most else measured >= limit
    return f"goal {name}: {measured:.2f} {'<=' if at_most else '>='} {limit:g}? {'met' if met else 'NOT met'}{how}"


def measure(url: str, name: str, fig: dict[str, Any], workers: list[int], floor: bool) -> None:
    """Add the server's floor for the report's queries and the samples they touch to ``fig``; print its line.
    The floor is the fastest of the replays at each number of queries in flight in ``workers`` (the report's own
    first), so that sending fewer at once than ``max_workers`` never flatters the ratio."""
    queries = fig.pop("queries_sent")
    if floor and queries:
        walls = {n: replay(url, queries, n)[0] for n in dict.fromkeys(workers)}
        fig["floor_wall_s"] = min(walls.values())
        fig["floor_by_in_flight"] = " ".join(f"{n}:{w:.1f}" for n, w in walls.items())
        _, fig["samples_touched"] = replay(url, queries, workers[0], stats=True)
    keys = ("wall_s", "floor_wall_s", "cpu_s", "peak_rss_mib", "prometheus_cpu_s", "prometheus_rss_before_mib",
            "prometheus_peak_rss_mib", "prometheus_anon_before_mib", "prometheus_anon_peak_mib",
            "prometheus_file_before_mib", "prometheus_file_peak_mib", "prometheus_heap_before_mib",
            "prometheus_heap_peak_mib", "samples_touched",
            "queries", "points", "floor_by_in_flight", "load_before", "load_after")
    print(f"{name}: " + " ".join(f"{k}={_fmt(fig.get(k))}" for k in keys), flush=True)


def server_memory_line(fig: dict[str, Any]) -> str:
    """What the server's peak RSS is made of, from /proc (mapped files, anonymous memory) and its own /metrics (Go
    heap in use): the files are every block the report's window reads, page cache no client can keep small; the
    anonymous part is what its queries hold, with the garbage collector's slack and pages not yet given back."""
    def mib(key: str) -> str:
        v = fig.get(key)
        return f"{v:.0f}" if isinstance(v, int | float) else "n/a"

    return (f"Prometheus memory: peak RSS {mib('prometheus_peak_rss_mib')} MiB = mapped TSDB files "
            f"{mib('prometheus_file_peak_mib')} MiB (before {mib('prometheus_file_before_mib')}; page cache of the "
            f"blocks the window reads) + anonymous {mib('prometheus_anon_peak_mib')} MiB (before "
            f"{mib('prometheus_anon_before_mib')}; of it Go heap in use at most {mib('prometheus_heap_peak_mib')} MiB, "
            f"before {mib('prometheus_heap_before_mib')})")


def pair_walls(url: str, days: float, end_s: int, extra: list[str], pairs: int) -> list[tuple[float, float]]:
    """Wall times of ``pairs`` cold and warm reports, each pair with an empty cache of its own."""
    walls = []
    for _ in range(pairs):
        with tempfile.TemporaryDirectory(prefix="scale-cache-") as cache_dir:
            cached = [*extra, "--cache-dir", cache_dir]
            cold = run_report(url, days, end_s, None, cached)["wall_s"]
            walls.append((cold, run_report(url, days, end_s, None, cached)["wall_s"]))
    return walls


def warm_ratio(walls: list[tuple[float, float]]) -> float:
    """The median cold wall over the median warm wall."""
    return statistics.median(c for c, _ in walls) / statistics.median(w for _, w in walls)


def goals(workloads: int, days: float, cold: dict[str, Any], warm: dict[str, Any] | None, workers: int,
          walls: list[tuple[float, float]]) -> None:
    """Issue 42's goals as ratios measured in this run (the machine's load cancels out), met or not; the warm one
    from the medians of ``walls`` (cold, warm) where more than one pair ran."""
    ratio = (warm_ratio(walls) if len(walls) > 1 else cold["wall_s"] / warm["wall_s"]) if warm else None
    how = "" if workloads == 2000 else f" (measured at {workloads:,})"
    if warm and len(walls) > 1:
        how += f" (medians of {len(walls)} pairs)"
    print(goal("warm report >= 20x faster than cold (at 2,000 workloads)", ratio, GOAL_WARM_X, at_most=False,
               how=how))
    floor = cold.get("floor_wall_s")
    print(goal("cold raw wall <= 1.3 x the bare-client floor", cold["wall_s"] / floor if floor else None,
               GOAL_FLOOR_X))
    budget = budget_mib(workers)
    before, peak = cold.get("prometheus_rss_before_mib"), cold.get("prometheus_peak_rss_mib")
    if before and peak:
        allowed = GOAL_PROM_RSS_X * before + budget
        print(goal("Prometheus peak RSS <= 1.1 x before + budget", peak / allowed, 1.0,
                   how=f" (peak {peak:.0f} MiB, before {before:.0f} MiB, budget {budget:.0f} MiB = "
                       f"{workers} queries in flight x {budget / workers:g} MiB)"))
    before, peak = cold.get("prometheus_anon_before_mib"), cold.get("prometheus_anon_peak_mib")
    if before and peak:  # not the goal, which is on RSS: the part of it that is not page cache
        allowed = GOAL_PROM_RSS_X * before + budget
        print(goal("(beside it) Prometheus peak anonymous memory <= 1.1 x before + budget", peak / allowed, 1.0,
                   how=f" (peak {peak:.0f} MiB, before {before:.0f} MiB; the rest of RSS is mapped TSDB files)"))
    print(server_memory_line(cold))
    print(goal("client peak RSS <= 1 GiB (at 10,000 x 14 d)", cold["peak_rss_mib"] / GOAL_CLIENT_MIB, 1.0,
               how=f" ({cold['peak_rss_mib']:.0f} MiB at {workloads:,} x {days:g} d)"))


def main() -> None:
    ap = argparse.ArgumentParser(description=" ".join((__doc__ or "").split("\n\n")[0].split()))
    ap.add_argument("--workloads", type=int, default=2000)
    ap.add_argument("--days", type=float, default=14)
    ap.add_argument("--step", type=int, default=60, help="scrape interval of the synthetic series, s")
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--keep", type=Path, help="build the TSDB in this (new or empty) directory and keep it")
    where.add_argument("--reuse", type=Path, help="serve a TSDB kept earlier (same parameters) instead of building")
    ap.add_argument("--workers", type=int, help="the report's --workers (queries in flight; default its own)")
    ap.add_argument("--save-report", type=Path, help="also keep the JSON report here")
    ap.add_argument("--no-cycles", action="store_true", help="skip the two controller cycles after the report")
    ap.add_argument("--no-warm", action="store_true", help="skip the warm second report from the cache")
    ap.add_argument("--pairs", type=int, default=1, metavar="N",
                    help="run N cold and warm pairs (each with an empty cache); the warm goal reads their medians")
    ap.add_argument("--moved", type=int, default=0, metavar="N",
                    help="run cold and warm N report steps before the TSDB's end, then a warm report at its end "
                         "(the window moved N steps)")
    ap.add_argument("--rules", nargs="?", const=0.0, type=float, metavar="FROM",
                    help="also write recorded series (from this share of the history on; default all of it) and "
                         "compare a cold report on recording rules with one on raw series")
    ap.add_argument("--churn", type=int, metavar="N",
                    help="replace (rename) every pod at every N-th block range of 54 h, as rollouts would: the census "
                         "then counts more series over the window than a query over a few hours selects")
    ap.add_argument("--no-floor", action="store_true",
                    help="skip replaying the report's queries from a bare client (the floor, samples touched)")
    ap.add_argument("--no-bytecode", action="store_true",
                    help="do not compile this checkout to bytecode first (each report then compiles the modules it "
                         "imports from source where PYTHONDONTWRITEBYTECODE is set)")
    ap.add_argument("--settings", type=Path, help="a settings file for the reports (merged under --step's own)")
    ap.add_argument("--snapshot", action="store_true",
                    help="also save the window as a snapshot and report on it from the file (wall, CPU, peak RSS)")
    ap.add_argument("--per-workload", action="store_true",
                    help="also run a one-query-per-workload tool's queries (KRR's way) on a fresh server over the "
                         "same blocks, and compare the server's memory and CPU with the cold report's")
    args = ap.parse_args()
    require_prometheus()
    if not args.no_bytecode:
        print(f"compiled this checkout's bytecode, as pip install does: {'ok' if compile_checkout() else 'FAILED'}",
              flush=True)
    tmp: Path | None = None
    try:
        if args.reuse:
            data = args.reuse
            end_s = stored_end(data, args)
            print(f"reusing {data}: {check_blocks(data)} end_s={end_s}", flush=True)
        else:
            if args.keep and args.keep.exists() and any(args.keep.iterdir()):
                raise SystemExit(f"{args.keep} is not empty: pass --reuse {args.keep}, or remove it")
            tmp = Path(tempfile.mkdtemp(prefix="rightsizer-scale-"))
            data = args.keep or tmp / "data"
            end_s = int(time.time()) // 60 * 60 - 120
            print(f"building TSDB: {args.workloads} workloads x {args.days:g} days at {args.step} s "
                  f"on {os.cpu_count()} cores", flush=True)
            t0 = time.perf_counter()
            samples = build_tsdb(data, args.workloads, args.days, args.step, end_s, args.rules, args.churn)
            build_s = time.perf_counter() - t0
            (data / PARAMS_FILE).write_text(json.dumps(
                {"workloads": args.workloads, "days": args.days, "step": args.step, "end_s": end_s,
                 "samples": samples, "build_s": round(build_s, 1), "rules_from": args.rules,
                 "churn": args.churn}) + "\n")
            print(f"tsdb_build_s={build_s:.1f} samples_written={samples} {check_blocks(data)}", flush=True)
        extra = ["--workers", str(args.workers)] if args.workers else []
        if args.step > 60:  # the report's smallest step is the scrape interval (rate() needs two samples)
            settings = (tmp or Path(tempfile.mkdtemp(prefix="rightsizer-scale-"))) / "settings.yaml"
            tmp = settings.parent
            settings.write_text(f"prometheus:\n  min_step_s: {args.step}\n")
            extra += ["--settings", str(settings)]
        if args.settings:
            if args.step > 60:
                raise SystemExit("--settings with --step above 60 s: put prometheus.min_step_s in the file instead")
            extra += ["--settings", str(args.settings)]
        from collectors.prometheus import PromClient
        from recommender.core.settings_sources import PrometheusSettings

        max_workers = args.workers or PrometheusSettings().max_workers
        t0 = time.perf_counter()
        lookback = [f"--query.lookback-delta={2 * args.step}s"] if args.step > 150 else []  # default 5 min
        with PromServer.from_tsdb(data, extra_args=lookback) as prom:
            # the report's queries in flight: at most the server's cores (match_server_cores), read as it reads them
            workers = PromClient(PrometheusSettings(url=prom.url, max_workers=max_workers)).in_flight
            print(f"prometheus ready in {time.perf_counter() - t0:.1f} s at {prom.url} (the report sends {workers} "
                  f"queries at a time, at most its cores); running the report", flush=True)
            from collectors.prometheus.chunks import step_for

            report_step = step_for(args.days * 86_400, PrometheusSettings(**(
                {"min_step_s": args.step} if args.step > 60 else {})))
            first_end = end_s - int(args.moved * report_step)
            moved = None
            with tempfile.TemporaryDirectory(prefix="scale-cache-") as cache_dir:
                cached = [*extra, "--cache-dir", cache_dir]
                fig = run_report(prom.url, args.days, first_end, prom.pid, cached, args.save_report)
                warm = None if args.no_warm else run_report(prom.url, args.days, first_end, prom.pid, cached)
                if args.moved:
                    moved = run_report(prom.url, args.days, end_s, prom.pid, cached)
            walls = [] if warm is None else [(fig["wall_s"], warm["wall_s"])]
            if warm is not None and args.pairs > 1:
                walls += pair_walls(prom.url, args.days, first_end, extra, args.pairs - 1)
            # under --rules the TSDB holds recorded series and the default settings read them: say so
            cold_name = "cold, raw series" if args.rules is None else "cold, default settings (recorded series read)"
            measure(prom.url, cold_name, fig, [workers, max_workers], not args.no_floor)
            if warm is not None:
                measure(prom.url, "warm, from the cache", warm, [workers], not args.no_floor)
            if moved is not None:
                measure(prom.url, f"warm, window moved {args.moved} steps of {report_step:g} s", moved, [workers],
                        not args.no_floor)
            snapshot_line = run_snapshot(prom.url, args.days, first_end, extra, fig) if args.snapshot else None
            cycles = {} if args.no_cycles else run_cycles(prom.url, args.days, end_s, prom.pid)
            if args.rules is not None:
                with tempfile.TemporaryDirectory(prefix="scale-rules-") as rules_tmp:
                    raw, rec = run_rules(prom.url, args.days, end_s, prom.pid, extra, Path(rules_tmp))
        theirs = None
        if args.per_workload:
            theirs = run_per_workload(data, lookback, per_workload_queries(args.workloads, args.days, first_end,
                                                                           args.step), max_workers)
        print(" ".join(f"{k}={_fmt(v)}" for k, v in fig.items() if k not in ("wall_s", "peak_rss_mib")))
        print(f"wall_s={fig['wall_s']:.1f} peak_rss_mib={fig['peak_rss_mib']:.0f} queries={fig.get('queries')} "
              f"max_points_per_query={fig.get('max_points_per_query')} "
              f"max_points_per_series={fig.get('max_points_per_series')} workloads={fig['workloads']}")
        ok = fig["wall_s"] <= TARGET_WALL_S and fig["peak_rss_mib"] <= TARGET_RSS_MIB
        print(f"target wall<={TARGET_WALL_S:.0f}s rss<={TARGET_RSS_MIB:.0f}MiB: {'met' if ok else 'NOT met'}")
        if warm is not None:
            same = all(warm[k] == fig[k] for k in ("workloads", "with_recommendation", "gpus_held", "gpus_needed",
                                                   "gpus_needed_packed"))
            print(f"report from the cache: cold_wall_s={fig['wall_s']:.1f} warm_wall_s={warm['wall_s']:.1f} "
                  f"ratio={fig['wall_s'] / warm['wall_s']:.1f}x cold_points={fig.get('points')} "
                  f"warm_points={warm.get('points')} warm_prometheus_cpu_s={_fmt(warm.get('prometheus_cpu_s'))} "
                  f"warm_peak_rss_mib={warm['peak_rss_mib']:.0f} same_summary={same}")
            if len(walls) > 1:
                print(f"cold and warm pairs: {' '.join(f'{c:.1f}/{w:.2f}' for c, w in walls)} s; medians "
                      f"{statistics.median(c for c, _ in walls):.1f}/{statistics.median(w for _, w in walls):.2f} s, "
                      f"ratio={warm_ratio(walls):.1f}x")
        if moved is not None:
            print(f"report from the cache, window moved {args.moved} steps: cold_wall_s={fig['wall_s']:.1f} "
                  f"moved_wall_s={moved['wall_s']:.1f} ratio={fig['wall_s'] / moved['wall_s']:.1f}x "
                  f"moved_points={moved.get('points')}")
        goals(args.workloads, args.days, fig, warm, workers, walls)
        if snapshot_line:
            print(snapshot_line)
        if theirs is not None:
            print("\n".join(per_workload_lines(fig, theirs)))
        if cycles:
            print("controller, two cycles 300 s apart (the second reads only new steps): "
                  + " ".join(f"{k}={_fmt(v)}" for k, v in cycles.items()))
        if args.rules is not None:
            def ratio(k: str) -> str:
                a, b = rec.get(k), raw.get(k)
                return f"{a / b:.2f}" if isinstance(a, int | float) and isinstance(b, int | float) and b else "n/a"

            print(f"cold report on recording rules (from {args.rules:g} of the history) vs raw series: "
                  f"raw_wall_s={raw['wall_s']:.1f} rules_wall_s={rec['wall_s']:.1f} wall_ratio={ratio('wall_s')} "
                  f"(goal <= 0.33) raw_samples={_fmt(raw.get('samples_loaded'))} "
                  f"rules_samples={_fmt(rec.get('samples_loaded'))} "
                  f"samples_ratio={ratio('samples_loaded')} (goal <= 0.20) "
                  f"raw_prometheus_cpu_s={_fmt(raw.get('prometheus_cpu_s'))} "
                  f"rules_prometheus_cpu_s={_fmt(rec.get('prometheus_cpu_s'))} raw_queries={raw.get('queries')} "
                  f"rules_queries={rec.get('queries')} raw_client_cpu_s={_fmt(raw.get('cpu_s'))} "
                  f"rules_client_cpu_s={_fmt(rec.get('cpu_s'))} load={_fmt(raw.get('load_before'))}.."
                  f"{_fmt(rec.get('load_after'))} same_summary="
                  f"{all(raw[k] == rec[k] for k in ('workloads', 'with_recommendation', 'gpus_held'))}")
        if args.keep:
            print(f"kept the TSDB in {args.keep} (python benchmarks/scale.py --reuse {args.keep} ...)")
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
