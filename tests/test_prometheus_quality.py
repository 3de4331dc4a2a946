"""Impossible values through a real Prometheus: negative DCGM and vLLM series, memory above the device, +Inf.

The exporters' raw series are written as they would be scraped (tests/promcluster.py), then some are made
impossible; the report must drop what is impossible, count it per workload, and never size from it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from recommender.cli.main import main
from tests import promcluster as pc
from tests.promfixture import PromServer, Series, build_tsdb, prometheus_binaries, write_openmetrics

pytestmark = pytest.mark.prometheus

RS = "5d6f7b8c9d"
# Three vLLM pods on whole A100-80GBs, each its own Deployment. "negative": every DCGM and vLLM gauge
# negative (the "0/-81,930 MiB, -619% GPU"); "spiky": framebuffer above the device for the first
# 40% of the window, sane afterwards; "clean": the same pod with nothing impossible.
PODS = (
    pc.Pod("odd", f"negative-{RS}-aaaaa", ("ReplicaSet", f"negative-{RS}"), uuid="GPU-a1", vllm="new",
           fb_mib=20_000, level=0.3),
    pc.Pod("odd", f"spiky-{RS}-bbbbb", ("ReplicaSet", f"spiky-{RS}"), uuid="GPU-a2", vllm="new",
           fb_mib=20_000, level=0.3),
    pc.Pod("odd", f"clean-{RS}-ccccc", ("ReplicaSet", f"clean-{RS}"), uuid="GPU-b1", vllm="new",
           fb_mib=20_000, level=0.3),
    pc.Pod("odd", f"infinite-{RS}-ddddd", ("ReplicaSet", f"infinite-{RS}"), uuid="GPU-t1", vllm="new",
           fb_mib=20_000, level=0.3),
)
OWNERS = {("odd", f"{n}-{RS}"): ("Deployment", n) for n in ("negative", "spiky", "clean", "infinite")}
SPIKY_SHARE = 0.4
INFINITE_SHARE = 0.3  # "infinite": an exporter that sent +Inf framebuffer used and engine activity for 30%
GAUGES = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_GPU_UTIL",
          "vllm:kv_cache_usage_perc")


def _made_odd(s: Series) -> Series:
    pod = s.labels.get("pod", "")
    if pod.startswith("negative-") and s.name in GAUGES:
        if s.name == "DCGM_FI_DEV_FB_FREE":  # used + free = -81,930 MiB, with used negated as below
            used = -(PODS[0].device_mib - s.values) - 1.0
            return replace(s, values=-81_930.0 - used)
        return replace(s, values=-np.abs(s.values) - 1.0)  # strictly below zero, whatever the gauge was
    if pod.startswith("spiky-") and s.name in ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"):
        values = s.values.copy()
        head = int(SPIKY_SHARE * values.size)
        values[:head] = 200_000.0 if s.name == "DCGM_FI_DEV_FB_USED" else 0.0  # 200 GB on an 80 GB device
        return replace(s, values=values)
    if pod.startswith("infinite-") and s.name in ("DCGM_FI_DEV_FB_USED", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"):
        values = s.values.copy()
        values[: int(INFINITE_SHARE * values.size)] = np.inf
        return replace(s, values=values)
    return s


@pytest.fixture(scope="module")
def doc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    if prometheus_binaries() is None:
        pytest.skip("Debian's prometheus/promtool not installed (apt-get install -y prometheus)")
    work = tmp_path_factory.mktemp("odd")
    end_s = int(time.time()) // 3600 * 3600  # the last whole hour: inside retention
    series = [_made_odd(s) for s in pc.cluster_series(end_s, PODS)]
    series = [s for s in series if s.name not in ("kube_replicaset_owner", "kube_job_owner")]
    one = np.ones(pc.timestamps(end_s).size)
    series += [Series("kube_replicaset_owner", {"namespace": ns, "replicaset": rs, "owner_kind": k, "owner_name": n},
                      pc.timestamps(end_s), one) for (ns, rs), (k, n) in OWNERS.items()]
    write_openmetrics(series, work / "data.om", pc.TYPES)
    build_tsdb(work / "data.om", work / "tsdb")
    with PromServer.from_tsdb(work / "tsdb") as prom:
        end = datetime.fromtimestamp(end_s, UTC).isoformat()
        res = CliRunner().invoke(main, ["report", "--prometheus-url", prom.url, "--no-kubernetes", "--history", "2d",
                                        "--min-history", "12h", "--end", end, "-o", "json"],
                                 catch_exceptions=False)
    assert res.exit_code == 0, res.output
    yield json.loads(res.stdout)


def _by_name(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {w["name"]: w for w in doc["workloads"]}


def test_negative_series_give_no_recommendation_and_say_why(doc: dict[str, Any]) -> None:
    w = _by_name(doc)["negative"]
    assert w["recommended"] is None, (w["recommended"], w["reasons"], w["confidence"], w["risk"])
    assert w["reasons"][0].startswith("no recommendation:"), w["reasons"]
    dropped = [r for r in w["reasons"] if r.startswith("dropped ")]
    assert any("memory" in r and "(100%)" in r for r in dropped), w["reasons"]
    assert any("engine activity" in r and "(100%)" in r for r in dropped), w["reasons"]
    assert w["confidence"] == 0.0
    # the device memory DCGM reported (used + free) is impossible too: the catalogue's is used instead
    assert "device memory reported as -81,930 MiB is impossible: using the catalogue's 81,920 MiB" in w["reasons"]


def test_partly_impossible_memory_is_dropped_counted_and_lowers_confidence(doc: dict[str, Any]) -> None:
    w = _by_name(doc)
    spiky, clean = w["spiky"], w["clean"]
    assert spiky["recommended"] is not None and clean["recommended"] is not None
    # 48 h at a 120 s step = 1,440 steps; the first 40% of the scrapes said 200,000 MiB on an 81,920 MiB device
    (said,) = [r for r in spiky["reasons"] if r.startswith("dropped ") and "memory" in r]
    assert "(40%)" in said and "above the device" in said, said
    assert not any(r.startswith("dropped ") for r in clean["reasons"])
    # sized from what survived: the same need as its clean twin, which moved the same way
    assert spiky["memory_need_mib"]["target"] == pytest.approx(clean["memory_need_mib"]["target"], rel=0.05)
    assert spiky["confidence"] < clean["confidence"]


def test_infinite_samples_an_exporter_sent_are_dropped_and_counted_not_read_as_missing(doc: dict[str, Any]) -> None:
    w = _by_name(doc)
    infinite, clean = w["infinite"], w["clean"]
    dropped = [r for r in infinite["reasons"] if r.startswith("dropped ")]
    assert any("memory" in r and "(30%)" in r for r in dropped), infinite["reasons"]
    assert any("engine activity" in r and "(30%)" in r for r in dropped), infinite["reasons"]
    assert infinite["confidence"] < clean["confidence"]
    assert infinite["recommended"] is not None  # 70% of the window is left: sized from that, as its twin
    assert infinite["memory_need_mib"]["target"] == pytest.approx(clean["memory_need_mib"]["target"], rel=0.05)


def test_the_plan_warns_once_about_the_workloads_with_values_dropped(doc: dict[str, Any]) -> None:
    (line,) = [x for x in doc["warnings"] if x.startswith("impossible values")]
    assert line.endswith("dropped in 3 workload(s), counted in their reasons: odd/Deployment/infinite, "
                         "odd/Deployment/negative, odd/Deployment/spiky")

