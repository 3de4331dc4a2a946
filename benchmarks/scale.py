"""Scale benchmark: a synthetic fleet of GPU workloads backfilled into a real Prometheus, then
``rightsizer report`` end to end against it, as a subprocess (the real CLI).

    python benchmarks/scale.py                                  # 2,000 workloads x 14 days at 60 s (the target)
    python benchmarks/scale.py --workloads 200 --days 2         # a quick run
    python benchmarks/scale.py --keep /tmp/scale-tsdb           # keep the TSDB for later runs ...
    python benchmarks/scale.py --reuse /tmp/scale-tsdb          # ... and serve it again without a rebuild

Prints the TSDB build time (separately), then the report's wall time, peak RSS, number of queries and
the largest query (points per query and per series). Target on the 2-core machine: <= 60 s and
<= 1 GiB peak RSS for the report. Then two cycles of the controller's collection 300 s apart, the second
with the first's cache (``--no-cycles`` skips them): what a cycle costs Prometheus once the controller runs.
Needs Debian's ``prometheus`` and ``promtool``.

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
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.promfixture import PromServer, require_prometheus  # noqa: E402

DEVICE_MIB = 81920
MODEL = "meta-llama/Meta-Llama-3-8B-Instruct"
BLOCK_S = 54 * 3600  # 2 h x 3^3: Prometheus' largest compaction range at 60 d retention (10 % of it)
PARAMS_FILE = "scale.json"  # next to the blocks: the build's parameters and end time, for --reuse
SEED = 20_240
FRAC_DIGITS = 10_000  # fractions are written with 4 decimals
TARGET_WALL_S, TARGET_RSS_MIB = 60.0, 1024.0
STATS_LINE = re.compile(
    r"prometheus: (?P<queries>[\d,]+) queries \((?P<retried>[\d,]+) retried, (?P<split>[\d,]+) split\), "
    r"(?P<series>[\d,]+) series, (?P<points>[\d,]+) points; largest answer (?P<max_points_per_query>[\d,]+) "
    r"points, (?P<max_points_per_series>[\d,]+) per series"
)

# Every sample is "<name>{<labels>} <value> <timestamp>\n": values come from lookup tables of bytes, so
# formatting is one join per series (about 0.2 us a sample); promtool's parsing dominates the build.
_INT = np.array([str(v).encode() for v in range(DEVICE_MIB + 1)], dtype=object)
_FRAC = np.array([f"{v / FRAC_DIGITS:g}".encode() for v in range(FRAC_DIGITS + 1)], dtype=object)

DCGM = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
VLLM = ("vllm:kv_cache_usage_perc", "vllm:num_requests_waiting", "vllm:num_requests_running")
COUNTER = "vllm:request_success"  # OpenMetrics family of vllm:request_success_total
PEAK_RPS = 20.0  # finished requests/s at the daily peak of a workload at level 1
CACHE_CONFIG = "vllm:cache_config_info"


def _pod(i: int) -> tuple[str, str]:
    return f"team-{i % 20:02d}", f"svc-{i:04d}-7d9f8b6c5d-x2k4p"


def _is_vllm(i: int) -> bool:
    return i % 2 == 0


def _labels(i: int, metric: str) -> str:
    ns, pod = _pod(i)
    if metric in DCGM:
        return (f'namespace="{ns}",pod="{pod}",container="main",gpu="0",UUID="GPU-{i:08d}",'
                f'modelName="NVIDIA A100-SXM4-80GB",Hostname="node-{i // 8:04d}"')
    if metric == CACHE_CONFIG:
        return (f'namespace="{ns}",pod="{pod}",engine="0",num_gpu_blocks="18000",block_size="16",'
                f'gpu_memory_utilization="0.9",model_name="{MODEL}"')
    return f'namespace="{ns}",pod="{pod}",container="main",engine="0",model_name="{MODEL}"'


def _params(i: int) -> tuple[float, float, float]:
    """Workload ``i``'s daily phase, activity level and memory share: from ``i`` alone, so every series and
    every time window of one workload agree."""
    params = np.random.default_rng([SEED, i])
    return params.uniform(0, 2 * np.pi), params.uniform(0.02, 0.6), params.uniform(0.1, 0.7)


def _codes(i: int, ts: np.ndarray, k0: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """One workload's samples at unix times ``ts`` (absolute sample index ``k0`` onwards), as indexes into
    the string tables: a daily cycle around a per-workload level, with noise. The per-workload parameters
    depend on ``i`` only and the noise on ``(i, k0)``, so every time window agrees with its neighbours."""
    phase, level, mem = _params(i)
    noise = np.random.default_rng([SEED, i, k0])
    n = len(ts)
    day = 0.5 + 0.5 * np.sin(2 * np.pi * ts / 86_400 + phase)
    act = np.clip(level * day + noise.normal(0, 0.02, n), 0, 1)
    if _is_vllm(i):  # vLLM preallocates its KV cache: memory is flat at gpu_memory_utilization
        used = np.full(n, round(0.9 * DEVICE_MIB + 500))
    else:
        used = np.clip(DEVICE_MIB * mem * (0.8 + 0.2 * day) + noise.normal(0, 200, n), 500, DEVICE_MIB - 100)
    used = np.rint(used).astype(np.int64)
    out = {
        "DCGM_FI_DEV_FB_USED": (_INT, used),
        "DCGM_FI_DEV_FB_FREE": (_INT, DEVICE_MIB - used),
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": (_FRAC, np.rint(act * FRAC_DIGITS).astype(np.int64)),
    }
    if _is_vllm(i):
        out |= {
            "vllm:kv_cache_usage_perc": (_FRAC, np.rint(np.clip(act * 0.8, 0, 1) * FRAC_DIGITS).astype(np.int64)),
            "vllm:num_requests_running": (_INT, np.rint(act * 40).astype(np.int64)),
            "vllm:num_requests_waiting": (_INT, np.rint(np.maximum(0, (act - 0.5) * 20)).astype(np.int64)),
        }
    return out


def _finished(i: int, ts: np.ndarray) -> np.ndarray:
    """vLLM's finished-request counter at unix times ``ts``: the integral of PEAK_RPS x level x the daily
    cycle since the epoch, floored; a function of time alone, so every window continues the last."""
    phase, level, _ = _params(i)
    w = 2 * np.pi / 86_400
    t = ts.astype("float64")
    return np.floor(PEAK_RPS * level * (0.5 * t + 0.5 / w * (np.cos(phase) - np.cos(w * t + phase)))).astype(np.int64)


@dataclass(frozen=True)
class Window:
    """One promtool run: sample indexes [k0, k1) of the history, all inside one block range."""

    k0: int
    k1: int
    workloads: int
    step_s: int
    first_s: int  # unix time of sample 0
    out_dir: str


def _write_window(w: Window) -> tuple[int, float, float]:
    """Write every series of one time window as OpenMetrics and convert it to one TSDB block.

    Returns (samples, seconds writing, seconds in promtool)."""
    t0 = time.perf_counter()
    ts = w.first_s + np.arange(w.k0, w.k1, dtype=np.int64) * w.step_s
    tails = [f" {t}\n".encode() for t in ts.tolist()]
    hourly = np.flatnonzero(ts // 3600 != (ts - w.step_s) // 3600).tolist()  # each hour's first sample
    om = Path(w.out_dir) / f"window-{w.k0:07d}.om"
    samples = 0
    with om.open("wb") as f:
        for metric in (*DCGM, *VLLM):
            f.write(f"# TYPE {metric} gauge\n".encode())
            for i in range(w.workloads):
                codes = _codes(i, ts, w.k0)
                if metric not in codes:
                    continue
                table, idx = codes[metric]
                prefix = f"{metric}{{{_labels(i, metric)}}} ".encode()
                rows = zip(itertools.repeat(prefix, len(tails)), table[idx].tolist(), tails, strict=True)
                f.write(b"".join(itertools.chain.from_iterable(rows)))
                samples += len(tails)
        f.write(f"# TYPE {COUNTER} counter\n".encode())
        for i in range(0, w.workloads, 2):
            prefix = f"{COUNTER}_total{{{_labels(i, COUNTER)},finished_reason=\"stop\"}} ".encode()
            values = [str(v).encode() for v in _finished(i, ts).tolist()]
            f.write(b"".join(itertools.chain.from_iterable(zip(itertools.repeat(prefix), values, tails))))
            samples += len(tails)
        # vLLM's static config, once an hour: enough for the collector's last_over_time over an hour
        f.write(f"# TYPE {CACHE_CONFIG} gauge\n".encode())
        for i in range(0, w.workloads, 2):
            prefix = f"{CACHE_CONFIG}{{{_labels(i, CACHE_CONFIG)}}} 1".encode()
            f.write(b"".join(prefix + tails[j] for j in hourly))
            samples += len(hourly)
        f.write(b"# EOF\n")
    t1 = time.perf_counter()
    cmd = ["promtool", "tsdb", "create-blocks-from", "openmetrics", "--quiet", f"--max-block-duration={BLOCK_S}s"]
    out = subprocess.run([*cmd, str(om), str(Path(w.out_dir) / "data")], capture_output=True, text=True, check=False)
    om.unlink()
    if out.returncode != 0:
        lines = (out.stderr or out.stdout).strip().splitlines() or [f"exit status {out.returncode}"]
        raise RuntimeError(f"promtool create-blocks-from failed: {lines[-1]}")
    return samples, t1 - t0, time.perf_counter() - t1


def windows(workloads: int, n: int, step_s: int, end_s: int, work: Path) -> list[Window]:
    """Cut samples 0..n-1 (the last at ``end_s``) at block-range boundaries, largest first (better packing)."""
    first_s = end_s - (n - 1) * step_s
    cuts = [0]
    for k in range(1, n):
        if (first_s + k * step_s) // BLOCK_S != (first_s + (k - 1) * step_s) // BLOCK_S:
            cuts.append(k)
    cuts.append(n)
    out = [Window(a, b, workloads, step_s, first_s, str(work)) for a, b in itertools.pairwise(cuts)]
    return sorted(out, key=lambda w: w.k0 - w.k1)


def build_tsdb(data: Path, workloads: int, days: float, step_s: int, end_s: int) -> int:
    """Blocks for the whole fleet in ``data`` (a new or empty directory); returns the samples written."""
    n = int(days * 86_400 / step_s)
    data.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="scale-om-", dir=data.parent))
    try:
        (work / "data").mkdir()
        jobs = windows(workloads, n, step_s, end_s, work)
        total = 0
        with ProcessPoolExecutor(max_workers=min(len(jobs), os.cpu_count() or 2)) as pool:
            for k, (samples, write_s, tool_s) in enumerate(pool.map(_write_window, jobs), 1):
                total += samples
                print(f"  window {k}/{len(jobs)}: {samples / 1e6:.1f} M samples, written in {write_s:.0f} s, "
                      f"promtool {tool_s:.0f} s", flush=True)
        data.mkdir(parents=True, exist_ok=True)
        for block in (work / "data").iterdir():
            block.rename(data / block.name)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return total


def blocks(data: Path) -> list[dict[str, Any]]:
    metas = [json.loads(p.read_text()) for p in data.glob("*/meta.json")]
    return sorted(metas, key=lambda m: m["minTime"])


def check_blocks(data: Path) -> str:
    """One line about the blocks; fails when they overlap (the server would compact during the report)."""
    metas = blocks(data)
    if not metas:
        raise SystemExit(f"no TSDB blocks in {data}")
    for a, b in itertools.pairwise(metas):
        if b["minTime"] < a["maxTime"]:
            raise SystemExit(f"overlapping blocks in {data}: {a['ulid']} and {b['ulid']}")
    size = sum(f.stat().st_size for f in data.rglob("*") if f.is_file())
    samples = sum(m["stats"]["numSamples"] for m in metas)
    series = max(m["stats"]["numSeries"] for m in metas)
    return f"blocks={len(metas)} series={series} samples={samples} size_mib={size / 2**20:.0f}"


def stored_end(data: Path, args: argparse.Namespace) -> int:
    """The end time of a TSDB built earlier, after checking it was built with the same parameters."""
    params = data / PARAMS_FILE
    if params.is_file():
        saved = json.loads(params.read_text())
        for key in ("workloads", "days", "step"):
            if saved[key] != getattr(args, key):
                raise SystemExit(f"{data} was built with --{key} {saved[key]:g}, not {getattr(args, key):g}")
        return int(saved["end_s"])
    metas = blocks(data)
    if not metas:
        raise SystemExit(f"no TSDB blocks in {data}")
    print(f"warning: no {PARAMS_FILE} in {data}: parameters unchecked, end taken from the newest block")
    return (max(m["maxTime"] for m in metas) - 1) // 1000  # maxTime is exclusive: last sample + 1 ms


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


def run_report(url: str, days: float, end_s: int, server_pid: int | None, extra: list[str],
               save: Path | None = None) -> dict[str, Any]:
    """Run ``rightsizer report`` as a child: wall time around it, its own rusage (os.wait4), its figures."""
    with tempfile.TemporaryDirectory(prefix="scale-report-") as tmp:
        out, err_path = Path(tmp) / "report.json", Path(tmp) / "stderr.txt"
        cmd = [*_cli(), "report", "--prometheus-url", url, "--no-kubernetes", "--history", f"{days:g}d",
               "--end", str(end_s), "-o", "json", "--output-file", str(out), *extra]
        env = {**os.environ, "COLUMNS": "1000"}  # rich wraps at 80 columns off a terminal
        server_cpu0 = _cpu_s(server_pid) if server_pid else 0.0
        with err_path.open("w") as err:
            t0 = time.perf_counter()
            proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=err)
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        stderr = err_path.read_text(errors="replace")
        if proc.returncode != 0:
            tail = "\n".join(stderr.strip().splitlines()[-15:])
            print(f"report failed with exit status {proc.returncode}:\n{tail}", file=sys.stderr)
            raise SystemExit(proc.returncode or 1)
        fig: dict[str, Any] = {"wall_s": wall, "peak_rss_mib": usage.ru_maxrss / 1024,
                               "cpu_s": usage.ru_utime + usage.ru_stime}
        if server_pid:
            fig["prometheus_cpu_s"] = _cpu_s(server_pid) - server_cpu0
            fig["prometheus_rss_hwm_mib"] = _hwm_mib(server_pid)
        hit = STATS_LINE.search(" ".join(stderr.split()))
        if hit is None:
            print(f"warning: no query statistics line in the report's stderr:\n{stderr[-2000:]}", file=sys.stderr)
        else:
            fig |= {k: int(v.replace(",", "")) for k, v in hit.groupdict().items()}
        doc = json.loads(out.read_text())
        if save:
            shutil.copyfile(out, save)
        s = doc["summary"]
        fig |= {"workloads": s["workloads"], "with_recommendation": s["with_recommendation"],
                "gpus_held": s["gpus_held"], "gpus_needed": s["gpus_needed"],
                "gpus_needed_packed": s["gpus_needed_packed"], "warnings": len(doc.get("warnings", ())),
                "report_kib": out.stat().st_size / 1024}
    return fig


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


def _fmt(v: object) -> str:
    return f"{v:.1f}" if isinstance(v, float) else str(v)


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
    args = ap.parse_args()
    require_prometheus()
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
            samples = build_tsdb(data, args.workloads, args.days, args.step, end_s)
            build_s = time.perf_counter() - t0
            (data / PARAMS_FILE).write_text(json.dumps(
                {"workloads": args.workloads, "days": args.days, "step": args.step, "end_s": end_s,
                 "samples": samples, "build_s": round(build_s, 1)}) + "\n")
            print(f"tsdb_build_s={build_s:.1f} samples_written={samples} {check_blocks(data)}", flush=True)
        extra = ["--workers", str(args.workers)] if args.workers else []
        t0 = time.perf_counter()
        with PromServer.from_tsdb(data) as prom:
            print(f"prometheus ready in {time.perf_counter() - t0:.1f} s at {prom.url}; running the report",
                  flush=True)
            fig = run_report(prom.url, args.days, end_s, prom.pid, extra,
                             args.save_report)
            cycles = {} if args.no_cycles else run_cycles(prom.url, args.days, end_s, prom.pid)
        print(" ".join(f"{k}={_fmt(v)}" for k, v in fig.items() if k not in ("wall_s", "peak_rss_mib")))
        print(f"wall_s={fig['wall_s']:.1f} peak_rss_mib={fig['peak_rss_mib']:.0f} queries={fig.get('queries')} "
              f"max_points_per_query={fig.get('max_points_per_query')} "
              f"max_points_per_series={fig.get('max_points_per_series')} workloads={fig['workloads']}")
        ok = fig["wall_s"] <= TARGET_WALL_S and fig["peak_rss_mib"] <= TARGET_RSS_MIB
        print(f"target wall<={TARGET_WALL_S:.0f}s rss<={TARGET_RSS_MIB:.0f}MiB: {'met' if ok else 'NOT met'}")
        if cycles:
            print("controller, two cycles 300 s apart (the second reads only new steps): "
                  + " ".join(f"{k}={_fmt(v)}" for k, v in cycles.items()))
        if args.keep:
            print(f"kept the TSDB in {args.keep} (python benchmarks/scale.py --reuse {args.keep} ...)")
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
