"""The scale benchmark's synthetic fleet written as a Prometheus TSDB: per workload DCGM memory and engine
activity and, for every second one, vLLM's gauges, a request counter and its cache config, all on a daily
sine with noise; written as OpenMetrics text cut by time (one ``promtool`` backfill per ``BLOCK_S`` window,
each holding every series), so blocks never overlap and the server has nothing to compact while the report
runs. ``PARAMS_FILE`` beside the blocks lets a later run reuse them.

With ``rules_from`` it also writes what ``deploy/monitoring/recording-rules.yaml`` would have recorded
(``namespace_pod:<metric>:2m``, one series per pod, every scrape), from the same synthetic values: each
evaluation at a scrape time reads that scrape and the one before (a 2 min window), the peak for memory and KV,
the mean for activity and queues, and finished requests plus the growth of running and waiting per second for the
request rate. Written for the samples from ``rules_from`` x the history on (0: the whole window; 0.5: rules
installed half way). The first sample of each time window has no earlier one in its window: it stands alone.
And the step rules' series (``namespace_pod:<metric>:step10m``, every 10 min at a phase of ``STEP_PHASE_S``): each
evaluation at t holds the raw query over the block [b - 600 s, b] for b = floor(t / 600) x 600 - 600, as
Prometheus 2.42 answers it (ranges closed at both ends: 11 scrapes): the peak, the mean, and for the request
rate the counter's increase over the block / 600 s (samples at both ends: no extrapolation) plus the
least-squares slopes of running and waiting, clamped at 0. Blocks reaching into the previous time window take
its samples from it (the noise is drawn per window).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

DEVICE_MIB = 81920
MODEL = "meta-llama/Meta-Llama-3-8B-Instruct"
BLOCK_S = 54 * 3600  # 2 h x 3^3: Prometheus' largest compaction range at 60 d retention (10 % of it)
PARAMS_FILE = "scale.json"  # next to the blocks: the build's parameters and end time, for --reuse
SEED = 20_240
FRAC_DIGITS = 10_000  # fractions are written with 4 decimals

# Every sample is "<name>{<labels>} <value> <timestamp>\n": values come from lookup tables of bytes, so
# formatting is one join per series (about 0.2 us a sample); promtool's parsing dominates the build.
_INT = np.array([str(v).encode() for v in range(DEVICE_MIB + 1)], dtype=object)
_FRAC = np.array([f"{v / FRAC_DIGITS:g}".encode() for v in range(FRAC_DIGITS + 1)], dtype=object)

DCGM = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
VLLM = ("vllm:kv_cache_usage_perc", "vllm:num_requests_waiting", "vllm:num_requests_running")
COUNTER = "vllm:request_success"  # OpenMetrics family of vllm:request_success_total
PEAK_RPS = 20.0  # finished requests/s at the daily peak of a workload at level 1
CACHE_CONFIG = "vllm:cache_config_info"
RULE = "namespace_pod:{}:2m"  # the shipped recording rules' names
STEP_RULE, STEP_S, STEP_PHASE_S = "namespace_pod:{}:step10m", 600, 137  # the step rules: name, step, group phase


def _pod(i: int, generation: int | None = None) -> tuple[str, str]:
    """Workload ``i``'s namespace and pod; with a ``generation``, the pod of it (a replaced pod has a new name, as
    a rollout gives)."""
    return f"team-{i % 20:02d}", f"svc-{i:04d}-7d9f8b6c5d-" + ("x2k4p" if generation is None else f"g{generation:04d}")


def _is_vllm(i: int) -> bool:
    return i % 2 == 0


def _labels(i: int, metric: str, generation: int | None = None) -> str:
    ns, pod = _pod(i, generation)
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
    rules_from: int | None = None  # first sample index with recorded series (None: none)
    churn: int | None = None  # every pod replaced at every churn-th block range (None: never)

    @property
    def generation(self) -> int | None:
        """The pods' generation in this window: its block range's number // ``churn``."""
        return None if self.churn is None else (self.first_s + self.k0 * self.step_s) // BLOCK_S // self.churn


def _recorded(i: int, ts: np.ndarray, k0: int) -> dict[str, np.ndarray]:
    """Workload ``i``'s recorded series at ``ts`` (as the shipped rules evaluate them at each scrape)."""
    codes = _codes(i, ts, k0)

    def value(metric: str) -> np.ndarray:
        table, idx = codes[metric]
        return idx.astype("float64") / (FRAC_DIGITS if table is _FRAC else 1)

    def pair(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # (this scrape, the one before, or itself)
        return v, np.concatenate([v[:1], v[:-1]])

    def per_s(v: np.ndarray) -> np.ndarray:
        now, before = pair(v)
        return (now - before) / 60.0

    fb, act = pair(value("DCGM_FI_DEV_FB_USED")), pair(value("DCGM_FI_PROF_GR_ENGINE_ACTIVE"))
    out = {"fb_used_mib": np.maximum(*fb), "gr_engine_active_frac": (act[0] + act[1]) / 2}
    if _is_vllm(i):
        kv, run, wait = (pair(value(n)) for n in VLLM_ORDER)
        growth = per_s(value("vllm:num_requests_running")) + per_s(value("vllm:num_requests_waiting"))
        out |= {"kv_usage_frac": np.maximum(*kv), "requests_running": (run[0] + run[1]) / 2,
                "requests_waiting": (wait[0] + wait[1]) / 2,
                "request_rate_per_s": np.maximum(per_s(_finished(i, ts).astype("float64")) + growth, 0.0)}
    return out


VLLM_ORDER = ("vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:num_requests_waiting")


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
                prefix = f"{metric}{{{_labels(i, metric, w.generation)}}} ".encode()
                rows = zip(itertools.repeat(prefix, len(tails)), table[idx].tolist(), tails, strict=True)
                f.write(b"".join(itertools.chain.from_iterable(rows)))
                samples += len(tails)
        f.write(f"# TYPE {COUNTER} counter\n".encode())
        for i in range(0, w.workloads, 2):
            prefix = f"{COUNTER}_total{{{_labels(i, COUNTER, w.generation)},finished_reason=\"stop\"}} ".encode()
            values = [str(v).encode() for v in _finished(i, ts).tolist()]
            f.write(b"".join(itertools.chain.from_iterable(zip(itertools.repeat(prefix), values, tails))))
            samples += len(tails)
        # vLLM's static config, once an hour: enough for the collector's last_over_time over an hour
        f.write(f"# TYPE {CACHE_CONFIG} gauge\n".encode())
        for i in range(0, w.workloads, 2):
            prefix = f"{CACHE_CONFIG}{{{_labels(i, CACHE_CONFIG, w.generation)}}} 1".encode()
            f.write(b"".join(prefix + tails[j] for j in hourly))
            samples += len(hourly)
        if w.rules_from is not None and w.rules_from < w.k1:
            samples += _write_recorded(f, w, ts, tails)
            samples += _write_steps(f, w)
        f.write(b"# EOF\n")
    t1 = time.perf_counter()
    cmd = ["promtool", "tsdb", "create-blocks-from", "openmetrics", "--quiet", f"--max-block-duration={BLOCK_S}s"]
    out = subprocess.run([*cmd, str(om), str(Path(w.out_dir) / "data")], capture_output=True, text=True, check=False)
    om.unlink()
    if out.returncode != 0:
        lines = (out.stderr or out.stdout).strip().splitlines() or [f"exit status {out.returncode}"]
        raise RuntimeError(f"promtool create-blocks-from failed: {lines[-1]}")
    return samples, t1 - t0, time.perf_counter() - t1


def _write_recorded(f: Any, w: Window, ts: np.ndarray, tails: list[bytes]) -> int:
    """The recorded series of one time window from sample ``w.rules_from`` on; returns the samples written."""
    first = max(0, (w.rules_from or 0) - w.k0)
    per_pod = [{m: v[first:] for m, v in _recorded(i, ts, w.k0).items()} for i in range(w.workloads)]
    return _write_series(f, RULE, per_pod, tails[first:], w.generation)


def _write_series(f: Any, rule: str, per_pod: list[dict[str, np.ndarray]], tails: list[bytes],
                  generation: int | None) -> int:
    """One gauge family per metric named ``rule``, a series per pod (of ``generation``) with its values at
    ``tails``' times (in OpenMetrics); returns the samples written."""
    samples = 0
    for metric in per_pod[0]:
        f.write(f"# TYPE {rule.format(metric)} gauge\n".encode())
        for i, found in enumerate(per_pod):
            if metric not in found:
                continue
            ns, pod = _pod(i, generation)
            prefix = f'{rule.format(metric)}{{namespace="{ns}",pod="{pod}"}} '.encode()
            values = [repr(v).encode() for v in found[metric].tolist()]
            f.write(b"".join(itertools.chain.from_iterable(zip(itertools.repeat(prefix), values, tails))))
            samples += len(values)
    return samples


def _window_of(k: int, w: Window) -> tuple[int, int]:
    """The sample indexes [k0, k1) of the time window (one block range) holding sample ``k`` (k < w.k1)."""
    def block(j: int) -> int:
        return (w.first_s + j * w.step_s) // BLOCK_S

    if k >= w.k0:
        return w.k0, w.k1
    k0 = max(0, -(-(block(k) * BLOCK_S - w.first_s) // w.step_s))
    return k0, min(w.k1, -(-((block(k) + 1) * BLOCK_S - w.first_s) // w.step_s))


def _values_at(i: int, k_lo: int, w: Window) -> dict[str, np.ndarray]:
    """Workload ``i``'s raw values (as floats) at sample indexes [k_lo, w.k1), from the windows that hold them."""
    parts: list[dict[str, np.ndarray]] = []
    k = k_lo
    while k < w.k1:
        k0, k1 = _window_of(k, w)
        ts = w.first_s + np.arange(k0, k1, dtype=np.int64) * w.step_s
        codes = _codes(i, ts, k0)
        part = {n: idx.astype("float64")[k - k0:] / (FRAC_DIGITS if table is _FRAC else 1)
                for n, (table, idx) in codes.items()}
        if _is_vllm(i):
            part[COUNTER] = _finished(i, ts).astype("float64")[k - k0:]
        parts.append(part)
        k = k1
    return {n: np.concatenate([p[n] for p in parts]) for n in parts[0]}


def _step_values(i: int, w: Window, evals: np.ndarray) -> dict[str, np.ndarray]:
    """Workload ``i``'s step series at evaluation times ``evals`` (unix s): the raw query over each block."""
    per = STEP_S // w.step_s  # scrapes per block; the block holds per + 1 of them (closed range)
    ends = (evals // STEP_S) * STEP_S - STEP_S
    k_end = (ends - w.first_s) // w.step_s  # the scrape at b
    lo = int(k_end.min()) - per
    v = _values_at(i, lo, w)
    idx = (k_end - lo)[:, None] + np.arange(-per, 1)[None, :]  # each block's scrapes, oldest first

    def block(name: str) -> np.ndarray:
        return v[name][idx]

    out = {"fb_used_mib": block("DCGM_FI_DEV_FB_USED").max(axis=1),
           "gr_engine_active_frac": block("DCGM_FI_PROF_GR_ENGINE_ACTIVE").mean(axis=1)}
    if _is_vllm(i):
        x = np.arange(-per, 1, dtype="float64") * w.step_s

        def slope(y: np.ndarray) -> np.ndarray:
            return ((x - x.mean()) * (y - y.mean(axis=1, keepdims=True))).sum(axis=1) / ((x - x.mean()) ** 2).sum()

        run, wait, done = block("vllm:num_requests_running"), block("vllm:num_requests_waiting"), block(COUNTER)
        out |= {"kv_usage_frac": block("vllm:kv_cache_usage_perc").max(axis=1), "requests_running": run.mean(axis=1),
                "requests_waiting": wait.mean(axis=1),
                "request_rate_per_s": np.maximum((done[:, -1] - done[:, 0]) / STEP_S + slope(run) + slope(wait), 0.0)}
    return out


def _write_steps(f: Any, w: Window) -> int:
    """The step rules' series of one time window: their evaluations in it from sample ``w.rules_from`` on, whose
    blocks lie within the history; returns the samples written."""
    start = w.first_s + max(w.k0, w.rules_from or 0) * w.step_s
    end = w.first_s + (w.k1 - 1) * w.step_s
    evals = np.arange(-(-(start - STEP_PHASE_S) // STEP_S) * STEP_S + STEP_PHASE_S, end + 1, STEP_S)
    evals = evals[(evals // STEP_S) * STEP_S - 2 * STEP_S >= w.first_s]  # the block's first scrape exists
    if not len(evals):
        return 0
    tails = [f" {t}\n".encode() for t in evals.tolist()]
    return _write_series(f, STEP_RULE, [_step_values(i, w, evals) for i in range(w.workloads)], tails, w.generation)


def per_workload_queries(workloads: int, days: float, end_s: int, step_s: int, sub_s: float = 75.0
                         ) -> list[dict[str, Any]]:
    """What a one-query-per-workload tool asks of this fleet, KRR's way: per workload and metric one instant query
    over the whole window, its pods picked by name, each series first reduced to one per container and pod
    (``max by``) on a subquery every ``sub_s`` seconds (KRR's default timeframe is 1.25 min; never finer than
    the scrape interval): the peak of memory and KV cache, the 95th percentile of engine activity, the queues and
    the request rate (the counter's rate over the subquery step, or two scrapes). As ``{"endpoint", "params"}``
    for ``scale.replay``."""
    sub = max(sub_s, step_s)
    grid, rate = f"[{days * 86_400:.0f}s:{sub:g}s]", f"[{max(sub, 2 * step_s):g}s]"
    def peak(metric: str, sel: str) -> str:
        return f"max_over_time(max({metric}{sel}) by (container, pod, job){grid})"

    def p95(inner: str) -> str:
        return f"quantile_over_time(0.95, max({inner}) by (container, pod, job){grid})"

    out = []
    for i in range(workloads):
        ns, pod = _pod(i)
        sel = f'{{namespace="{ns}",pod=~"{pod.rsplit("-", 1)[0]}-.*"}}'
        exprs = [peak("DCGM_FI_DEV_FB_USED", sel), peak("DCGM_FI_DEV_FB_FREE", sel),
                 p95(f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{sel}")]
        if _is_vllm(i):
            exprs += [peak("vllm:kv_cache_usage_perc", sel), p95(f"vllm:num_requests_waiting{sel}"),
                      p95(f"vllm:num_requests_running{sel}"), p95(f"rate({COUNTER}_total{sel}{rate})")]
        out += [{"endpoint": "query", "params": {"query": e, "time": end_s}} for e in exprs]
    return out


def windows(workloads: int, n: int, step_s: int, end_s: int, work: Path, rules_from: float | None = None,
            churn: int | None = None) -> list[Window]:
    """Cut samples 0..n-1 (the last at ``end_s``) at block-range boundaries, largest first (better packing).
    ``rules_from``: the share of the history after which recorded series are written too (None: none); ``churn``:
    every pod replaced at every churn-th block range (None: never)."""
    first_rule = None if rules_from is None else int(n * rules_from)
    first_s = end_s - (n - 1) * step_s
    cuts = [0]
    for k in range(1, n):
        if (first_s + k * step_s) // BLOCK_S != (first_s + (k - 1) * step_s) // BLOCK_S:
            cuts.append(k)
    cuts.append(n)
    out = [Window(a, b, workloads, step_s, first_s, str(work), first_rule, churn) for a, b in itertools.pairwise(cuts)]
    return sorted(out, key=lambda w: w.k0 - w.k1)


def build_tsdb(data: Path, workloads: int, days: float, step_s: int, end_s: int, rules_from: float | None = None,
               churn: int | None = None) -> int:
    """Blocks for the whole fleet in ``data`` (a new or empty directory); returns the samples written.
    ``rules_from``: also the recorded series, from this share of the history on (0: all of it); ``churn``: every
    pod replaced (renamed) at every churn-th block range of ``BLOCK_S``."""
    n = int(days * 86_400 / step_s)
    data.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="scale-om-", dir=data.parent))
    try:
        (work / "data").mkdir()
        jobs = windows(workloads, n, step_s, end_s, work, rules_from, churn)
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
        def said(v: object) -> str:
            return "none" if v is None else f"{v:g}"

        for key in ("workloads", "days", "step", "churn"):
            if saved.get(key) != getattr(args, key, None):
                raise SystemExit(f"{data} was built with --{key} {said(saved.get(key))}, "
                                 f"not {said(getattr(args, key, None))}")
        if getattr(args, "rules", False) and saved.get("rules_from") is None:
            raise SystemExit(f"{data} was built without recorded series: build it again with --rules")
        return int(saved["end_s"])
    metas = blocks(data)
    if not metas:
        raise SystemExit(f"no TSDB blocks in {data}")
    print(f"warning: no {PARAMS_FILE} in {data}: parameters unchecked, end taken from the newest block")
    return (max(m["maxTime"] for m in metas) - 1) // 1000  # maxTime is exclusive: last sample + 1 ms
