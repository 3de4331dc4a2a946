"""Pure parts of the Prometheus source: steps, chunk sizes, selectors, answer parsing, error lines."""

from __future__ import annotations

import contextlib
import http.server
import itertools
import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from collectors.prometheus import PromClient, PrometheusLimitError, chunks, devices, parse, queries
from collectors.prometheus.cache import join_usage
from collectors.prometheus.chunks import Chunk
from collectors.prometheus.queries import Scope
from collectors.prometheus.window import window_for
from recommender.core.errors import PrometheusError
from recommender.core.settings_sources import PrometheusSettings
from tests.promfixture import PromServer, loopback_http, prometheus_binaries

P = PrometheusSettings()


@pytest.mark.parametrize(("history_s", "step_s"), [
    (14 * 86_400, 600.0),  # 1,209,600 / 2,016 = 600 exactly
    (2 * 86_400, 120.0),  # 172,800 / 2,016 = 85.7 → whole minutes: 120
    (3600, 60.0),  # 1.8 s → the 60 s floor (one scrape)
    (30 * 86_400, 1320.0),  # 2,592,000 / 2,016 = 1,285.7 → 22 min
])
def test_step_for(history_s: float, step_s: float) -> None:
    assert chunks.step_for(history_s, P) == step_s


@pytest.mark.parametrize(("series", "step_s", "limits", "steps"), [
    # 2,000 series at 600 s, scrape 60 s: samples 20 M / (2,000 x 10) = 1,000; points 500 k / 2,000 = 250
    (2_000, 600.0, {}, 250),
    # 10 series: samples 20 M / 100 = 200 k, points 50 k; the 11,000 points/series cap wins
    (10, 600.0, {}, 11_000),
    # 100 series at 60 s with 1 M samples held: (1 M - 100) / (3 x 100) = 3,333 steps
    (100, 60.0, {"max_samples_per_query": 1_000_000, "max_points_per_query": 10**7}, 3_333),
    # more series than points allowed in one answer: still one step per query, never zero
    (10**7, 600.0, {}, 1),
])
def test_steps_per_chunk(series: int, step_s: float, limits: dict[str, int], steps: int) -> None:
    p = PrometheusSettings(**{"query_memory_mib": 10**4, **limits})  # type: ignore[arg-type]
    assert chunks.steps_per_chunk(series, step_s, p) == steps


@pytest.mark.parametrize(("mib", "series", "touched", "step_s", "window_s", "steps"), [
    (8, 2_000, None, 600.0, 600, 54),  # (349,525 - 2,000 x 10) / (3 x 2,000) = 54.9
    (8, 200, None, 600.0, 600, 579),  # the same budget, a tenth of the fleet: ten times the steps
    (8, 100, None, 60.0, 120, 1_164),  # a window of two scrapes: (349,525 - 100 x 2) / (3 x 100)
    (8, 2_000, 6_000, 600.0, 600, 20),  # reading 3 series a pod: (349,525 - 60,000) / (12,000 + 2,000)
    (0.25, 10**6, None, 600.0, 600, 1),  # more than one step holds: one step a query, never zero
])
def test_the_memory_budget_bounds_the_samples_a_query_holds(mib: float, series: int, touched: int | None,
                                                             step_s: float, window_s: int, steps: int) -> None:
    p = PrometheusSettings(query_memory_mib=mib, max_points_per_query=10**7)  # so that the budget binds
    assert chunks.budget_samples(p) == int(mib * 2**20 / 24)
    per = chunks.steps_per_chunk(series, step_s, p, touched, window_s=window_s)
    assert per == steps
    if steps > 1:  # the steps it allows fit the budget and one more would not
        assert chunks.held_samples(series, per, window_s, 60, touched) <= chunks.budget_samples(p)
        assert chunks.held_samples(series, per + 1, window_s, 60, touched) > chunks.budget_samples(p)


def test_a_recorded_read_holds_its_tiles_over_the_whole_range() -> None:
    # 2,000 pods read in 2 min tiles at step 600 s: the subquery holds 5 tiles a step and the answer 1
    p = PrometheusSettings()
    per = chunks.steps_per_chunk(2_000, 600.0, p, window_s=600, sample_s=120)
    assert per == 29  # 349,525 / (2,000 x 6)
    assert chunks.held_samples(2_000, per, 600, 120, tiles=True) <= chunks.budget_samples(p) \
        < chunks.held_samples(2_000, per + 1, 600, 120, tiles=True)


def test_a_query_reading_more_series_than_it_answers_is_cut_by_the_samples_it_reads() -> None:
    # the request rate answers one series per pod but reads three (the counter, two gauges): 2,000 pods at
    # 600 s hold (20 M - 6,000 x 10) / (2 x 6,000 + 2,000) = 1,424 steps, where one series a pod would allow
    # (20 M - 2,000 x 10) / (3 x 2,000) = 3,330
    wide = PrometheusSettings(max_points_per_query=10**7, query_memory_mib=10**4)  # so that samples bind
    assert chunks.steps_per_chunk(2_000, 600.0, wide) == 3_330
    assert chunks.steps_per_chunk(2_000, 600.0, wide, touched=6_000) == 1_424
    fam = next(f for f in queries.FAMILIES if f.metric == "request_rate_per_s")
    counts = {n: 2_000 for n in (*queries.REQUESTS, *queries.RUNNING, *queries.WAITING)}
    assert parse.total(counts, fam.read_names) == 6_000 and parse.total(counts, fam.all_names) == 2_000
    query = queries.usage_query(fam.metric, Scope.of((), P), 600)
    assert query.count("vllm:request_success_total") == 1 and query.count("deriv(") == 2


def test_chunks_cover_the_grid_once_and_split_halves_it() -> None:
    got = chunks.chunks(1000.0, 1000.0 + 99 * 60, 60.0, 30)  # 100 steps in chunks of 30
    assert [c.steps for c in got] == [30, 30, 30, 10]
    assert all(b.start_s - a.end_s == 60 for a, b in itertools.pairwise(got))
    assert (got[0].start_s, got[-1].end_s) == (1000.0, 1000.0 + 99 * 60)
    halves = chunks.split(Chunk(0.0, 9 * 60.0, 60.0))  # 10 steps → 5 + 5, no gap
    assert halves is not None and [h.steps for h in halves] == [5, 5] and halves[1].start_s == halves[0].end_s + 60
    assert chunks.split(Chunk(60.0, 60.0, 60.0)) is None


def test_window_is_aligned_to_the_step() -> None:
    end = datetime(2026, 11, 1, 12, 34, 56, tzinfo=UTC)
    win = window_for(end - timedelta(days=14), end, P)
    last = datetime(2026, 11, 1, 12, 30, tzinfo=UTC).timestamp()
    assert (win.grid.step_s, win.grid.n) == (600.0, 2016)
    assert win.fine.end_s == last and win.fine.start_s == last - 2015 * 600
    assert win.coarse.step_s == 3600 and win.coarse.end_s == last  # 14 d / 336 inventory points = 1 h


def test_selectors_escape_namespaces_and_keep_old_vllm_names() -> None:
    scope = Scope.of(("team.a", "b"), PrometheusSettings(extra_selector='cluster="eu-1"'))
    sel = scope.matchers(queries.KV_USAGE)
    assert sel == ('{__name__=~"vllm:kv_cache_usage_perc|vllm:gpu_cache_usage_perc",namespace=~"b|team\\\\.a",'
                   'pod!="",cluster="eu-1"}')
    assert Scope.of((), P).matchers("X") == '{__name__="X",namespace!="",pod!=""}'
    q = queries.usage_query("gr_engine_active_frac", Scope.of((), P), 600)
    assert q.startswith("max by (namespace, pod) (avg_over_time({__name__=\"DCGM_FI_PROF_GR_ENGINE_ACTIVE\"")
    assert " or " in q and q.endswith("/ 100")  # GPU_UTIL (percent) only where GR_ENGINE_ACTIVE is absent


@pytest.mark.parametrize(("label", "name"), [
    ("nvidia_com_gpu", "nvidia.com/gpu"),
    ("nvidia_com_gpu_shared", "nvidia.com/gpu.shared"),
    ("nvidia_com_mig_3g_40gb", "nvidia.com/mig-3g.40gb"),
    ("nvidia_com_mig_1g_10gb_me", "nvidia.com/mig-1g.10gb.me"),
    ("nvidia_com_gpumem", "nvidia.com/gpumem"),
    ("nvidia.com/mig-2g.20gb", "nvidia.com/mig-2g.20gb"),  # already the spec name
    ("cpu", None),
    ("nvidia_com_something_else", None),
])
def test_resource_names_from_kube_state_metrics(label: str, name: str | None) -> None:
    assert parse.resource_name(label) == name


def _dev(pod: str, uuid: str, points: list[tuple[float, str]], **labels: str) -> dict[str, object]:
    return {"metric": {"namespace": "ns", "pod": pod, "UUID": uuid, "modelName": "NVIDIA A100-SXM4-80GB", **labels},
            "values": [[t, v] for t, v in points]}


def test_a_rolling_update_on_one_gpu_is_not_sharing() -> None:
    # old pod on GPU-1 until t=200, new pod from t=300: never together → shared_with 1 for both
    result = [_dev("old", "GPU-1", [(100, "81920"), (200, "81920")]),
              _dev("new", "GPU-1", [(300, "81920"), (400, "81920")]),
              _dev("a", "GPU-2", [(100, "81920"), (200, "81920")]),
              _dev("b", "GPU-2", [(200, "81920"), (300, "81920")])]  # a and b overlap at t=200
    got = {d.pod: d.shared_with for d in devices.devices(result, "namespace", "pod")}
    assert got == {"old": 1, "new": 1, "a": 2, "b": 2}


def test_mig_instances_on_one_gpu_are_separate_devices() -> None:
    result = [_dev("x", "GPU-1", [(100, "40192")], GPU_I_ID="1", GPU_I_PROFILE="3g.40gb"),
              _dev("y", "GPU-1", [(100, "40192")], GPU_I_ID="2", GPU_I_PROFILE="3g.40gb"),
              _dev("y", "GPU-1", [(100, "NaN")], GPU_I_ID="3", GPU_I_PROFILE="3g.40gb")]
    got = {d.pod: d for d in devices.devices(result, "namespace", "pod")}
    assert got["x"].shared_with == 1 and got["x"].mig_profile == "3g.40gb"
    assert got["y"].device_count == 2 and got["y"].device_memory_mib == 40192


def test_gpu_nodes_from_node_query_answers() -> None:
    def row(value: float, **labels: str) -> tuple[dict[str, str], float, float]:
        return {"modelName": "NVIDIA H100 80GB HBM3", **labels}, value, 100.0

    found = [row(1, hostname="n1", gpu="0"),  # the fallback label when Hostname is absent
             row(2, hostname="n1", gpu="2", GPU_I_PROFILE="1g.10gb"),
             row(1, hostname="n1", gpu="2", GPU_I_PROFILE="3g.40gb"),
             row(1, gpu="0"),  # no node: left out
             row(1, Hostname="n2", gpu="x"),  # no GPU index: left out
             row(1, Hostname="n2", gpu="1", node="elsewhere")]
    got = {n.name: n for n in devices.gpu_nodes(found, ("Hostname", "hostname"))}
    assert set(got) == {"n1", "n2"}
    assert got["n1"].mig_devices == ((), (), (("1g.10gb", 2), ("3g.40gb", 1)))  # GPU 1 exports nothing
    assert got["n2"].mig_devices == ((), ()) and got["n2"].gpu_product == "NVIDIA H100 80GB HBM3"
    assert [n.name for n in devices.gpu_nodes(found, ("node",))] == ["elsewhere"]


def test_owner_chain_from_kube_state_metrics() -> None:
    def series(labels: dict[str, str]) -> dict[str, object]:
        return {"metric": labels, "values": [[100, "1"]]}

    pod_owner = [series({"namespace": "a", "pod": "web-1", "owner_kind": "ReplicaSet", "owner_name": "web-7d"}),
                 series({"namespace": "a", "pod": "job-x", "owner_kind": "Job", "owner_name": "cron-123"}),
                 series({"namespace": "a", "pod": "lone", "owner_kind": "<none>", "owner_name": "<none>"}),
                 series({"namespace": "a", "pod": "orphan", "owner_kind": "ReplicaSet", "owner_name": "gone-9"})]
    rs = [series({"namespace": "a", "replicaset": "web-7d", "owner_kind": "Deployment", "owner_name": "web"})]
    jobs = [series({"namespace": "a", "job_name": "cron-123", "owner_kind": "CronJob", "owner_name": "cron"})]
    got = {o.pod: (o.kind, o.name) for o in parse.owners(*map(parse.latest, (pod_owner, rs, jobs)))}
    assert got == {"web-1": ("Deployment", "web"), "job-x": ("CronJob", "cron"), "lone": ("Pod", "lone"),
                   "orphan": ("ReplicaSet", "gone-9")}



def test_a_pods_controller_is_its_owner_whatever_else_owns_it() -> None:
    """kube-state-metrics gives a pod one series per ownerReference; only one is its controller (an operator may
    add others). The controller's is the pod's owner, whichever series is read last."""
    def owner(kind: str, name: str, controller: str) -> dict[str, object]:
        return {"metric": {"namespace": "a", "pod": "web-7d-x", "owner_kind": kind, "owner_name": name,
                           "owner_is_controller": controller}, "values": [[100, "1"]]}

    rs = [{"metric": {"namespace": "a", "replicaset": "web-7d", "owner_kind": "Deployment", "owner_name": "web"},
           "values": [[100, "1"]]}]
    for found in ([owner("ReplicaSet", "web-7d", "true"), owner("RayCluster", "ray", "false")],
                  [owner("RayCluster", "ray", "false"), owner("ReplicaSet", "web-7d", "true")]):
        (got,) = parse.owners(parse.latest(found), parse.latest(rs), [])
        assert (got.kind, got.name) == ("Deployment", "web")

def test_a_leader_worker_sets_pods_are_its_own() -> None:
    """kube-state-metrics names no LeaderWorkerSet: its leader pods are the leader StatefulSet's (``big``), each
    group's workers a StatefulSet named after its leader pod (``big-0``). Both are the LeaderWorkerSet's; a
    StatefulSet of pods alone, or one named like another's pod but not its group, stays a StatefulSet."""
    def sts(ns: str, pod: str, owner: str) -> dict[str, object]:
        return {"metric": {"namespace": ns, "pod": pod, "owner_kind": "StatefulSet", "owner_name": owner},
                "values": [[100, "1"]]}

    pod_owner = [sts("a", "big-0", "big"), sts("a", "big-1", "big"), sts("a", "big-0-1", "big-0"),
                 sts("a", "big-0-2", "big-0"), sts("a", "big-1-1", "big-1"), sts("a", "big-1-2", "big-1"),
                 sts("a", "db-0", "db"), sts("a", "db-1", "db"),
                 sts("a", "web-0", "web"), sts("a", "other", "web-0"),  # not <leader>-<index>
                 sts("b", "big-0-1", "big-0")]  # no leader pod in b
    got = {(o.namespace, o.pod): (o.kind, o.name) for o in parse.owners(parse.latest(pod_owner), [], [])}
    lws = ("LeaderWorkerSet", "big")
    assert got == {("a", "big-0"): lws, ("a", "big-1"): lws, ("a", "big-0-1"): lws, ("a", "big-0-2"): lws,
                   ("a", "big-1-1"): lws, ("a", "big-1-2"): lws, ("a", "db-0"): ("StatefulSet", "db"),
                   ("a", "db-1"): ("StatefulSet", "db"), ("a", "web-0"): ("StatefulSet", "web"),
                   ("a", "other"): ("StatefulSet", "web-0"), ("b", "big-0-1"): ("StatefulSet", "big-0")}

def test_accumulator_places_points_on_the_grid_and_keeps_infinities_for_the_quality_stage() -> None:
    acc = parse.Accumulator(chunks.Grid(1000.0, 60.0, 5))
    acc.add([{"metric": {"namespace": "n", "pod": "p"}, "values": [[1060, "1.5"], [1180, "+Inf"], [1240, "2"]]}],
            "namespace", "pod")
    acc.add([{"metric": {"namespace": "n"}, "values": [[1000, "9"]]}], "namespace", "pod")  # no pod label: skipped
    frame = acc.frame()
    assert list(frame.columns) == ["n/p"]
    assert frame["n/p"].tolist()[1] == 1.5 and frame["n/p"].tolist()[4] == 2.0
    assert frame["n/p"].isna().tolist() == [True, False, True, False, False]
    assert frame["n/p"].tolist()[3] == math.inf  # as sent: the data-quality stage drops and counts it


@pytest.mark.parametrize(("text", "kind", "fragment"), [
    ("HTTP Status Code 401 (b'Unauthorized\\n')", PrometheusError, "refused our credentials (HTTP 401)"),
    ("HTTP Status Code 422 (b'{\"status\":\"error\",\"errorType\":\"execution\",\"error\":\"query processing "
     "would load too many samples into memory in query execution\"}')", PrometheusLimitError, "too many samples"),
    ("HTTP Status Code 400 (b'{\"status\":\"error\",\"errorType\":\"bad_data\",\"error\":\"exceeded maximum "
     "resolution of 11,000 points per timeseries\"}')", PrometheusLimitError, "11,000 points"),
    ("HTTP Status Code 400 (b'{\"status\":\"error\",\"errorType\":\"bad_data\",\"error\":\"parse error\"}')",
     PrometheusError, "rejected a query (HTTP 400): parse error"),
    ("HTTP Status Code 404 (b'404 page not found')", PrometheusError, "no query API"),
])
def test_http_errors_become_one_line(text: str, kind: type, fragment: str) -> None:
    err = PromClient(PrometheusSettings(url="http://prom:9090"))._http_error(text, "up")
    assert type(err) is kind and fragment in str(err) and "\n" not in str(err)


def test_no_url_is_a_clear_error() -> None:
    with pytest.raises(PrometheusError, match="--prometheus-url"):
        PromClient(PrometheusSettings())



@contextlib.contextmanager
def _canned(body: bytes, status: int = 200) -> Iterator[str]:
    """A real HTTP server that answers every request with one fixed body (a Prometheus-compatible API that
    adds fields, or something that is not one); yields its URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            return None

    with loopback_http(Handler) as url:
        yield url


def _range(url: str, promql: str = "up") -> parse.Result:
    return PromClient(PrometheusSettings(url=url, retries=0)).query_range(promql, 1000, 1120, 60)


def test_range_answers_decode_with_extra_fields_and_special_values() -> None:
    body = (b'{"status":"success","warnings":["partial"],"data":{"resultType":"matrix","stats":{},"result":['
            b'{"metric":{"namespace":"n","pod":"p"},"values":[[1000,"NaN"],[1060,"+Inf"],[1120,"2.5"]]},'
            b'{"metric":{"pod":"q"},"values":[[1000.5,"-1e3"]]}]}}')
    with _canned(body) as url:
        result = _range(url)
    assert [r["metric"] for r in result] == [{"namespace": "n", "pod": "p"}, {"pod": "q"}]
    points = result[0]["values"]  # the samples as float arrays: NaN and ±Inf as the server wrote them
    assert points.times.tolist() == [1000.0, 1060.0, 1120.0] and points.values[1:].tolist() == [math.inf, 2.5]
    assert math.isnan(points.values[0]) and list(result[1]["values"]) == [(1000.5, -1000.0)]
    acc = parse.Accumulator(chunks.Grid(1000.0, 60.0, 3))
    acc.add(result, "namespace", "pod")
    assert acc.frame()["n/p"].tolist()[2] == 2.5


@pytest.mark.parametrize("body", [b'{"hello":"world"}', b"<html>not json</html>",
                                  b'{"status":"success","data":{"result":[{"metric":{},"values":[["x","1"]]}]}}',
                                  b'{"status":"success","data":{"result":[{"metric":{},"values":[[1,"2"],[3,"x"]]}]}}',
                                  b'{"status":"success","data":{"result":[{"metric":{},"values":[[1,"2"],[3,"4"',
                                  b'{"status":"success","data":{"result":[{"metric":{},"values":[[1,"2",3]]}]}}'])
def test_a_range_answer_that_is_not_prometheus_is_one_line(body: bytes) -> None:
    with _canned(body) as url, pytest.raises(PrometheusError, match="did not answer like a Prometheus API") as err:
        _range(url)
    assert "\n" not in str(err.value)


def test_a_range_error_status_is_one_line() -> None:
    body = b'{"status":"error","errorType":"bad_data","error":"1:3: parse error: unexpected end"}'
    with _canned(body, 400) as url, \
            pytest.raises(PrometheusError, match=r"rejected a query \(HTTP 400\): 1:3: parse") as err:
        _range(url, "up{")
    assert "\n" not in str(err.value) and type(err.value) is PrometheusError


def test_join_usage_keeps_cached_steps_still_in_the_window_and_pods_that_left_go() -> None:
    old_grid, grid = chunks.Grid(0.0, 60.0, 5), chunks.Grid(120.0, 60.0, 5)  # 0..240, then 120..360
    cached = {"m": pd.DataFrame({"a": [1.0, 2, 3, 4, 5], "left": [7.0, 7, np.nan, np.nan, np.nan]},
                                index=old_grid.index())}
    fresh_grid = chunks.Grid(180.0, 60.0, 4)  # the cache's last step (240) and the one before it, read again
    fresh = {"m": pd.DataFrame({"a": [40.0, 50, 60, 70], "new": [np.nan, 1, 1, 1]}, index=fresh_grid.index()),
             "only-new": pd.DataFrame({"a": [1.0, 1, 1, 1]}, index=fresh_grid.index())}
    joined = join_usage(cached, fresh, grid, 180.0)
    assert list(joined) == ["m", "only-new"]
    assert list(joined["m"].columns) == ["a", "new"]  # "left" has no value from 120 on
    assert joined["m"]["a"].tolist() == [3.0, 40, 50, 60, 70]  # cached 120, fresh from 180 (4 was re-read as 40)
    assert joined["m"].index.equals(grid.index()) and joined["only-new"]["a"].isna().tolist()[0]


def test_a_device_table_forgets_what_left_the_window() -> None:
    def answer(pod: str, uuid: str, times: list[float], host: str = "n1") -> parse.Result:
        labels = {"namespace": "ns", "pod": pod, "UUID": uuid, "Hostname": host, "modelName": "H100"}
        return [{"metric": labels, "values": [(t, "81559") for t in times]}]

    table = devices.DeviceTable("namespace", "pod", ("Hostname",))
    table.add(answer("old", "GPU-1", [0, 100]))  # shares GPU-1 with "new" at 100 only
    table.add(answer("new", "GPU-1", [100, 200, 300]))
    table.add(answer("new", "GPU-2", [0], host="n2"))  # a device it had before the window
    assert {r.pod: r.shared_with for r in table.records()} == {"new": 2, "old": 2}
    assert list(table.forget(50).on_device) == [("GPU-1/", 100.0)]  # only the shared instant is kept
    assert {r.pod: r.shared_with for r in table.records()} == {"new": 2, "old": 2}
    kept = table.forget(150).records()
    assert [(r.pod, r.device_count, r.shared_with, r.nodes, r.device_memory_mib) for r in kept] == \
        [("new", 1, 1, ("n1",), 81559.0)]  # "old" and GPU-2 on n2 were last seen before 150


def test_newest_keeps_one_entry_per_label_set_oldest_first() -> None:
    found: parse.Latest = [({"pod": "a"}, 1.0, 10.0), ({"pod": "b"}, 5.0, 15.0), ({"pod": "a"}, 2.0, 20.0),
                           ({"pod": "a", "x": "1"}, 3.0, 5.0)]
    assert parse.newest(found) == [({"pod": "a", "x": "1"}, 3.0, 5.0), ({"pod": "b"}, 5.0, 15.0),
                                   ({"pod": "a"}, 2.0, 20.0)]


def test_latest_with_shared_labels_gives_the_same_answers_and_one_dict_per_series() -> None:
    def answer(t: int, requested: str, extra: dict[str, str]) -> parse.Result:
        return [{"metric": {"namespace": "a", "pod": "p", "resource": "nvidia_com_gpu", **extra},
                 "values": [[t - 60, "1"], [t, requested]]},
                {"metric": {"pod": "q", "namespace": "a", "resource": "nvidia_com_gpu"}, "values": [[t, "NaN"]]}]

    chunks = [answer(1000, "2", {}), answer(2000, "0", {}), answer(3000, "1", {"uid": "u2"}),
              answer(2500, "3", {"pod": "q"})]  # the last repeats q's labels, q's own series has no finite value
    shared: dict[tuple[str, ...], dict[str, str]] = {}
    plain = [x for c in chunks for x in parse.latest(c)]
    kept = [x for c in chunks for x in parse.latest(c, shared)]
    assert kept == plain
    assert parse.requests(sorted(kept, key=lambda x: x[2])) == parse.requests(sorted(plain, key=lambda x: x[2]))
    assert kept[0][0] is kept[1][0] and kept[0][0] is not kept[2][0]  # same series, one dict; new label: its own
    assert kept[0][0] is not plain[0][0] and len(shared) == 3


def test_the_over_objective_query_reads_the_vllm_buckets_around_the_objective() -> None:
    def query(objective_s: float) -> str:
        return queries.usage_query("ttft_over_objective_per_s", Scope.of((), P), 120, objective_s)

    # 2 s lies between vLLM's 1.0 and 2.5 bounds: 1/3 of the first, 2/3 of the second; "1" or "1.0" matches
    assert 'le=~"1|1\\\\.0"}' in query(2.0)
    assert '* 0.333333 + ' in query(2.0) and 'le="2.5"}[120s]))) * 0.666667' in query(2.0)
    assert query(2.5).count("le=") == 2 and "*" not in query(2.5)  # +Inf less the bound itself
    assert 'le="0.001"' in query(0.0005) and query(0.0005).count("le=") == 2  # below the first: half of it
    assert 'le=~"2560|2560\\\\.0"' in query(5000.0)  # past the last: the rate above it
    assert query(2.0).startswith("clamp_min(") and 'le="+Inf"' in query(2.0)


HOSTILE_VALUES = ["a\nb", 'quo"te', "back\\slash", "tab\tand\rreturn", "dot.star*", "uni✓", "bell\x07", "nul\x00"]


@pytest.mark.prometheus
def test_label_values_from_the_server_are_quoted_as_promql_reads_them(tmp_path: Path) -> None:
    """Namespaces and owners in a query come from series labels, which an exporter writes (with ``honor_labels``,
    the tenant's): a raw newline in one made every query of the report fail to parse. A real Prometheus reads
    each quoted value back as itself, and each regex alternative matches it alone."""
    if prometheus_binaries() is None:
        pytest.skip("Debian's prometheus/promtool not installed (apt-get install -y prometheus)")
    with PromServer(tmp_path) as prom:
        client = PromClient(PrometheusSettings(url=prom.url), None)
        for value in HOSTILE_VALUES:
            literal, pattern = queries.quote(value), queries.quote(queries.regex_alternatives([value, "other"]))
            assert "\n" not in literal and "\n" not in pattern
            promql = (f'label_replace(label_replace(vector(1), "v", {literal}, "", ""), "hit", "yes", "v", {pattern})')
            (row,) = client.query(promql, 1_700_000_000)
            assert row["metric"] == {"v": value, "hit": "yes"}, (value, promql)


def test_renamed_exporter_labels_select_and_group_by_the_workloads_pod() -> None:
    """Where a scrape renamed dcgm-exporter's pod labels (``exported_*``), its series are selected by those and
    grouped by them copied back; vLLM's, which name their pods themselves, as before."""
    plain = Scope(("ml",))
    renamed = Scope(("ml",), exporter=queries.RENAMED_LABELS)
    assert renamed.matchers(queries.FB_USED) == \
        '{__name__="DCGM_FI_DEV_FB_USED",exported_namespace=~"ml",exported_pod!=""}'
    for names in (queries.RUNNING, (queries.FB_USED, *queries.RUNNING)):  # not dcgm-exporter's alone
        assert renamed.matchers(names) == plain.matchers(names)
    fb = queries.usage_query("fb_used_mib", renamed, 120)
    assert fb == ('max by (namespace, pod) (label_replace(label_replace(max_over_time('
                  '{__name__="DCGM_FI_DEV_FB_USED",exported_namespace=~"ml",exported_pod!=""}[120s]), '
                  '"namespace", "$1", "exported_namespace", "(.+)"), "pod", "$1", "exported_pod", "(.+)"))')
    assert "exported" not in queries.usage_query("request_rate_per_s", renamed, 120)
    assert queries.usage_query("request_rate_per_s", renamed, 120) == queries.usage_query("request_rate_per_s",
                                                                                            plain, 120)
    util = queries.usage_query("gr_engine_active_frac", renamed, 120)  # and its fallback
    assert util.count("label_replace(label_replace(") == 2 and 'exported_pod!=""' in util.split(" or ")[1]
    assert queries.device_query(renamed, ("UUID",)).startswith("max by (namespace, pod, UUID) (label_replace(")
    dcgm, rest = queries.census_selectors(renamed)
    assert "exported_namespace" in dcgm and "vllm:" not in dcgm and "DCGM" not in rest and "exported" not in rest
    assert queries.census_selectors(plain) == (plain.matchers(queries.CENSUS_NAMES),)
