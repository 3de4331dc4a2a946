"""Scale benchmark: a synthetic fleet of GPU workloads backfilled into a real Prometheus, then
``rightsizer report`` end to end against it.

    python benchmarks/scale.py                       # 2,000 workloads x 14 days at 60 s (the target)
    python benchmarks/scale.py --workloads 200 --days 2   # a quick run

Prints the TSDB build time (separately), then the report's wall time, peak RSS, number of queries and
the largest query (points per query and per series). Target on the 2-core machine: <= 60 s and
<= 1 GiB peak RSS for the report. Needs Debian's ``prometheus`` and ``promtool``.

Series per workload: DCGM FB_USED, FB_FREE, GR_ENGINE_ACTIVE (every pod) and, for every second
workload (vLLM), kv_cache_usage_perc, num_requests_waiting, num_requests_running, plus a sparse
cache_config_info. Values follow a daily sine with noise, so percentiles are not trivial.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.promfixture import PromServer, require_prometheus  # noqa: E402

DCGM = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
VLLM = ("vllm:kv_cache_usage_perc", "vllm:num_requests_waiting", "vllm:num_requests_running")
DEVICE_MIB = 81920.0


def _pod(i: int) -> tuple[str, str]:
    return f"team-{i % 20:02d}", f"svc-{i:04d}-7d9f8b6c5d-x2k4p"


def _series_values(i: int, n: int, step_s: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One workload's values: a daily cycle around a per-workload level, with noise."""
    t = np.arange(n) * step_s
    day = 0.5 + 0.5 * np.sin(2 * np.pi * t / 86_400 + rng.uniform(0, 6.28))
    level = rng.uniform(0.02, 0.6)
    act = np.clip(level * day + rng.normal(0, 0.02, n), 0, 1)
    used = np.clip(DEVICE_MIB * (0.1 + 0.6 * level) * (0.8 + 0.2 * day), 500, DEVICE_MIB - 100).round()
    out = {"DCGM_FI_DEV_FB_USED": used, "DCGM_FI_DEV_FB_FREE": DEVICE_MIB - used,
           "DCGM_FI_PROF_GR_ENGINE_ACTIVE": act.round(4)}
    if i % 2 == 0:
        out["DCGM_FI_DEV_FB_USED"] = np.full(n, round(0.9 * DEVICE_MIB + 500))
        out["DCGM_FI_DEV_FB_FREE"] = DEVICE_MIB - out["DCGM_FI_DEV_FB_USED"]
        out["vllm:kv_cache_usage_perc"] = np.clip(act * 0.8, 0, 1).round(4)
        out["vllm:num_requests_running"] = (act * 40).round()
        out["vllm:num_requests_waiting"] = np.maximum(0, (act - 0.5) * 20).round()
    return out


def _write_chunk(args: tuple[int, int, int, int, int, str]) -> tuple[int, float]:
    """Write OpenMetrics for workloads [lo, hi) and convert them to TSDB blocks; returns samples, seconds."""
    lo, hi, n, step_s, end_s, out_dir = args
    t0 = time.perf_counter()
    rng = np.random.default_rng(lo)
    ts = (end_s - (n - 1 - np.arange(n)) * step_s).astype(str)
    by_metric: dict[str, list[str]] = {}
    samples = 0
    for i in range(lo, hi):
        ns, pod = _pod(i)
        labels = f'namespace="{ns}",pod="{pod}",container="main",gpu="0",UUID="GPU-{i:08d}",' \
                 f'modelName="NVIDIA A100-SXM4-80GB",Hostname="node-{i // 8:04d}"'
        for metric, values in _series_values(i, n, step_s, rng).items():
            vals = values.astype(str)
            prefix = f"{metric}{{{labels}}} "
            by_metric.setdefault(metric, []).append("".join(prefix + v + " " + t + "\n" for v, t in zip(vals, ts, strict=True)))
            samples += n
        if i % 2 == 0:  # vLLM's static config, once an hour is enough for last_over_time
            info = f'vllm:cache_config_info{{namespace="{ns}",pod="{pod}",num_gpu_blocks="18000",block_size="16",' \
                   f'gpu_memory_utilization="0.9",engine="0",model_name="meta-llama/Meta-Llama-3-8B-Instruct"}} 1 '
            by_metric.setdefault("vllm:cache_config_info", []).append(
                "".join(info + t + "\n" for t in ts[::60]))
    path = Path(out_dir) / f"chunk-{lo:05d}.om"
    with path.open("w") as f:
        for metric, parts in by_metric.items():
            f.write(f"# TYPE {metric} gauge\n")
            f.writelines(parts)
        f.write("# EOF\n")
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "--max-block-duration=384h",
                    str(path), str(Path(out_dir) / "data")], check=True, stdout=subprocess.DEVNULL)
    path.unlink()
    return samples, time.perf_counter() - t0


def build_tsdb(workdir: Path, workloads: int, days: float, step_s: int, end_s: int, chunk: int) -> int:
    n = int(days * 86_400 / step_s)
    jobs = [(lo, min(lo + chunk, workloads), n, step_s, end_s, str(workdir)) for lo in range(0, workloads, chunk)]
    total = 0
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for k, (samples, secs) in enumerate(pool.map(_write_chunk, jobs), 1):
            total += samples
            print(f"  tsdb chunk {k}/{len(jobs)}: {samples / 1e6:.1f} M samples in {secs:.0f} s", flush=True)
    return total


def run_report(url: str, days: float, end_s: int) -> dict[str, float]:
    """Run the report in a child process (so its peak RSS is its own) and collect its figures."""
    code = (
        "import json,resource,sys,time\n"
        "from datetime import UTC, datetime\n"
        "from collectors.prometheus import client as c\n"
        "from recommender.app import make_report\n"
        "from recommender.settings import Settings, PrometheusSettings, KubernetesSettings\n"
        f"s = Settings(history_s={days * 86_400}, prometheus=PrometheusSettings(url={url!r}),"
        " kubernetes=KubernetesSettings(enabled=False))\n"
        "t0 = time.perf_counter()\n"
        f"text = make_report('prometheus', None, s, datetime.fromtimestamp({end_s}, UTC), 'json')\n"
        "wall = time.perf_counter() - t0\n"
        "doc = json.loads(text)\n"
        "st = c.LAST_STATS\n"
        "print(json.dumps({'wall_s': wall, 'peak_rss_mib': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss"
        " / 1024, 'queries': st.queries, 'max_points_per_query': st.max_points_per_query,"
        " 'max_points_per_series': st.max_points_per_series, 'workloads': doc['summary']['workloads'],"
        " 'gpus_held': doc['summary']['gpus_held'], 'gpus_needed_packed': doc['summary']['gpus_needed_packed']}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"report failed: {out.stderr.strip().splitlines()[-1] if out.stderr else out.returncode}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", type=int, default=2000)
    ap.add_argument("--days", type=float, default=14)
    ap.add_argument("--step", type=int, default=60, help="scrape interval of the synthetic series, s")
    ap.add_argument("--chunk", type=int, default=50, help="workloads per promtool conversion")
    ap.add_argument("--keep", type=Path, help="keep the TSDB in this directory")
    args = ap.parse_args()
    require_prometheus()
    end_s = int(time.time()) // 60 * 60 - 120
    workdir = Path(tempfile.mkdtemp(prefix="rightsizer-scale-"))
    try:
        t0 = time.perf_counter()
        print(f"building TSDB: {args.workloads} workloads x {args.days:g} days at {args.step} s", flush=True)
        samples = build_tsdb(workdir, args.workloads, args.days, args.step, end_s, args.chunk)
        build_s = time.perf_counter() - t0
        print(f"tsdb_build_s={build_s:.1f} samples={samples} size_mib="
              f"{sum(f.stat().st_size for f in (workdir / 'data').rglob('*') if f.is_file()) / 2**20:.0f}")
        with PromServer.from_tsdb(workdir / "data") as prom:
            fig = run_report(prom.url, args.days, end_s)
        print(" ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in fig.items()))
        ok = fig["wall_s"] <= 60 and fig["peak_rss_mib"] <= 1024
        print(f"target wall<=60s rss<=1024MiB: {'met' if ok else 'NOT met'}")
    finally:
        if args.keep:
            shutil.copytree(workdir / "data", args.keep, dirs_exist_ok=True)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
