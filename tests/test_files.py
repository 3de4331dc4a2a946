"""The file source: a snapshot written to a directory reads back exactly; bad input fails in one line."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from collectors.files import read_snapshot, write_snapshot
from recommender.core import usage as m
from recommender.core.errors import SourceError
from recommender.core.inventory import Allocation, GpuNode, Sharing, VllmArgs, Workload, WorkloadRef
from recommender.core.usage import Snapshot
from recommender.mechanisms.mig import MigShare
from tests.builders import END, index, whole_gpu

STEP_S = 600.0


def _workloads() -> tuple[Workload, ...]:
    """Every kind of field the format must carry: MIG, vLLM args, None, labels, unicode notes."""
    chat = Workload(WorkloadRef("chat", "Deployment", "assistant"),
                    whole_gpu("NVIDIA H100 80GB HBM3", "H100-80GB", memory_mib=81559.0, replicas=2,
                              vllm=VllmArgs("meta-llama/Meta-Llama-3-8B-Instruct", 0.9, 8192, 256)),
                    pods=("assistant-7d9f8b6c5d-x2k4p", "assistant-7d9f8b6c5d-q8v7n"),
                    labels={"app.kubernetes.io/name": "assistant"}, annotations={"note": "naïve — “quoted”"},
                    source="kubernetes", notes=("owner inferred",), kv_capacity_tokens=436_224.0,
                    served_model="llama-3-8b", nodes=("gpu-h100-0", "gpu-h100-1"), cold_start_s=142.5,
                    shape_since=datetime(2026, 10, 30, 8, 15, tzinfo=UTC))
    mig = Workload(WorkloadRef("dev", "StatefulSet", "review"),
                   Allocation(Sharing.MIG, share=MigShare("3g.40gb", 1), gpu_equivalents=0.5,
                              gpu_model="A100-80GB", gpu_product="NVIDIA A100-SXM4-80GB", device_memory_mib=40192.0,
                              vllm=VllmArgs(tensor_parallel_size=1)),
                   pods=("review-0",))
    bare = Workload(WorkloadRef("dev", "Pod", "debug"), Allocation(Sharing.NONE))
    return chat, mig, bare


def _snapshot(start: datetime | None = None) -> Snapshot:
    idx = index(2)  # 288 steps ending at END
    keys = [w.ref.key for w in _workloads()]
    rng = np.random.default_rng(7)
    fb = rng.uniform(0, 80_000, size=(len(idx), 2)).astype(np.float32).astype(float)
    fb[5, 0] = np.nan
    kv = np.full((len(idx), 2), np.nan)
    kv[:, 0] = 0.25
    usage = {m.FB_USED_MIB: pd.DataFrame(fb, index=idx, columns=keys[:2]),
             m.KV_USAGE_FRAC: pd.DataFrame(kv, index=idx, columns=[keys[0], keys[1]])}  # an all-NaN column
    begin = start or idx[0].to_pydatetime() - timedelta(seconds=STEP_S)
    nodes = (GpuNode("gpu-h100-0", "H100-80GB", 8),
             GpuNode("gpu-a100-mig-0", "A100-80GB", 2, "custom", ({"3g.40gb": 2}, {"1g.10gb": 7})))
    return Snapshot(_workloads(), usage, begin, END, STEP_S, ("one warning",), "test", nodes)


def _assert_same(a: Snapshot, b: Snapshot) -> None:
    assert (b.workloads, b.start, b.end, b.step_s, b.warnings, b.source, b.nodes) == (
        a.workloads, a.start, a.end, a.step_s, a.warnings, a.source, a.nodes)
    assert b.start.tzinfo == a.start.tzinfo
    assert list(b.usage) == list(a.usage)
    for metric, frame in a.usage.items():
        pd.testing.assert_frame_equal(b.usage[metric], frame)


def test_round_trip_is_exact(tmp_path: Path) -> None:
    snap = _snapshot()
    write_snapshot(snap, tmp_path / "new" / "dir")  # parents are created
    _assert_same(snap, read_snapshot(tmp_path / "new" / "dir"))


def test_a_snapshot_without_usage_round_trips(tmp_path: Path) -> None:
    snap = replace(_snapshot(), usage={})  # the writer writes a metric at a time: here, none
    write_snapshot(snap, tmp_path)
    _assert_same(snap, read_snapshot(tmp_path))


def test_round_trip_keeps_a_naive_start_naive(tmp_path: Path) -> None:
    snap = _snapshot(start=datetime(2026, 10, 30))
    write_snapshot(snap, tmp_path)
    assert read_snapshot(tmp_path).start == datetime(2026, 10, 30)


def test_values_are_stored_as_float32(tmp_path: Path) -> None:
    snap = _snapshot()
    snap.usage[m.FB_USED_MIB].iloc[0, 0] = 0.1  # not float32-representable
    write_snapshot(snap, tmp_path)
    assert read_snapshot(tmp_path).usage[m.FB_USED_MIB].iloc[0, 0] == float(np.float32(0.1))


def _csv_dir(tmp_path: Path, rows: list[str], header: str = "metric,workload,timestamp,value") -> Path:
    write_snapshot(_snapshot(), tmp_path)
    (tmp_path / "usage.parquet").unlink()
    (tmp_path / "usage.csv").write_text("\n".join([header, *rows]) + "\n")
    return tmp_path


KEY = "chat/Deployment/assistant"
T0 = int(datetime(2026, 10, 31, 23, 50, tzinfo=UTC).timestamp())


@pytest.mark.parametrize("stamps", [
    [str(T0), str(T0 + 600)],  # unix seconds
    ["2026-10-31T23:50:00Z", "2026-11-01T00:00:00+00:00"],  # ISO-8601 with offsets
    ["2026-10-31 23:50:00", "2026-11-01T01:00:00+01:00"],  # no offset = UTC; other offsets converted
])
def test_csv_input_in_unix_seconds_or_iso(tmp_path: Path, stamps: list[str]) -> None:
    rows = [f"fb_used_mib,{KEY},{stamps[0]},100.5", f"fb_used_mib,{KEY},{stamps[1]},NaN",
            f"kv_usage_frac,{KEY},{stamps[1]},"]
    snap = read_snapshot(_csv_dir(tmp_path, rows))
    expected_index = pd.date_range(END - timedelta(seconds=600), END, freq="600s", tz=UTC)
    expected = pd.DataFrame({KEY: [100.5, np.nan]}, index=expected_index)
    pd.testing.assert_frame_equal(snap.usage[m.FB_USED_MIB], expected)
    assert snap.usage[m.KV_USAGE_FRAC].isna().all().all()  # empty and NaN both read as NaN
    assert snap.warnings == ("one warning",)


def test_parquet_wins_over_csv_with_a_warning(tmp_path: Path) -> None:
    write_snapshot(_snapshot(), tmp_path)
    (tmp_path / "usage.csv").write_text("metric,workload,timestamp,value\n")
    snap = read_snapshot(tmp_path)
    assert m.FB_USED_MIB in snap.usage
    assert any("usage.csv: ignored" in w for w in snap.warnings)


def test_unknown_metrics_are_skipped_with_a_warning(tmp_path: Path) -> None:
    rows = [f"fb_used_mib,{KEY},{T0},1", f"gpu_util,{KEY},{T0},50", f"DCGM_FI_DEV_GPU_UTIL,{KEY},{T0},50"]
    snap = read_snapshot(_csv_dir(tmp_path, rows))
    assert set(snap.usage) == {m.FB_USED_MIB}
    assert any("skipped 2 row(s) of unknown metric(s) DCGM_FI_DEV_GPU_UTIL, gpu_util" in w for w in snap.warnings)


def test_usage_of_workloads_not_in_the_inventory_is_kept_with_a_warning(tmp_path: Path) -> None:
    rows = [f"fb_used_mib,{KEY},{T0},1", f"fb_used_mib,ghost/Deployment/gone,{T0},2"]
    snap = read_snapshot(_csv_dir(tmp_path, rows))
    assert list(snap.usage[m.FB_USED_MIB].columns) == [KEY, "ghost/Deployment/gone"]
    assert any("1 workload(s) not in snapshot.json" in w and "ghost/Deployment/gone" in w for w in snap.warnings)


def test_rows_in_any_order_read_as_the_same_frames(tmp_path: Path) -> None:
    """The reader's quick check (each series one run of rising times, as written) fails on interleaved, unsorted
    rows; they still make the same frames, workloads in the order they first appear, and no duplicate is claimed."""
    other = "dev/StatefulSet/review"
    rows = [f"fb_used_mib,{KEY},{T0 + 600},2", f"fb_used_mib,{other},{T0},3", f"fb_used_mib,{KEY},{T0},1",
            f"kv_usage_frac,{KEY},{T0},0.5", f"fb_used_mib,{other},{T0 + 600},4"]
    frame = read_snapshot(_csv_dir(tmp_path, rows)).usage[m.FB_USED_MIB]
    assert list(frame.columns) == [KEY, other]
    assert frame.to_numpy().tolist() == [[1.0, 3.0], [2.0, 4.0]]
    assert frame.index.freq is not None


@pytest.mark.parametrize("rows, first", [
    ([f"fb_used_mib,{KEY},{T0},1", f"kv_usage_frac,{KEY},{T0},0.5", f"fb_used_mib,{KEY},{T0},2"],
     f"fb_used_mib {KEY}"),  # the series' second run repeats its first
    ([f"kv_usage_frac,{KEY},{T0 + 600},0.5", f"kv_usage_frac,{KEY},{T0},0.5", f"kv_usage_frac,{KEY},{T0 + 600},0.7"],
     f"kv_usage_frac {KEY}"),  # one run whose times fall, then repeat
])
def test_duplicates_are_found_in_rows_in_any_order(tmp_path: Path, rows: list[str], first: str) -> None:
    with pytest.raises(SourceError, match=f"1 duplicate row\\(s\\), first: {first}"):
        read_snapshot(_csv_dir(tmp_path, rows))


def test_the_written_names_are_codes_in_the_order_they_first_appear(tmp_path: Path) -> None:
    """Metrics and workloads go to Parquet as dictionary codes, numbered as Arrow's own encoding numbers them."""
    snap = _snapshot()
    snap.usage[m.FB_USED_MIB] = snap.usage[m.FB_USED_MIB][list(reversed(snap.usage[m.FB_USED_MIB].columns))]
    write_snapshot(snap, tmp_path)
    table = pq.read_table(tmp_path / "usage.parquet")
    for name in ("metric", "workload"):
        written = table.column(name).combine_chunks()
        assert written.type == pa.dictionary(pa.int32(), pa.string())
        assert written.equals(pa.array(written.to_pylist(), pa.string()).dictionary_encode())
    _assert_same(snap, read_snapshot(tmp_path))


def _parquet_by_hand(d: Path, times: list[datetime | int | None], values: list[float | None], tz: str | None,
                     row_group_size: int) -> None:
    """A usage.parquet as another tool might write it: plain strings, times in ns (datetimes, or ints of ns) with or
    without a zone, nulls."""
    n = len(times)
    table = pa.table({"metric": pa.array(["fb_used_mib"] * n), "workload": pa.array([KEY] * n),
                      "timestamp": pa.array(times, pa.timestamp("ns", tz=tz)), "value": pa.array(values, pa.float64())})
    pq.write_table(table, d / "usage.parquet", row_group_size=row_group_size)


@pytest.mark.parametrize("tz", [None, "UTC", "Europe/Berlin"])
def test_parquet_written_by_another_tool_reads_the_same_instants(tmp_path: Path, tz: str | None) -> None:
    write_snapshot(_snapshot(), tmp_path)
    when = [datetime.fromtimestamp(T0 + 600 * i, UTC) for i in range(5)]
    given = [w.replace(tzinfo=None) for w in when] if tz is None else [w.astimezone(ZoneInfo(tz)) for w in when]
    _parquet_by_hand(tmp_path, list(given), [1.0, None, 3.0, 4.5, 5.0], tz, row_group_size=2)  # 3 row groups
    frame = read_snapshot(tmp_path).usage[m.FB_USED_MIB]
    assert list(frame.index) == [pd.Timestamp(w) for w in when]  # naive times are UTC
    assert frame[KEY].tolist()[2:] == [3.0, 4.5, 5.0] and frame[KEY].isna().tolist()[:2] == [False, True]


def test_parquet_times_finer_than_the_frames_unit_are_truncated_as_pandas_truncates(tmp_path: Path) -> None:
    write_snapshot(_snapshot(), tmp_path)
    fine = pd.Timestamp(T0, unit="s", tz=UTC) + pd.Timedelta(nanoseconds=123_456_789)
    _parquet_by_hand(tmp_path, [fine.value], [1.0], "UTC", row_group_size=1)
    frame = read_snapshot(tmp_path).usage[m.FB_USED_MIB]
    assert list(frame.index) == [pd.Series([fine]).dt.as_unit(frame.index.unit).iloc[0]]


def test_a_missing_time_in_parquet_is_named_by_its_row(tmp_path: Path) -> None:
    write_snapshot(_snapshot(), tmp_path)
    _parquet_by_hand(tmp_path, [datetime.fromtimestamp(T0, UTC), None], [1.0, 2.0], "UTC", row_group_size=1)
    with pytest.raises(SourceError, match=r"usage\.parquet: bad timestamp .* in row 2"):
        read_snapshot(tmp_path)


def _edit_json(change: Callable[[dict], object]) -> Callable[[Path], None]:
    """Spoil snapshot.json by changing the parsed document in place."""
    def apply(d: Path) -> None:
        doc = json.loads((d / "snapshot.json").read_text())
        change(doc)
        (d / "snapshot.json").write_text(json.dumps(doc))
    return apply


def _csv(*rows: str) -> Callable[[Path], None]:
    def apply(d: Path) -> None:
        (d / "usage.parquet").unlink()
        (d / "usage.csv").write_text("\n".join(rows) + "\n")
    return apply


HEADER = "metric,workload,timestamp,value"
BAD_INPUTS = {
    "missing directory": (lambda d: None, "missing", "does not exist"),
    "a file, not a directory": (lambda d: (d / "f").write_text("x"), "f", "not a directory"),
    "no snapshot.json": (lambda d: (d / "snapshot.json").unlink(), "", "snapshot.json: not found"),
    "malformed JSON": (lambda d: (d / "snapshot.json").write_text('{"format_version": 1,\n  oops}'), "",
                       "snapshot.json: malformed JSON at line 2 column 3"),
    "JSON not an object": (lambda d: (d / "snapshot.json").write_text("[1, 2]"), "",
                           "expected a JSON object at the top, found list"),
    "bad enum": (_edit_json(lambda doc: doc["workloads"][1]["allocation"].update(sharing="slices")), "",
                 "snapshot.json: workloads[1].allocation.sharing: Input should be 'exclusive'"),
    "unknown field": (_edit_json(lambda doc: doc.update(colour="red")), "", "snapshot.json: colour: Extra inputs"),
    # counts and shares no pod holds: one line, not a traceback later or 10^20 GPUs summed into the fleet
    "negative GPUs": (_edit_json(lambda doc: doc["workloads"][1]["allocation"].update(gpus=-3)), "",
                      "snapshot.json: workloads[1].allocation.gpus: Input should be greater than or equal to 0"),
    "GPUs beyond any fleet": (_edit_json(lambda doc: doc["workloads"][1]["allocation"].update(gpus=10**20)), "",
                              "workloads[1].allocation.gpus: Input should be less than or equal to 1048576"),
    "infinite GPU-equivalents": (_edit_json(lambda doc: doc["workloads"][1]["allocation"].update(
        gpu_equivalents=float("inf"))), "", "workloads[1].allocation.gpu_equivalents: Input should be a finite number"),
    "GPU-equivalents beyond any fleet": (_edit_json(lambda doc: doc["workloads"][1]["allocation"].update(
        gpu_equivalents=1e300)), "",
        "workloads[1].allocation.gpu_equivalents: Input should be less than or equal to 1048576"),
    "replicas beyond any cluster": (_edit_json(lambda doc: doc["workloads"][1]["allocation"].update(replicas=10**20)),
                                    "",
                                    "workloads[1].allocation.replicas: Input should be less than or equal to 1000000"),
    "a node beyond any": (_edit_json(lambda doc: doc["nodes"][0].update(gpus=10**8)), "",
                          "snapshot.json: nodes[0]: Value error, a device count outside 0 to 1,024 (gpus 100000000"),
    "negative MIG devices": (_edit_json(lambda doc: doc["nodes"][0].update(mig_devices=[{"1g.10gb": -5}])), "",
                             "nodes[0]: Value error, a device count outside 0 to 1,024"),
    "HAMi cores above 100%": (_edit_json(lambda doc: doc["workloads"][1]["allocation"].update(hami_gpucores_pct=500)),
                              "", "allocation.hami_gpucores_pct: Input should be less than or equal to 100"),
    "negative pinned memory": (_edit_json(lambda doc: doc["workloads"][1]["allocation"].update(
        mps_pinned_mem_mib=-5)), "", "allocation.mps_pinned_mem_mib: Input should be greater than or equal to 0"),
    "Run:ai fraction above 1": (_edit_json(lambda doc: doc["workloads"][1]["allocation"].update(runai_gpu_fraction=2)),
                                "", "allocation.runai_gpu_fraction: Input should be less than or equal to 1"),
    "MPS above 100%": (_edit_json(lambda doc: doc["workloads"][1]["allocation"].update(mps_active_thread_pct=250)), "",
                       "workloads[1].allocation.mps_active_thread_pct: Input should be less than or equal to 100"),
    "missing field": (_edit_json(lambda doc: doc.pop("step_s")), "", "snapshot.json: step_s: Field required"),
    "newer format": (_edit_json(lambda doc: doc.update(format_version=99)), "", "format_version 99 is newer"),
    "bad start": (_edit_json(lambda doc: doc.update(start="last tuesday")), "",
                  "snapshot.json: start: not an ISO-8601 time: 'last tuesday'"),
    "no usage file": (lambda d: (d / "usage.parquet").unlink(), "", "no usage file (usage.parquet or usage.csv)"),
    "corrupt parquet": (lambda d: (d / "usage.parquet").write_bytes(b"PAR1 not really"), "",
                        "usage.parquet: not a readable Parquet file"),
    "missing column": (_csv("metric,workload,value", f"fb_used_mib,{KEY},1"), "",
                       "usage.csv: missing column(s) timestamp"),
    "bad timestamp": (_csv(HEADER, f"fb_used_mib,{KEY},{T0},1", f"fb_used_mib,{KEY},yesterday,1"), "",
                      "usage.csv: bad timestamp 'yesterday' in row 2 (expected unix seconds or ISO-8601)"),
    "non-numeric value": (_csv(HEADER, f"fb_used_mib,{KEY},{T0},lots"), "",
                          "usage.csv: non-numeric value 'lots' in row 1"),
    "duplicate rows": (_csv(HEADER, f"fb_used_mib,{KEY},{T0},1", f"fb_used_mib,{KEY},{T0},2"), "",
                       f"usage.csv: 1 duplicate row(s), first: fb_used_mib {KEY} at 2026-10-31T23:50"),
    "empty workload": (_csv(HEADER, f"fb_used_mib,,{T0},1"), "", "usage.csv: empty workload in row 1"),
}


@pytest.mark.parametrize("case", BAD_INPUTS, ids=list(BAD_INPUTS))
def test_bad_input_raises_one_clear_line(tmp_path: Path, case: str) -> None:
    spoil, target, expected = BAD_INPUTS[case]
    write_snapshot(_snapshot(), tmp_path)
    spoil(tmp_path)
    with pytest.raises(SourceError) as err:
        read_snapshot(tmp_path / target)
    message = str(err.value)
    assert expected in message
    assert "\n" not in message
    assert str(tmp_path) in message  # names the file (or directory) it could not read


def test_unwritable_target_raises_source_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(SourceError, match="cannot write the snapshot"):
        write_snapshot(_snapshot(), tmp_path / "file" / "sub")
