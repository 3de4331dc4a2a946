"""The Prometheus fixture itself: what is written offline comes back, through a real server, unchanged."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests

from tests.promfixture import PromServer, Series, build_tsdb, prometheus_binaries, write_openmetrics

pytestmark = [
    pytest.mark.skipif(
        prometheus_binaries() is None,
        reason="Debian's prometheus/promtool not installed (apt-get install -y prometheus)",
    ),
    pytest.mark.prometheus,
]

STEP_S = 60
N = 121  # 2 h at 60 s, both ends included
END_S = int(time.time()) // 60 * 60 - 120
TS = END_S - STEP_S * np.arange(N)[::-1]
K = np.arange(N, dtype=float)
POD = {"namespace": "team-a", "pod": "p0"}
ODD = 'C:\\dir "quoted"\nline two'  # a backslash, quotes and a newline, all escaped in the file
# bcrypt (cost 4, so requests stay fast) of the password "rightsizer-test"
HASH = "$2b$04$DXE3Ll9ZouRBjvjRyOceOe6RO8uhy.4CZHWSnjb6CvpFfXSC/a8P6"
WEB_CONFIG = f"basic_auth_users:\n  tester: '{HASH}'\n"
TYPES = {"vllm:request_success": "counter", "vllm:time_to_first_token_seconds": "histogram"}

GAUGE = 1000.0 + 1.5 * K
NAN_AT = 100
WITH_NAN = np.where(np.arange(N) == NAN_AT, np.nan, 0.25 * K)
BUCKETS = {"0.1": 6 * K, "0.5": 9 * K, "+Inf": 10 * K}  # per minute: 6 under 0.1 s, 3 more under 0.5 s, 1 above


def _series() -> list[Series]:
    ttft = "vllm:time_to_first_token_seconds"
    out = [
        Series("DCGM_FI_DEV_FB_USED", POD, TS, GAUGE),
        Series("vllm:kv_cache_usage_perc", POD, TS, WITH_NAN),
        Series("vllm:request_success_total", POD, TS, 10 * K),
        Series(f"{ttft}_sum", POD, TS, 2.5 * K),
        Series(f"{ttft}_count", POD, TS, 10 * K),
        Series("odd_labels", {**POD, "path": ODD}, TS, K),
    ]
    # interleaved with other families on purpose: the writer must still keep each family contiguous
    out[3:3] = [Series(f"{ttft}_bucket", {**POD, "le": le}, TS, v) for le, v in BUCKETS.items()]
    return out


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("prom")
    written = write_openmetrics(_series(), tmp / "data.om", TYPES)
    assert written == 9 * N
    build_tsdb(tmp / "data.om", tmp / "data")
    return tmp / "data"


@pytest.fixture(scope="module")
def prom(data_dir: Path) -> Iterator[PromServer]:
    with PromServer.from_tsdb(data_dir) as server:
        yield server


def _range(url: str, query: str, **kw: Any) -> list[dict[str, Any]]:
    params: dict[str, str | int] = {"query": query, "start": END_S - 3600, "end": END_S, "step": STEP_S}
    r = requests.get(f"{url}/api/v1/query_range", params=params, timeout=10, **kw)
    r.raise_for_status()
    result: list[dict[str, Any]] = r.json()["data"]["result"]
    return result


def _values(result: list[dict[str, Any]]) -> np.ndarray:
    assert len(result) == 1, result
    stamps, values = zip(*result[0]["values"], strict=True)
    assert list(stamps) == TS[-61:].tolist()
    return np.array([float(v) for v in values])


def test_file_groups_families_under_one_type_line(tmp_path: Path) -> None:
    write_openmetrics(_series(), tmp_path / "x.om", TYPES)
    lines = (tmp_path / "x.om").read_text().splitlines()
    types = [line for line in lines if line.startswith("#")]
    assert types == [
        "# TYPE DCGM_FI_DEV_FB_USED gauge", "# TYPE vllm:kv_cache_usage_perc gauge",
        "# TYPE vllm:request_success counter", "# TYPE vllm:time_to_first_token_seconds histogram",
        "# TYPE odd_labels gauge", "# EOF",
    ]
    names = [line.split("{")[0] for line in lines if not line.startswith("#")]
    assert names == sorted(names, key=names.index)  # contiguous: no name comes back after another one
    assert 'path="C:\\\\dir \\"quoted\\"\\nline two"' in lines[-2]
    assert sum(" NaN " in line for line in lines) == 1


def test_build_reports_promtools_error(tmp_path: Path) -> None:
    (tmp_path / "bad.om").write_text("# TYPE a gauge\na 1 1700000000\n")  # no "# EOF"
    with pytest.raises(RuntimeError, match="does not end with # EOF"):
        build_tsdb(tmp_path / "bad.om", tmp_path / "data")


def test_gauge_counter_histogram_round_trip(prom: PromServer) -> None:
    assert _values(_range(prom.url, 'DCGM_FI_DEV_FB_USED{pod="p0"}')).tolist() == GAUGE[-61:].tolist()
    assert _values(_range(prom.url, "vllm:request_success_total")).tolist() == (10 * K[-61:]).tolist()
    assert _values(_range(prom.url, "vllm:time_to_first_token_seconds_sum")).tolist() == (2.5 * K[-61:]).tolist()
    buckets = _range(prom.url, "vllm:time_to_first_token_seconds_bucket")
    assert {b["metric"]["le"]: [float(v) for _, v in b["values"]] for b in buckets} == {
        le: v[-61:].tolist() for le, v in BUCKETS.items()
    }
    rate = _values(_range(prom.url, "rate(vllm:request_success_total[5m])"))
    np.testing.assert_allclose(rate[5:], 10 / 60)
    p50 = _values(_range(prom.url, "histogram_quantile(0.5, rate(vllm:time_to_first_token_seconds_bucket[5m]))"))
    np.testing.assert_allclose(p50[5:], 0.1 * 5 / 6)  # rank 5 of 10 inside the first bucket (6 of 10)


def test_nan_is_stored_as_nan(prom: PromServer) -> None:
    result = _range(prom.url, "vllm:kv_cache_usage_perc")
    by_time = {int(t): v for t, v in result[0]["values"]}
    assert by_time[int(TS[NAN_AT])] == "NaN"
    assert by_time[int(TS[NAN_AT - 1])] == str(0.25 * (NAN_AT - 1))


def test_label_values_with_quotes_and_backslashes_survive(prom: PromServer) -> None:
    [series] = _range(prom.url, "odd_labels")
    assert series["metric"]["path"] == ODD


def test_basic_auth_web_config(data_dir: Path) -> None:
    with PromServer.from_tsdb(data_dir, web_config=WEB_CONFIG) as server:
        url = f"{server.url}/api/v1/query"
        assert requests.get(url, params={"query": "up"}, timeout=10).status_code == 401
        wrong = requests.get(url, params={"query": "up"}, auth=("tester", "nope"), timeout=10)
        assert wrong.status_code == 401
        ok = requests.get(url, params={"query": "up"}, auth=("tester", "rightsizer-test"), timeout=10)
        assert ok.status_code == 200
        assert _values(_range(server.url, "DCGM_FI_DEV_FB_USED", auth=("tester", "rightsizer-test")))[-1] == GAUGE[-1]


def test_two_servers_over_one_data_dir(data_dir: Path) -> None:
    with PromServer.from_tsdb(data_dir) as a, PromServer.from_tsdb(data_dir, extra_args=["--query.timeout=30s"]) as b:
        assert a.url != b.url
        for server in (a, b):
            assert _values(_range(server.url, "DCGM_FI_DEV_FB_USED")).tolist() == GAUGE[-61:].tolist()
    assert sorted(p.name for p in data_dir.iterdir() if not (p / "meta.json").exists()) == []  # left untouched
