"""The KEDA triggers the JSON report writes, run on a real Prometheus: KEDA's Prometheus scaler needs each
query to return exactly one element, and the value is what the HPA divides by the threshold."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from collectors.prometheus import queries
from policies.autoscalerobjects import autoscaler_objects
from recommender.core import usage as m
from recommender.core.plan import ScalingPlan
from recommender.outputs import jsondoc
from tests.promfixture import (
    PromServer,
    Series,
    build_tsdb,
    instant_query,
    prometheus_binaries,
    write_openmetrics,
)

pytestmark = [
    pytest.mark.skipif(prometheus_binaries() is None,
                       reason="Debian's prometheus/promtool not installed (apt-get install -y prometheus)"),
    pytest.mark.prometheus,
]

END_S = int(time.time()) // 60 * 60 - 120
RAMP_S = 300  # the queues and batches below grow linearly over the last 300 s before the last scrape
# (namespace, pod, finished requests/s, requests waiting at the end, running at the end (None: no series)):
# llama's a1 is overloaded (its batch full at 60, its queue growing 0.5/s), b2 is filling its batch
# (0.1/s); the other namespace's and the other Deployment's pods must not count
PODS = [("inference", "llama-7d9f-a1", 2.0, 150.0, 60.0), ("inference", "llama-7d9f-b2", 3.0, 0.0, 30.0),
        ("staging", "llama-55c1-x9", 7.0, 50.0, 9.0), ("inference", "mistral-66a2-c3", 11.0, 70.0, None),
        ("inference", "qwen-41c2-d4", 1.0, 0.0, 10.0)]
GROWING = {"llama-7d9f-a1": "waiting", "llama-7d9f-b2": "running"}
DRAINED = {"qwen-41c2-d4": 600.0}  # 600 queued requests gone in 300 s (clients gave up) while 1/s finishes
PLAN = ScalingPlan(metric=m.REQUEST_RATE, per_replica_capacity=10.0, target_per_replica=7.0, min_replicas=1,
                     max_replicas=6, recommended_replicas=2, activation_threshold=0.0, cooldown_s=300,
                     scale_to_zero=False, headroom_frac=0.3, cold_start_s=None, waiting_per_replica=14.0)


def scaling(plan: ScalingPlan, namespace: str, name: str) -> dict[str, Any] | None:
    """The JSON report's ``scaling`` of ``plan`` for one workload, with the objects the pipeline would make."""
    return jsondoc.scaling(plan, autoscaler_objects(plan, namespace, name))


@pytest.fixture(scope="module", params=[15, 60], ids=lambda s: f"scrape-{s}s")
def prom(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PromServer]:
    """The last hour scraped every 15 s (kube-prometheus) or every 60 s (the collector's min_step_s): the
    default rate window (ScalingSettings.rate_window_s, 120 s) holds two samples either way; [1m] would
    return nothing at 60 s."""
    ts = END_S - 7 - request.param * np.arange(3600 // request.param + 1)[::-1]  # scrapes not on the query time
    elapsed = (ts - ts[0]).astype(float)
    ramp = np.clip((ts - (ts[-1] - RAMP_S)) / RAMP_S, 0.0, 1.0)  # 0 until the ramp, 1 at the last scrape
    out = []
    for ns, pod, rate, waiting, running in PODS:
        labels = {"namespace": ns, "pod": pod, "model_name": "m"}
        gauges = {"waiting": np.full(ts.size, waiting), "running": np.full(ts.size, running or 0.0)}
        if pod in GROWING:
            gauges[GROWING[pod]] = gauges[GROWING[pod]] * ramp
        if pod in DRAINED:
            gauges["waiting"] = DRAINED[pod] * (1.0 - ramp)
        out += [Series("vllm:request_success_total", {**labels, "finished_reason": "stop"}, ts, rate * elapsed),
                Series("vllm:num_requests_waiting", labels, ts, gauges["waiting"])]
        if running is not None:
            out.append(Series("vllm:num_requests_running", labels, ts, gauges["running"]))
    tmp = tmp_path_factory.mktemp("keda")
    write_openmetrics(out, tmp / "data.om", {"vllm:request_success": "counter"})
    build_tsdb(tmp / "data.om", tmp / "data")
    with PromServer.from_tsdb(tmp / "data") as server:
        yield server


def instant(url: str, query: str) -> list[dict[str, Any]]:
    return instant_query(url, query, END_S)


def test_rate_and_waiting_triggers_each_return_the_deployments_one_sum(prom: PromServer) -> None:
    rate, waiting = scaling(PLAN, "inference", "llama")["keda"]["triggers"]  # type: ignore[index]
    got = [instant(prom.url, t["metadata"]["query"]) for t in (rate, waiting)]
    assert [len(r) for r in got] == [1, 1], got
    # llama's two pods in inference only: the requests arriving, not the 2 + 3 finishing. a1's queue grows
    # by 150 in 300 s, b2's batch by 30: every arrival finished, runs or waits
    assert float(got[0][0]["value"][1]) == pytest.approx(2.0 + 150 / RAMP_S + 3.0 + 30 / RAMP_S)
    assert float(got[1][0]["value"][1]) == pytest.approx(150.0 + 0.0)
    # what the HPA does with them: ceil(5.6 / 7) = 1 replica on rate, ceil(150 / 14) = 11 on the queue
    assert (float(rate["metadata"]["threshold"]), float(waiting["metadata"]["threshold"])) == (7.0, 14.0)


def test_a_plan_without_the_queue_trigger_writes_only_the_rate_query(prom: PromServer) -> None:
    doc = scaling(replace(PLAN, waiting_per_replica=None), "inference", "mistral")
    assert doc is not None and doc["waiting_per_replica"] is None
    (rate,) = doc["keda"]["triggers"]
    # mistral exports no running gauge and a steady queue: its finished rate alone, still one element
    assert float(instant(prom.url, rate["metadata"]["query"])[0]["value"][1]) == pytest.approx(11.0)


def test_a_queue_draining_faster_than_requests_finish_reads_as_no_arrivals_not_a_negative_rate(
        prom: PromServer) -> None:
    (rate, _) = scaling(PLAN, "inference", "qwen")["keda"]["triggers"]  # type: ignore[index]
    assert float(instant(prom.url, rate["metadata"]["query"])[0]["value"][1]) == 0.0  # 1 - 600 / 300, clamped


def test_the_collectors_request_rate_is_each_pods_arrivals(prom: PromServer) -> None:
    """The history the forecast and the capacity knee read uses the same identity, per pod: a pod without a
    running gauge keeps its finished rate, a drained queue reads 0, not a negative rate."""
    query = queries.usage_query(m.REQUEST_RATE, queries.Scope(()), 120)
    got = {r["metric"]["pod"]: float(r["value"][1]) for r in instant(prom.url, query)}
    assert got == pytest.approx({"llama-7d9f-a1": 2.0 + 150 / RAMP_S, "llama-7d9f-b2": 3.0 + 30 / RAMP_S,
                                 "llama-55c1-x9": 7.0, "mistral-66a2-c3": 11.0, "qwen-41c2-d4": 0.0})
