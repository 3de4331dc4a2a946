"""The Prometheus collector against a real Prometheus over TSDB blocks built with promtool.

Expectations are computed from the raw series written into the TSDB (tests/promcluster.py), with the
query semantics spelled out: at each grid time t the window holds the samples at t-90 s and t-30 s.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from collectors.pods import PodUsage
from collectors.prometheus import PromClient, QueryStats, collect_pod_usage, window_for
from collectors.prometheus.cache import UsageCache
from collectors.prometheus.cachefile import OVERLAP_STEPS
from collectors.prometheus.queries import Scope, census_selectors
from recommender.core import usage as m
from recommender.core.errors import PrometheusError
from recommender.core.progress import RecordingProgress
from recommender.core.settings import Settings
from recommender.core.settings_scaling import ScalingSettings
from recommender.core.settings_sources import PrometheusSettings
from tests import promcluster as pc
from tests.promcluster import Cluster
from tests.promfixture import PromServer, Series, prometheus_binaries
from tests.servefixture import make_pki

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(prometheus_binaries() is None,
                       reason="Debian's prometheus/promtool not installed (apt-get install -y prometheus)"),
]
WINDOW_S = 120  # 48 h / 2,016 target points → step 120 s; the window is one step


class LoggingClient(PromClient):
    """A real client that also remembers every PromQL it sent, and every series listing it asked for."""

    def __init__(self, p: PrometheusSettings) -> None:
        super().__init__(p, QueryStats())
        self.ranges: list[tuple[str, float, float, float]] = []  # (PromQL, start, end, step) of each query
        self.lookups: list[tuple[str, float, float]] = []  # (selector, start, end) of each series listing

    @property
    def sent(self) -> list[str]:
        return [q for q, *_ in self.ranges]

    def query_range(self, promql: str, start_s: float, end_s: float, step_s: float) -> list:  # type: ignore[type-arg]
        self.ranges.append((promql, start_s, end_s, step_s))
        return super().query_range(promql, start_s, end_s, step_s)

    def series(self, match: str, start_s: float, end_s: float) -> list:  # type: ignore[type-arg]
        self.lookups.append((match, start_s, end_s))
        return super().series(match, start_s, end_s)


def settings(url: str, **prom: object) -> Settings:
    return Settings(history_s=pc.HOURS * 3600, prometheus=PrometheusSettings(**{"url": url, "retries": 0, **prom}))  # type: ignore[arg-type]


def collect(c: Cluster, s: Settings | None = None, client: PromClient | None = None) -> PodUsage:
    s = s or settings(c.url)
    return collect_pod_usage(s, c.end - timedelta(hours=pc.HOURS), c.end, RecordingProgress(), client=client)


@pytest.fixture(scope="module")
def usage(cluster: Cluster) -> PodUsage:
    return collect(cluster)


def expected(raw: Series, index: pd.DatetimeIndex, fn: str) -> np.ndarray:
    """``max``/``avg`` over the samples in (t - 120 s, t] at each grid time t, or ``deriv`` (the least-squares
    slope of its two samples); NaN where there are none (for ``deriv``: fewer than two)."""
    grid = index.as_unit("s").asi8
    ts = raw.timestamps_s
    out = np.full(grid.size, np.nan)
    for i, t in enumerate(grid):
        inside = (ts > t - WINDOW_S) & (ts <= t)
        vals = raw.values[inside]
        if fn == "deriv":
            if vals.size == 2:
                out[i] = (vals[1] - vals[0]) / float(np.diff(ts[inside])[0])
        elif vals.size:
            out[i] = vals.max() if fn == "max" else vals.mean()
    return out


def column(u: PodUsage, metric: str, pod: pc.Pod) -> pd.Series:
    return u.series[metric][pod.key]


POD = {p.name.split("-")[0] + ("" if "q8w7z" not in p.name else "-2"): p for p in pc.PODS}


def test_grid_is_aligned_and_covers_the_window(cluster: Cluster, usage: PodUsage) -> None:
    idx = usage.series[m.FB_USED_MIB].index
    # 48 h at 120 s = 1,440 points, the last one at the window's end (a whole hour, a multiple of 120 s)
    assert len(idx) == 1440 and idx[-1] == pd.Timestamp(cluster.end) and (idx.as_unit("s").asi8 % 120 == 0).all()
    assert window_for(cluster.end - timedelta(hours=pc.HOURS), cluster.end, PrometheusSettings()).grid.n == 1440


@pytest.mark.parametrize("name", ["llama", "llama-2", "embedder", "nightly", "debug"])
def test_framebuffer_is_the_max_within_each_step(cluster: Cluster, usage: PodUsage, name: str) -> None:
    pod = POD[name]
    got = column(usage, m.FB_USED_MIB, pod)
    want = expected(pc.find(cluster.series, "DCGM_FI_DEV_FB_USED", pod.name), got.index, "max")
    np.testing.assert_array_equal(got.to_numpy(), want)


def test_late_pod_has_no_data_before_it_started(usage: PodUsage) -> None:
    got = column(usage, m.FB_USED_MIB, POD["nightly"])
    first = int(0.4 * 2880) // 2  # from_frac 0.4 of 2,880 scrapes; two scrapes per step
    assert got.iloc[: first - 1].isna().all() and got.iloc[first + 1:].notna().all()


def test_engine_activity_is_the_mean_within_each_step_and_nan_stays_nan(cluster: Cluster, usage: PodUsage) -> None:
    pod = POD["llama"]  # every 17th sample is NaN; it also exports GPU_UTIL, which must not be used
    got = column(usage, m.GR_ENGINE_ACTIVE_FRAC, pod)
    want = expected(pc.find(cluster.series, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", pod.name), got.index, "avg")
    assert np.isnan(want).sum() > 50
    np.testing.assert_allclose(got.to_numpy(), want, rtol=1e-9)


def test_gpu_util_is_the_fallback_in_percent(cluster: Cluster, usage: PodUsage) -> None:
    pod = POD["util"]
    got = column(usage, m.GR_ENGINE_ACTIVE_FRAC, pod)
    want = expected(pc.find(cluster.series, "DCGM_FI_DEV_GPU_UTIL", pod.name), got.index, "avg") / 100
    np.testing.assert_allclose(got.to_numpy(), want, rtol=1e-9)
    assert POD["no"].key not in usage.series[m.GR_ENGINE_ACTIVE_FRAC].columns


@pytest.mark.parametrize(("name", "raw"), [("llama", "vllm:kv_cache_usage_perc"),
                                           ("old", "vllm:gpu_cache_usage_perc")])
def test_kv_usage_under_new_and_old_vllm_names(cluster: Cluster, usage: PodUsage, name: str, raw: str) -> None:
    pod = POD[name]
    got = column(usage, m.KV_USAGE_FRAC, pod)
    np.testing.assert_array_equal(got.to_numpy(), expected(pc.find(cluster.series, raw, pod.name), got.index, "max"))


def test_queue_gauges_are_means(cluster: Cluster, usage: PodUsage) -> None:
    pod = POD["llama-2"]
    for metric, raw in ((m.REQUESTS_RUNNING, "vllm:num_requests_running"),
                        (m.REQUESTS_WAITING, "vllm:num_requests_waiting")):
        got = column(usage, metric, pod)
        np.testing.assert_allclose(got.to_numpy(), expected(pc.find(cluster.series, raw, pod.name), got.index, "avg"))


FINISHED_PER_S = {"llama": 2.0, "llama-2": 1.5}  # the fixture's request counters grow linearly at these rates


def test_counter_rates(usage: PodUsage) -> None:
    # counters grow linearly, so rate() over two samples 60 s apart is the slope exactly
    for name, per_s in FINISHED_PER_S.items():
        pod = POD[name]
        for metric, factor in ((m.PROMPT_TOKENS_RATE, 500), (m.GENERATION_TOKENS_RATE, 200)):
            got = column(usage, metric, pod).iloc[5:]
            np.testing.assert_allclose(got.to_numpy(), per_s * factor, rtol=1e-9)
        assert (column(usage, m.PREEMPTIONS_RATE, pod).dropna() == 0).all()


@pytest.mark.parametrize("name", sorted(FINISHED_PER_S))
def test_request_rate_is_arrivals(cluster: Cluster, usage: PodUsage, name: str) -> None:
    # requests arriving = finished (2.0 or 1.5/s) + growth of running + growth of waiting, at 0 at the least
    pod, per_s = POD[name], FINISHED_PER_S[name]
    got = column(usage, m.REQUEST_RATE, pod).iloc[5:]
    growth = sum(expected(pc.find(cluster.series, raw, pod.name), got.index, "deriv")
                 for raw in ("vllm:num_requests_running", "vllm:num_requests_waiting"))
    assert (np.abs(growth) > 0.01).sum() > 100  # the gauges move: the finished rate alone would not pass
    np.testing.assert_allclose(got.to_numpy(), np.maximum(per_s + growth, 0), rtol=1e-9, atol=1e-9)


def test_ttft_p95_from_the_histogram(usage: PodUsage) -> None:
    # cumulative shares 0.50, 0.80, 0.97, 0.99, 1.0 at le 0.1, 0.25, 0.5, 1, +Inf:
    # rank 0.95 falls in (0.25, 0.5]: 0.25 + 0.25 x (0.95 - 0.80) / (0.97 - 0.80) = 0.470588...
    got = column(usage, m.TTFT_P95_S, POD["llama"]).iloc[5:]
    np.testing.assert_allclose(got.to_numpy(), 0.25 + 0.25 * 0.15 / 0.17, rtol=1e-6)


@pytest.mark.parametrize(("objective_s", "share"), [
    (1.0, 0.01),  # a bucket bound ("1.0" as prometheus_client writes it): the 1% above it
    (0.3, 1 - (0.80 * 0.8 + 0.97 * 0.2)),  # 0.2 of the way from 0.25 to 0.5, read as histogram_quantile reads it
    (2.0, None),  # vLLM's 2.5 s bound is not in this fixture: no rate rather than a wrong one
])
def test_requests_over_the_ttft_objective_from_the_histogram(cluster: Cluster, objective_s: float,
                                                             share: float | None) -> None:
    s = Settings(history_s=pc.HOURS * 3600, prometheus=PrometheusSettings(url=cluster.url, retries=0),
                 scaling=ScalingSettings(ttft_objective_s=objective_s))
    frame = collect(cluster, s).series.get(m.TTFT_OVER_OBJECTIVE_RATE)
    if share is None:
        assert frame is None or frame.isna().all().all()
        return
    assert frame is not None
    got = frame[POD["llama"].key].iloc[5:]  # the bucket counters grow with the 2.0 requests/s finished
    np.testing.assert_allclose(got.to_numpy(), FINISHED_PER_S["llama"] * share, rtol=1e-6)


def test_device_memory_total_only_where_framebuffer_has_data(usage: PodUsage) -> None:
    total, used = usage.series[m.FB_TOTAL_MIB], usage.series[m.FB_USED_MIB]
    pod = POD["embedder"]
    assert (total[pod.key].dropna() == 40192).all()
    assert (total[POD["nightly"].key].notna() == used[POD["nightly"].key].notna()).all()


def test_devices_mig_profiles_products_and_sharing(usage: PodUsage) -> None:
    dev = {f"{d.namespace}/{d.pod}": d for d in usage.devices}
    emb, tiny = dev[POD["embedder"].key], dev[POD["tiny"].key]
    assert (emb.mig_profile, emb.device_memory_mib, emb.device_count, emb.shared_with) == ("3g.40gb", 40192, 1, 1)
    assert (tiny.mig_profile, tiny.shared_with) == ("1g.10gb", 1)  # same GPU, another MIG instance
    assert dev[POD["ts"].key].shared_with == 2  # ts-a and ts-b on GPU-t1 at the same time
    assert dev[POD["old"].key].gpu_product == "NVIDIA H100 80GB HBM3"
    assert dev[POD["llama"].key].shared_with == 1 and dev[POD["llama"].key].mig_profile is None


def test_owners_from_kube_state_metrics(usage: PodUsage) -> None:
    owners = {f"{o.namespace}/{o.pod}": (o.kind, o.name) for o in usage.owners}
    assert owners[POD["llama"].key] == ("Deployment", "llama-chat")
    assert owners[POD["nightly"].key] == ("CronJob", "nightly-eval")
    assert owners[POD["debug"].key] == ("Pod", "debug-shell")
    assert all(not o.inferred for o in usage.owners)


def test_requests_get_their_spec_names_back(usage: PodUsage) -> None:
    req = {f"{r.namespace}/{r.pod}": dict(r.resources) for r in usage.requests}
    assert req[POD["embedder"].key] == {"nvidia.com/mig-3g.40gb": 1.0}
    assert req[POD["ts"].key] == {"nvidia.com/gpu.shared": 1.0}
    assert req[POD["llama"].key] == {"nvidia.com/gpu": 1.0}  # the CPU request is not a GPU resource


def test_vllm_cache_config(usage: PodUsage) -> None:
    info = {f"{v.namespace}/{v.pod}": v for v in usage.vllm}
    llama = info[POD["llama"].key]
    assert llama.kv_capacity_tokens == 27000 * 16 and llama.gpu_memory_utilization == 0.9
    assert llama.model_name == "meta-llama/Meta-Llama-3-8B-Instruct"
    assert POD["embedder"].key not in info


def test_each_pod_is_placed_on_the_node_dcgm_names(usage: PodUsage) -> None:
    assert {d.pod: d.nodes for d in usage.devices} == {p.name: (pc.GPU_AT[p.uuid][0],) for p in pc.PODS}


def test_gpu_nodes_list_every_gpu_with_its_mig_devices_pods_or_not(usage: PodUsage) -> None:
    want: dict[str, dict[int, Counter[str]]] = defaultdict(lambda: defaultdict(Counter))
    for pod in pc.PODS:
        node, index = pc.GPU_AT[pod.uuid]
        want[node][int(index)].update([pod.mig_profile] if pod.mig_profile else [])
    for node, index, profiles in pc.FREE_GPUS:
        want[node][int(index)].update(profiles)
    got = {n.name: [dict(gpu) for gpu in n.mig_devices] for n in usage.gpu_nodes}
    assert got == {node: [dict(gpus[i]) for i in range(max(gpus) + 1)] for node, gpus in want.items()}
    assert got["a100-0"][4] == {"3g.40gb": 2}  # two free instances on one GPU, counted once each
    products = {n.name: n.gpu_product for n in usage.gpu_nodes}
    assert products == {pc.GPU_AT[p.uuid][0]: p.product for p in pc.PODS}


def test_gpu_nodes_only_without_the_kubernetes_api(cluster: Cluster) -> None:
    s = settings(cluster.url)
    u = collect_pod_usage(s, cluster.end - timedelta(seconds=s.history_s), cluster.end, RecordingProgress(),
                          with_ksm=False)
    assert u.gpu_nodes == () and u.devices


def test_no_missing_family_warnings_when_all_exist(usage: PodUsage) -> None:
    assert usage.warnings == ()


def test_queries_are_batched_per_family_never_per_pod(cluster: Cluster) -> None:
    client = LoggingClient(PrometheusSettings(url=cluster.url, retries=0))
    collect(cluster, client=client)
    pods = {p.name for p in pc.PODS}
    assert not [q for q in client.sent if any(p in q for p in pods)]
    (nodes,) = [q for q in client.sent if "GPU_I_PROFILE, cluster)" in q]  # the GPU nodes: one query, every GPU
    usage_queries = [q for q in client.sent if ("_over_time" in q or "rate(" in q) and q != nodes]
    assert all("by (namespace, pod" in q for q in usage_queries)
    # the census lists raw and recorded series from the server's index (series lookups: no query counts)
    assert not [q for q in client.sent if q.startswith("count by (__name__)")]
    # one query per present family (11: no SM_ACTIVE, no power here) + 3 inventory + 4 kube-state-metrics
    # + the GPU nodes, plus the connection check and the census' series lookups
    assert len(client.sent) == 11 + 3 + 4 + 1 and client.stats.queries == len(client.sent) + 1 + len(client.lookups)
    assert client.stats.max_points_per_series <= 1440


def test_namespace_selection_reaches_the_queries(cluster: Cluster) -> None:
    s = Settings(namespaces=("mig",), history_s=pc.HOURS * 3600, prometheus=PrometheusSettings(url=cluster.url))
    u = collect(cluster, s)
    assert {c.split("/")[0] for c in u.series[m.FB_USED_MIB].columns} == {"mig"}
    assert m.KV_USAGE_FRAC not in u.series  # no vLLM in that namespace: that family is not even queried
    assert any("vllm:kv_cache_usage_perc" in w for w in u.warnings)


def test_chunked_queries_give_the_same_series(cluster: Cluster, usage: PodUsage) -> None:
    s = settings(cluster.url, max_points_per_series=100)
    client = LoggingClient(s.prometheus)
    chunked = collect(cluster, s, client)
    assert client.stats.max_points_per_series <= 100
    assert sum("DCGM_FI_DEV_FB_USED" in q and "max_over_time" in q for q in client.sent) == 15  # ceil(1440/100)
    for metric, frame in usage.series.items():
        pd.testing.assert_frame_equal(chunked.series[metric], frame, check_freq=False)


def test_server_limits_split_queries_until_they_pass(cluster: Cluster, usage: PodUsage) -> None:
    with PromServer.from_tsdb(cluster.tsdb, extra_args=["--query.max-samples=20000"]) as strict:
        client = PromClient(PrometheusSettings(url=strict.url, retries=0), QueryStats())
        split = collect(cluster, settings(strict.url), client)
    assert client.stats.splits > 0
    pd.testing.assert_frame_equal(split.series[m.FB_USED_MIB], usage.series[m.FB_USED_MIB], check_freq=False)


def test_a_limit_no_split_can_meet_is_one_clear_error(cluster: Cluster) -> None:
    with PromServer.from_tsdb(cluster.tsdb, extra_args=["--query.max-samples=5"]) as strict, \
            pytest.raises(PrometheusError) as err:
        collect(cluster, settings(strict.url))
    msg = str(err.value)
    assert "too large" in msg and "--history" in msg and "\n" not in msg


def test_dead_prometheus_is_one_line(cluster: Cluster) -> None:
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(PrometheusError, match=r"cannot reach Prometheus at http://127\.0\.0\.1:\d+ \(connection "
                                              r"refused\) \(after 2 attempts\)"):
        collect(cluster, settings(f"http://127.0.0.1:{port}", retries=1))


@pytest.mark.parametrize(("fails", "retries"), [(0, 2), (1, 2), (2, 2), (3, 2), (5, 5), (1, 0)])
def test_what_is_worth_retrying_is_retried_with_backoff(monkeypatch: pytest.MonkeyPatch, fails: int,
                                                       retries: int) -> None:
    """A connection failure or timeout is tried ``retries`` more times, 0.5 s doubling (at most 8 s) between tries,
    each retry counted; after the last it is one line naming the attempts. A bad answer is not retried."""
    import requests

    from collectors.prometheus import client as module

    slept: list[float] = []
    monkeypatch.setattr(module.time, "sleep", slept.append)
    c = PromClient(PrometheusSettings(url="http://127.0.0.1:9", retries=retries), QueryStats())
    tries = Counter[str]()

    def flaky() -> list[dict[str, object]]:
        tries["n"] += 1
        if tries["n"] <= fails:
            raise (requests.exceptions.ConnectionError if tries["n"] % 2 else requests.exceptions.Timeout)("down")
        return [{"metric": {}, "value": [0, "1"]}]

    if fails <= retries:
        assert c._call(flaky, "q") == [{"metric": {}, "value": [0, "1"]}]
        assert c.stats.retries == fails and c.stats.queries == 1
    else:
        with pytest.raises(PrometheusError, match=rf"\(after {retries + 1} attempts\)$"):
            c._call(flaky, "q")
        assert c.stats.retries == retries
    assert tries["n"] == min(fails, retries) + 1
    assert slept == [min(8.0, 0.5 * 2 ** k) for k in range(min(fails, retries))]
    tries.clear()

    def bad() -> list[dict[str, object]]:
        tries["n"] += 1
        raise ValueError("not json")

    with pytest.raises(PrometheusError, match="did not answer like a Prometheus API"):
        c._call(bad, "q")
    assert tries["n"] == 1


def test_a_query_that_answers_first_time_does_not_import_the_retry_library() -> None:
    """Tenacity (and the asyncio it imports) is loaded only once a try has failed."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from collectors.prometheus.client import PromClient, QueryStats\n"
            "from recommender.core.settings_sources import PrometheusSettings\n"
            "c = PromClient(PrometheusSettings(url='http://127.0.0.1:9'), QueryStats())\n"
            "assert c._call(lambda: [], 'q') == []\n"
            "print('tenacity' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_a_url_that_is_not_the_api_base(cluster: Cluster) -> None:
    with pytest.raises(PrometheusError, match="no query API"):
        collect(cluster, settings(cluster.url + "/nothing/here"))


# bcrypt (cost 4) of the password "rightsizer-test", as in test_promfixture; the web config wants a hash
WEB_CONFIG = "basic_auth_users:\n  rightsizer: $2b$04$DXE3Ll9ZouRBjvjRyOceOe6RO8uhy.4CZHWSnjb6CvpFfXSC/a8P6\n"


def test_basic_auth_right_and_wrong(cluster: Cluster) -> None:
    with PromServer.from_tsdb(cluster.tsdb, web_config=WEB_CONFIG) as guarded:
        with pytest.raises(PrometheusError, match=r"refused our credentials \(HTTP 401\)"):
            collect(cluster, settings(guarded.url, username="rightsizer", password="wrong"))
        ok = collect(cluster, settings(guarded.url, username="rightsizer", password="rightsizer-test"))
    assert POD["llama"].key in ok.series[m.FB_USED_MIB].columns


def test_mutual_tls_with_a_ca_bundle_in_the_environment(cluster: Cluster, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Prometheus serving TLS that requires a client certificate; our CA file must win over REQUESTS_CA_BUNDLE,
    which requests would otherwise prefer to a session's CA (range queries bypass the library's request)."""
    pki, other = make_pki(_mkdir(tmp_path / "pki")), make_pki(_mkdir(tmp_path / "other"))
    web = (f"tls_server_config:\n  cert_file: {pki.server_cert}\n  key_file: {pki.server_key}\n"
           f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki.ca}\n")
    tls = {"ca_file": str(pki.ca), "client_cert": str(pki.client_cert), "client_key": str(pki.client_key)}
    with PromServer.from_tsdb(cluster.tsdb, web_config=web) as prom:
        assert prom.url.startswith("https://")
        with pytest.raises(PrometheusError) as err:  # no client certificate
            collect(cluster, settings(prom.url, ca_file=str(pki.ca)))
        assert "\n" not in str(err.value)
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(other.ca))
        client = LoggingClient(settings(prom.url, **tls).prometheus)
        ok = collect(cluster, settings(prom.url, **tls), client)
    assert client.sent and POD["llama"].key in ok.series[m.FB_USED_MIB].columns


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


def _window(cluster: Cluster, hours_before_end: float) -> tuple[datetime, datetime]:
    end = cluster.end - timedelta(hours=hours_before_end)
    return end - timedelta(hours=pc.HOURS), end


def _without_once(promql: str) -> str:
    """``promql`` without its ``max without (<target labels>) (...)`` wrappers (``Scope.once``)."""
    while (at := promql.find("max without (")) >= 0:
        start = promql.index("(", promql.index(")", at)) + 1
        depth, end = 1, start
        while depth:
            depth += {"(": 1, ")": -1}.get(promql[end], 0)
            end += 1
        promql = promql[:at] + promql[start:end - 1] + promql[end:]
    return promql


def test_a_cache_reads_only_the_new_steps_and_gives_what_a_full_collection_gives(cluster: Cluster) -> None:
    s = settings(cluster.url)
    cache = UsageCache()
    collect_pod_usage(s, *_window(cluster, 3), RecordingProgress(), client=LoggingClient(s.prometheus), cache=cache)
    again = LoggingClient(s.prometheus)
    joined = collect_pod_usage(s, *_window(cluster, 0), RecordingProgress(), client=again, cache=cache)
    whole = LoggingClient(s.prometheus)
    full = collect_pod_usage(s, *_window(cluster, 0), RecordingProgress(), client=whole)
    assert set(joined.series) == set(full.series)
    for metric, frame in full.series.items():
        pd.testing.assert_frame_equal(joined.series[metric], frame, check_freq=False)
    assert (joined.devices, joined.vllm, joined.owners, joined.requests, joined.gpu_nodes) == \
        (full.devices, full.vllm, full.owners, full.requests, full.gpu_nodes)
    # the same queries (usage, inventory), each over 3 h of new steps and the overlap, not 48 h; the census of the
    # new steps counts the raw and the recorded series at each of them (the full collection lists them from the
    # index instead)
    raw_census = "count by (__name__) (" + census_selectors(Scope.of((), s.prometheus))[0] + ")"
    counted = {x for x in again.sent if x.startswith("count by (__name__)")}
    # (a warm read takes each series once before summing, as nothing listed says none was scraped twice meanwhile)
    assert {_without_once(q) for q in set(again.sent) - counted} == {_without_once(q) for q in whole.sent}
    assert raw_census in counted and len(counted) == 2
    # the census of recorded series (none here) at its own coarse step: a few instants, 6 h back and to the end,
    # a query each (one range query over them loaded every sample between)
    instants = sorted((a, b) for q, a, b, _ in again.ranges if "namespace_pod:" in q)
    assert all(a == b for a, b in instants) and 2 <= len(instants) <= 7
    assert instants[-1][0] == max(b for _, _, b, _ in whole.ranges) and instants[-1][0] - instants[0][0] >= 6 * 3600
    assert all(round((b - a) / WINDOW_S) + 1 <= 3 * 3600 / WINDOW_S + OVERLAP_STEPS for q, a, b, _ in again.ranges
               if "namespace_pod:" not in q)


@pytest.mark.parametrize("change", ["namespaces", "no overlap", "refresh due"])
def test_a_cache_that_cannot_serve_the_window_is_read_afresh(cluster: Cluster, change: str) -> None:
    s = settings(cluster.url)
    cache = UsageCache(refresh_s=3600.0 if change == "refresh due" else 86_400.0)  # 3 h between the two
    before = {"namespaces": 0.0, "no overlap": pc.HOURS + 1, "refresh due": 3.0}[change]
    collect_pod_usage(s, *_window(cluster, before), RecordingProgress(), client=LoggingClient(s.prometheus),
                      cache=cache)
    other = Settings(namespaces=("mig",), history_s=s.history_s, prometheus=s.prometheus) \
        if change == "namespaces" else s
    client = LoggingClient(other.prometheus)
    got = collect_pod_usage(other, *_window(cluster, 0), RecordingProgress(), client=client, cache=cache)
    steps = max(round((b - a) / st) + 1 for _, a, b, st in client.ranges if st == WINDOW_S)
    assert steps > 3 * 3600 / WINDOW_S  # the whole window again (in chunks as large as the limits allow)
    want = collect_pod_usage(other, *_window(cluster, 0), RecordingProgress(), client=LoggingClient(other.prometheus))
    pd.testing.assert_frame_equal(got.series[m.FB_USED_MIB], want.series[m.FB_USED_MIB], check_freq=False)


class FailingClient(LoggingClient):
    """A real client whose answers stop after ``answers`` range queries (Prometheus going away mid-cycle)."""

    def __init__(self, p: PrometheusSettings, answers: int) -> None:
        super().__init__(p)
        self.answers = answers

    def query_range(self, promql: str, start_s: float, end_s: float, step_s: float) -> list:  # type: ignore[type-arg]
        if len(self.ranges) >= self.answers:
            raise PrometheusError("Prometheus went away")
        return super().query_range(promql, start_s, end_s, step_s)


def test_a_collection_that_fails_midway_leaves_a_cache_that_reads_everything_next(cluster: Cluster) -> None:
    s = settings(cluster.url, max_workers=1)
    cache = UsageCache()
    collect_pod_usage(s, *_window(cluster, 6), RecordingProgress(), client=LoggingClient(s.prometheus), cache=cache)
    with pytest.raises(PrometheusError, match="went away"):
        collect_pod_usage(s, *_window(cluster, 3), RecordingProgress(), client=FailingClient(s.prometheus, 12),
                          cache=cache)
    assert cache.key is None  # it may hold part of the failed collection
    client = LoggingClient(s.prometheus)
    got = collect_pod_usage(s, *_window(cluster, 0), RecordingProgress(), client=client, cache=cache)
    first = window_for(*_window(cluster, 0), s.prometheus).grid.start_s
    assert min(a for _, a, _, st in client.ranges if st == WINDOW_S) == first  # from the window's first step
    want = collect_pod_usage(s, *_window(cluster, 0), RecordingProgress(), client=LoggingClient(s.prometheus))
    assert got.devices == want.devices
    pd.testing.assert_frame_equal(got.series[m.REQUEST_RATE], want.series[m.REQUEST_RATE], check_freq=False)


def test_a_cache_holds_one_window_however_many_cycles_join_it(cluster: Cluster) -> None:
    s = settings(cluster.url)
    cache = UsageCache()
    sizes, before = [], None
    for hours_before in (6.0, 4.0, 2.0, 0.0):
        collect_pod_usage(s, *_window(cluster, hours_before), RecordingProgress(),
                          client=LoggingClient(s.prometheus), cache=cache)
        assert cache.devices is not None
        sizes.append({k: len(v) for k, v in cache.inventory.items()})
        if before is not None:  # a device's instants with one pod: only those this cycle read
            fresh = before - (OVERLAP_STEPS - 1) * WINDOW_S
            assert all(len(pods) > 1 or t >= fresh for (_, t), pods in cache.devices.on_device.items())
            assert any(len(pods) > 1 and t < fresh for (_, t), pods in cache.devices.on_device.items())
        before = cache.last_s
    assert sizes[1:] == sizes[:1] * 3  # one newest entry per series, not one per cycle


def test_gpu_nodes_are_read_as_they_are_at_the_windows_end(tmp_path: Path, cluster: Cluster) -> None:
    """A GPU node removed half way through the window, and a free GPU's MIG layout changed then (seven 1g.10gb
    before, the cluster's two 3g.40gb after): the GPU nodes read as the cluster's without them."""
    from tests.promfixture import tsdb_of

    end_s = int(cluster.end.timestamp())
    ts = pc.timestamps(end_s)
    half = ts[: ts.size // 2]
    node, index, _ = pc.FREE_GPUS[1]
    earlier = [Series("DCGM_FI_DEV_FB_FREE", {"gpu": index, "UUID": f"GPU-free-{node}-{index}", "Hostname": node,
                                              "modelName": "NVIDIA A100-SXM4-80GB", "GPU_I_PROFILE": "1g.10gb",
                                              "GPU_I_ID": str(7 + k)}, half, np.full(half.size, 9_728.0))
               for k in range(7)]
    earlier.append(Series("DCGM_FI_DEV_FB_FREE", {"gpu": "0", "UUID": "GPU-gone", "Hostname": "a100-gone",
                                                  "modelName": "NVIDIA A100-SXM4-80GB"}, half,
                          np.full(half.size, 81_920.0)))
    with PromServer.from_tsdb(tsdb_of([*pc.cluster_series(end_s), *earlier], tmp_path / "t", pc.TYPES)) as prom:
        got = collect(Cluster(prom.url, cluster.end, [], tmp_path / "t"))
    assert got.gpu_nodes == collect(cluster).gpu_nodes
