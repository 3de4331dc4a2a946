"""A small, realistic GPU cluster as Prometheus history: DCGM, vLLM (new and old names), kube-state-metrics.

Every pod is described by a :class:`Pod`; :func:`cluster_series` turns the list into raw series as the
exporters would have exposed them, scraped every 60 s at half-minute offsets (so a query step on whole
minutes never lands on a sample, and open and closed range boundaries select the same samples). Tests
compute what the collector must return from these same raw series.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from click.testing import CliRunner

from tests.promfixture import PromServer, Series, build_tsdb, write_openmetrics

SCRAPE_S = 60
HOURS = 48.0
TYPES = {  # exported families that are not gauges
    "vllm:request_success": "counter",
    "vllm:prompt_tokens": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:num_preemptions": "counter",
    "vllm:time_to_first_token_seconds": "histogram",
}
TTFT_BUCKETS = (0.1, 0.25, 0.5, 1.0)  # le; +Inf added
TTFT_SHARES = (0.50, 0.30, 0.17, 0.02)  # share of requests per bucket; 1% above 1 s → p95 in (0.25, 0.5]


@dataclass(frozen=True)
class Pod:
    """One GPU pod as the exporters see it. ``owner`` is kube_pod_owner's (kind, name); None: no KSM series."""

    ns: str
    name: str
    owner: tuple[str, str] | None
    product: str = "NVIDIA A100-SXM4-80GB"
    device_mib: float = 81920.0
    uuid: str = "GPU-00000000"
    mig_profile: str | None = None
    gpu_i_id: str | None = None
    requests: dict[str, float] = field(default_factory=lambda: {"nvidia_com_gpu": 1.0})
    vllm: str | None = None  # "new" | "old" names
    activity: str | None = "prof"  # "prof" (GR_ENGINE_ACTIVE), "util" (GPU_UTIL only), None
    level: float = 0.3  # mean engine activity
    fb_mib: float = 20_000.0  # framebuffer used around which it moves
    from_frac: float = 0.0  # its series start this far into the window (0 = whole window)
    nan_every: int = 0  # every n-th activity sample is NaN (0 = never)
    rate_per_s: float = 2.0  # vLLM finished requests per second

    @property
    def key(self) -> str:
        return f"{self.ns}/{self.name}"


RS = "7d9f8b6c5d"
PODS: tuple[Pod, ...] = (
    Pod("inference", f"llama-chat-{RS}-x2k4p", ("ReplicaSet", f"llama-chat-{RS}"), uuid="GPU-a1", vllm="new",
        fb_mib=73_000, level=0.35, nan_every=17),
    Pod("inference", f"llama-chat-{RS}-q8w7z", ("ReplicaSet", f"llama-chat-{RS}"), uuid="GPU-a2", vllm="new",
        fb_mib=73_000, level=0.30, rate_per_s=1.5),
    Pod("inference", "old-vllm-5c6b7d8f9b-m4n5p", ("ReplicaSet", "old-vllm-5c6b7d8f9b"), uuid="GPU-h1",
        product="NVIDIA H100 80GB HBM3", device_mib=81559, vllm="old", fb_mib=72_000, level=0.2),
    Pod("mig", "embedder-6b7c8d9f5d-k2l3m", ("ReplicaSet", "embedder-6b7c8d9f5d"), uuid="GPU-m1",
        mig_profile="3g.40gb", gpu_i_id="2", device_mib=40192, fb_mib=9_000, level=0.15,
        requests={"nvidia_com_mig_3g_40gb": 1.0}),
    Pod("mig", "tiny-7c8d9f5b6c-p9q8r", ("ReplicaSet", "tiny-7c8d9f5b6c"), uuid="GPU-m1",
        mig_profile="1g.10gb", gpu_i_id="9", device_mib=9728, fb_mib=3_000, level=0.05,
        requests={"nvidia_com_mig_1g_10gb": 1.0}),
    Pod("batch", "nightly-eval-29000000-abcde", ("Job", "nightly-eval-29000000"), uuid="GPU-b1",
        fb_mib=30_000, level=0.8, from_frac=0.4),
    Pod("batch", "ts-a-5d6f7b8c9d-aaaaa", ("ReplicaSet", "ts-a-5d6f7b8c9d"), uuid="GPU-t1", fb_mib=8_000,
        level=0.1, requests={"nvidia_com_gpu_shared": 1.0}),
    Pod("batch", "ts-b-6f7b8c9d5d-bbbbb", ("ReplicaSet", "ts-b-6f7b8c9d5d"), uuid="GPU-t1", fb_mib=8_000,
        level=0.1, requests={"nvidia_com_gpu_shared": 1.0}),
    Pod("sparse", "no-activity-8c9d5d6f7b-ccccc", ("ReplicaSet", "no-activity-8c9d5d6f7b"), uuid="GPU-s1",
        activity=None, fb_mib=12_000),
    Pod("sparse", "util-only-9d5d6f7b8c-ddddd", ("ReplicaSet", "util-only-9d5d6f7b8c"), uuid="GPU-s2",
        activity="util", fb_mib=15_000, level=0.4),
    Pod("sparse", "debug-shell", ("<none>", "<none>"), uuid="GPU-s3", product="NVIDIA Foo-9000",
        device_mib=49152, fb_mib=5_000, level=0.02),
)
# Where each physical GPU sits: (node, GPU index). dcgm-exporter's Hostname label is the node name.
GPU_AT = {"GPU-a1": ("a100-0", "0"), "GPU-a2": ("a100-0", "1"), "GPU-m1": ("a100-0", "2"),
          "GPU-b1": ("a100-1", "0"), "GPU-t1": ("a100-1", "1"), "GPU-s1": ("a100-1", "2"),
          "GPU-s2": ("a100-1", "3"), "GPU-h1": ("h100-0", "0"), "GPU-s3": ("foo-0", "0")}
# GPUs no pod uses: a whole A100, and an A100 split into two 3g.40gb instances (node, index, profiles).
FREE_GPUS = (("a100-0", "3", ()), ("a100-0", "4", ("3g.40gb", "3g.40gb")))
# Top-level owners kube-state-metrics reports for ReplicaSets and Jobs.
RS_OWNERS = {("inference", f"llama-chat-{RS}"): ("Deployment", "llama-chat"),
             ("inference", "old-vllm-5c6b7d8f9b"): ("Deployment", "old-vllm"),
             ("mig", "embedder-6b7c8d9f5d"): ("Deployment", "embedder"),
             ("mig", "tiny-7c8d9f5b6c"): ("Deployment", "tiny"),
             ("batch", "ts-a-5d6f7b8c9d"): ("Deployment", "ts-a"),
             ("batch", "ts-b-6f7b8c9d5d"): ("Deployment", "ts-b"),
             ("sparse", "no-activity-8c9d5d6f7b"): ("Deployment", "no-activity"),
             ("sparse", "util-only-9d5d6f7b8c"): ("Deployment", "util-only")}
JOB_OWNERS = {("batch", "nightly-eval-29000000"): ("CronJob", "nightly-eval")}


def timestamps(end_s: int, hours: float = HOURS) -> np.ndarray:
    """Scrape times: every 60 s at :30, the last one 30 s before ``end_s`` (a whole minute)."""
    n = int(hours * 3600 / SCRAPE_S)
    return end_s - 30 - SCRAPE_S * np.arange(n - 1, -1, -1, dtype=np.int64)


def _activity(pod: Pod, i: int, ts: np.ndarray) -> np.ndarray:
    rng = np.random.default_rng(1000 + i)
    day = 0.5 + 0.5 * np.sin(2 * np.pi * ts / 86_400 + i)
    act = np.clip(pod.level * (0.4 + 1.2 * day) + rng.normal(0, 0.02, ts.size), 0, 1).round(4)
    if pod.nan_every:
        act[:: pod.nan_every] = np.nan
    return act


def _pod_series(pod: Pod, i: int, ts: np.ndarray) -> list[Series]:
    node, index = GPU_AT[pod.uuid]
    dcgm = {"namespace": pod.ns, "pod": pod.name, "container": "main", "gpu": index, "UUID": pod.uuid,
            "modelName": pod.product, "Hostname": node}
    if pod.mig_profile:
        dcgm |= {"GPU_I_PROFILE": pod.mig_profile, "GPU_I_ID": pod.gpu_i_id or "0"}
    act = _activity(pod, i, ts)
    fb = np.round(pod.fb_mib * (0.97 + 0.03 * np.nan_to_num(act, nan=pod.level)))
    out = [Series("DCGM_FI_DEV_FB_USED", dcgm, ts, fb), Series("DCGM_FI_DEV_FB_FREE", dcgm, ts, pod.device_mib - fb)]
    if pod.activity == "prof":
        out.append(Series("DCGM_FI_PROF_GR_ENGINE_ACTIVE", dcgm, ts, act))
    if pod.activity == "util" or (pod.activity == "prof" and not pod.mig_profile):
        # GPU_UTIL is exported for whole GPUs (never for MIG); for "prof" pods it must be ignored
        out.append(Series("DCGM_FI_DEV_GPU_UTIL", dcgm, ts, np.round(np.nan_to_num(act) * 100 + 7)))
    if pod.vllm:
        out += _vllm_series(pod, ts, act)
    return out


def _vllm_series(pod: Pod, ts: np.ndarray, act: np.ndarray) -> list[Series]:
    lab = {"namespace": pod.ns, "pod": pod.name, "model_name": "meta-llama/Meta-Llama-3-8B-Instruct",
           "engine": "0"}
    busy = np.nan_to_num(act, nan=pod.level)
    kv_name = "vllm:kv_cache_usage_perc" if pod.vllm == "new" else "vllm:gpu_cache_usage_perc"
    elapsed = (ts - ts[0]).astype(float)
    requests = pod.rate_per_s * elapsed
    out = [
        Series(kv_name, lab, ts, np.clip(busy * 0.9, 0, 1).round(4)),
        Series("vllm:num_requests_running", lab, ts, np.round(busy * 40)),
        Series("vllm:num_requests_waiting", lab, ts, np.maximum(0, np.round((busy - 0.6) * 20))),
        Series("vllm:request_success_total", {**lab, "finished_reason": "stop"}, ts, requests),
        Series("vllm:prompt_tokens_total", lab, ts, requests * 500),
        Series("vllm:generation_tokens_total", lab, ts, requests * 200),
        Series("vllm:num_preemptions_total", lab, ts, np.zeros(ts.size)),
        Series("vllm:cache_config_info", {"namespace": pod.ns, "pod": pod.name, "num_gpu_blocks": "27000",
                                          "block_size": "16", "gpu_memory_utilization": "0.9",
                                          "engine": "0"}, ts, np.ones(ts.size)),
    ]
    for le, cum in zip((*map(str, TTFT_BUCKETS), "+Inf"), np.cumsum((*TTFT_SHARES, 0.01)), strict=True):
        out.append(Series("vllm:time_to_first_token_seconds_bucket", {**lab, "le": le}, ts, requests * cum))
    out.append(Series("vllm:time_to_first_token_seconds_count", lab, ts, requests))
    out.append(Series("vllm:time_to_first_token_seconds_sum", lab, ts, requests * 0.2))
    return out


def _free_series(ts: np.ndarray) -> list[Series]:
    """dcgm-exporter's series for GPUs (or MIG instances) no pod holds: no namespace or pod label."""
    out = []
    for node, index, profiles in FREE_GPUS:
        base = {"gpu": index, "UUID": f"GPU-free-{node}-{index}", "modelName": "NVIDIA A100-SXM4-80GB",
                "Hostname": node}
        devices = [{**base, "GPU_I_PROFILE": p, "GPU_I_ID": str(1 + k)} for k, p in enumerate(profiles)] or [base]
        for labels in devices:
            out += [Series("DCGM_FI_DEV_FB_USED", labels, ts, np.zeros(ts.size)),
                    Series("DCGM_FI_DEV_FB_FREE", labels, ts, np.full(ts.size, 40_192.0 if profiles else 81_920.0))]
    return out


def _ksm_series(pods: tuple[Pod, ...], ts: np.ndarray) -> list[Series]:
    one = np.ones(ts.size)
    out = []
    for pod in pods:
        if pod.owner is None:
            continue
        kind, name = pod.owner
        out.append(Series("kube_pod_owner", {"namespace": pod.ns, "pod": pod.name, "owner_kind": kind,
                                             "owner_name": name, "owner_is_controller": "true"}, ts, one))
        for res, amount in pod.requests.items():
            out.append(Series("kube_pod_container_resource_requests",
                              {"namespace": pod.ns, "pod": pod.name, "container": "main", "resource": res,
                               "unit": "integer"}, ts, np.full(ts.size, amount)))
        out.append(Series("kube_pod_container_resource_requests",  # a CPU request: must be ignored
                          {"namespace": pod.ns, "pod": pod.name, "container": "main", "resource": "cpu",
                           "unit": "core"}, ts, np.full(ts.size, 4.0)))
    for (ns, rs), (kind, name) in RS_OWNERS.items():
        out.append(Series("kube_replicaset_owner", {"namespace": ns, "replicaset": rs, "owner_kind": kind,
                                                    "owner_name": name}, ts, one))
    for (ns, job), (kind, name) in JOB_OWNERS.items():
        out.append(Series("kube_job_owner", {"namespace": ns, "job_name": job, "owner_kind": kind,
                                             "owner_name": name}, ts, one))
    return out


def cluster_series(end_s: int, pods: tuple[Pod, ...] = PODS, hours: float = HOURS) -> list[Series]:
    """Every raw series of the cluster over ``hours`` ending at ``end_s``."""
    ts = timestamps(end_s, hours)
    out: list[Series] = []
    for i, pod in enumerate(pods):
        first = int(pod.from_frac * ts.size)
        out += _pod_series(pod, i, ts[first:])
    return out + _free_series(ts) + _ksm_series(pods, ts)


def find(series: list[Series], name: str, pod: str, **labels: str) -> Series:
    """The one raw series of ``name`` for ``pod`` (and labels), for computing expectations."""
    hits = [s for s in series if s.name == name and s.labels.get("pod") == pod
            and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(hits) == 1, f"{len(hits)} series {name} for {pod}"
    return hits[0]


@dataclass(frozen=True)
class Cluster:
    """A running Prometheus over the cluster's history: its URL, the window's end, the raw series."""

    url: str
    end: datetime
    series: list[Series]
    tsdb: Path


@contextmanager
def serve(workdir: Path) -> Iterator[Cluster]:
    """Build the TSDB (ending at the last whole hour, inside retention) and serve it."""
    end_s = int(time.time()) // 3600 * 3600
    series = cluster_series(end_s)
    write_openmetrics(series, workdir / "data.om", TYPES)
    build_tsdb(workdir / "data.om", workdir / "tsdb")
    with PromServer.from_tsdb(workdir / "tsdb") as prom:
        yield Cluster(prom.url, datetime.fromtimestamp(end_s, UTC), series, workdir / "tsdb")


def report_json(c: Cluster, *extra: str) -> dict[str, Any]:
    """``rightsizer report -o json`` over the cluster's 2 days, without Kubernetes, as a dict (``extra``: flags)."""
    from recommender.cli.main import main

    res = CliRunner().invoke(main, ["report", "--prometheus-url", c.url, "--no-kubernetes", "--history", "2d",
                                    "--min-history", "12h", "--end", c.end.isoformat(), "-o", "json", *extra],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    doc: dict[str, Any] = json.loads(res.stdout)
    return doc

