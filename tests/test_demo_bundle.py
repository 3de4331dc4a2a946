"""The bundled demo cluster: loads without the traces, covers every scenario, and rebuilds exactly."""

from __future__ import annotations

import importlib.util
import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType

import numpy as np
import pandas as pd
import pytest

from collectors.files import read_snapshot
from collectors.owners import infer_owner
from recommender.core import usage as m
from recommender.core.catalogue import load_catalogue
from recommender.core.inventory import Sharing, Workload
from recommender.core.usage import Snapshot
from recommender.demo import demo_path

REPO = Path(__file__).resolve().parents[1]
STEPS_PER_DAY = 144  # 10-minute steps
VLLM_ONLY = (m.KV_USAGE_FRAC, m.REQUESTS_RUNNING, m.REQUESTS_WAITING, m.REQUEST_RATE, m.TTFT_P95_S)


def _shared_data() -> Path:
    """$GPU_RIGHTSIZER_SHARED (the shared folder or its data/), else ../shared/data beside the repo."""
    env = os.environ.get("GPU_RIGHTSIZER_SHARED")
    if env:
        return Path(env) / "data" if (Path(env) / "data").is_dir() else Path(env)
    return REPO.parent / "shared" / "data"


@pytest.fixture(scope="module")
def demo() -> Snapshot:
    return read_snapshot(demo_path())


def _series(snap: Snapshot, metric: str, w: Workload) -> pd.Series:
    s = snap.series(metric, w.ref)
    assert s is not None, f"{w.ref.key} has no {metric}"
    return s


def _p95(snap: Snapshot, metric: str, w: Workload) -> float:
    return float(_series(snap, metric, w).quantile(0.95))


def test_demo_is_small_and_loads_cleanly(demo: Snapshot) -> None:
    sizes = {p.name: p.stat().st_size for p in demo_path().iterdir()}
    assert sizes["snapshot.json"] + sizes["usage.parquet"] < 3 * 2**20
    assert demo.warnings == ()  # no unknown metric, no usage without a workload
    assert demo.source.startswith("demo (derived from public traces")


def test_demo_spans_14_days_at_10_minutes(demo: Snapshot) -> None:
    assert demo.end == datetime(2026, 11, 1, tzinfo=UTC)
    assert demo.end - demo.start == timedelta(days=14)
    assert demo.step_s == 600
    expected = pd.date_range(end=demo.end, periods=2016, freq="600s", tz=UTC)  # stamped at each step's end
    for frame in demo.usage.values():
        assert frame.index.equals(expected)


def test_demo_has_enough_workloads_and_only_canonical_metrics(demo: Snapshot) -> None:
    keys = {w.ref.key for w in demo.workloads}
    assert len(demo.workloads) >= 12
    assert 3 <= len({w.ref.namespace for w in demo.workloads}) <= 4
    assert set(demo.usage) <= set(m.USAGE_METRICS)
    assert all(set(frame.columns) <= keys for frame in demo.usage.values())
    assert all(_series(demo, m.FB_USED_MIB, w) is not None for w in demo.workloads)


def test_pod_names_resolve_to_their_workload_and_products_to_their_model(demo: Snapshot) -> None:
    catalogue = load_catalogue()
    for w in demo.workloads:
        assert len(w.pods) == (1 if w.ref.kind == "StatefulSet" else w.allocation.replicas)
        for pod in w.pods:
            owner = infer_owner(w.ref.namespace, pod)
            if w.ref.kind in ("Deployment", "StatefulSet", "Job", "CronJob"):
                assert (owner.kind, owner.name) == (w.ref.kind, w.ref.name)
            else:  # the training operator's <job>-<role>-<i> reads as a StatefulSet's: only the API knows the job
                assert owner.inferred and owner.name.startswith(w.ref.name)
        assert catalogue.canonical(w.allocation.gpu_product) == w.allocation.gpu_model


def test_vllm_framebuffer_is_flat_at_its_memory_fraction(demo: Snapshot) -> None:
    """vLLM pre-allocates: FB_USED = utilisation x device memory + ~500 MiB context, whatever the load."""
    for w in demo.workloads:
        vllm, alloc = w.allocation.vllm, w.allocation
        if vllm is None or alloc.sharing is Sharing.TIME_SLICING:  # time-sliced: DCGM sees the whole device
            continue
        assert vllm.gpu_memory_utilization is not None and alloc.device_memory_mib is not None
        fb = _series(demo, m.FB_USED_MIB, w).dropna()
        assert fb.max() - fb.min() < 1
        assert fb.iloc[0] == pytest.approx(vllm.gpu_memory_utilization * alloc.device_memory_mib + 500, abs=1)
        assert w.kv_capacity_tokens is not None and w.kv_capacity_tokens % 16 == 0
        assert _series(demo, m.FB_TOTAL_MIB, w).dropna().eq(alloc.device_memory_mib).all()


def test_several_services_are_over_provisioned(demo: Snapshot) -> None:
    """The trap: FB_USED near 0.9 x memory on a whole GPU while the KV cache is nearly empty."""
    found = [w.ref.name for w in demo.workloads
             if w.allocation.sharing is Sharing.EXCLUSIVE and w.allocation.vllm is not None
             and _series(demo, m.FB_USED_MIB, w).min() > 0.85 * (w.allocation.device_memory_mib or 0)
             and _p95(demo, m.KV_USAGE_FRAC, w) < 0.1 and _p95(demo, m.GR_ENGINE_ACTIVE_FRAC, w) < 0.5]
    assert len(found) >= 4, found


def test_one_service_is_well_sized_and_busy(demo: Snapshot) -> None:
    busy = [w for w in demo.workloads if w.allocation.vllm is not None and w.ref.kind == "Deployment"
            and _p95(demo, m.GR_ENGINE_ACTIVE_FRAC, w) > 0.7 and _p95(demo, m.KV_USAGE_FRAC, w) > 0.3
            and _series(demo, m.REQUESTS_WAITING, w).gt(0).mean() < 0.05]
    assert busy


def test_a_70b_model_runs_tensor_parallel_on_two_h100s(demo: Snapshot) -> None:
    (w,) = [w for w in demo.workloads if w.allocation.vllm and w.allocation.vllm.tensor_parallel_size == 2]
    assert (w.allocation.gpus, w.allocation.gpu_equivalents, w.allocation.gpu_model) == (2, 2.0, "H100-80GB")
    assert "70B" in (w.served_model or "")
    assert _p95(demo, m.KV_USAGE_FRAC, w) > 0.5  # 65.7 GiB of weights per GPU leave little KV room


def test_one_workload_already_has_a_3g_mig_slice(demo: Snapshot) -> None:
    (w,) = [w for w in demo.workloads if w.allocation.sharing is Sharing.MIG]
    assert (w.allocation.mig_profile, w.allocation.mig_count) == ("3g.40gb", 1)
    assert w.allocation.gpu_equivalents == max(4 / 8, 3 / 7)  # memory slices win over SM slices
    assert demo.series(m.POWER_W, w.ref) is None  # DCGM has no power per MIG instance


def test_one_workload_is_time_sliced_and_says_dcgm_sees_the_device(demo: Snapshot) -> None:
    (w,) = [w for w in demo.workloads if w.allocation.sharing is Sharing.TIME_SLICING]
    assert w.allocation.gpu_equivalents == 0.25  # 1 of 4 pods on the device
    assert any("per device, not per pod" in n for n in w.notes)
    vllm = w.allocation.vllm
    assert vllm is not None and vllm.gpu_memory_utilization is not None and w.allocation.device_memory_mib
    own_mib = vllm.gpu_memory_utilization * w.allocation.device_memory_mib
    assert _series(demo, m.FB_USED_MIB, w).min() > 2 * own_mib  # the neighbours' memory shows too


def test_one_batch_job_is_helios_shaped_and_quieter_at_night(demo: Snapshot) -> None:
    (w,) = [w for w in demo.workloads if w.ref.kind == "Job"]
    gr = _series(demo, m.GR_ENGINE_ACTIVE_FRAC, w).dropna()
    hour = pd.DatetimeIndex(gr.index).hour
    night, day = gr[hour < 9].mean(), gr[(hour >= 11) & (hour < 17)].mean()
    assert night < 0.6 * day
    assert (gr < 0.05).mean() > 0.25  # idle steps while it holds 2 GPUs
    assert all(demo.series(metric, w.ref) is None for metric in VLLM_ONLY)


def test_one_service_is_idle_for_days(demo: Snapshot) -> None:
    def longest_idle_days(w: Workload) -> float:
        idle = _series(demo, m.REQUEST_RATE, w).fillna(0).le(0).to_numpy()
        runs = np.diff(np.flatnonzero(np.diff(np.r_[0, idle.astype(int), 0])))[::2]
        return float(runs.max(initial=0)) / STEPS_PER_DAY

    idle = [w for w in demo.workloads if w.allocation.vllm is not None and longest_idle_days(w) >= 5]
    assert idle


def test_one_workload_has_only_dcgm_metrics(demo: Snapshot) -> None:
    dcgm_only = [w for w in demo.workloads if w.ref.kind != "Job" and w.allocation.vllm is None]
    assert dcgm_only
    for w in dcgm_only:
        assert all(demo.series(metric, w.ref) is None for metric in VLLM_ONLY)
        assert _series(demo, m.GR_ENGINE_ACTIVE_FRAC, w).max() > 0


def test_one_workload_runs_on_an_unknown_gpu(demo: Snapshot) -> None:
    (w,) = [w for w in demo.workloads if w.allocation.gpu_model is None]
    assert w.allocation.gpu_product == "NVIDIA Foo-9000"
    assert load_catalogue().canonical(w.allocation.gpu_product) is None
    assert w.allocation.device_memory_mib == 49152


def test_trace_gaps_are_nan_in_every_series(demo: Snapshot) -> None:
    gaps = demo.usage[m.FB_USED_MIB].isna().all(axis=1)
    assert 0 < gaps.sum() < 0.05 * len(gaps)
    assert all(frame[gaps].isna().all().all() for frame in demo.usage.values())


def _builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_demo", REPO / "benchmarks" / "build_demo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["build_demo"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def test_builder_says_clearly_when_the_traces_are_missing(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="public traces not found under"):
        _builder().main(["--shared", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out")])


def test_builder_reproduces_the_bundled_demo_exactly(tmp_path: Path, demo: Snapshot,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    shared = _shared_data()
    if not (shared / "alibaba-servegen").is_dir():
        pytest.skip(f"public traces not found at {shared} (set GPU_RIGHTSIZER_SHARED): cannot rebuild the demo")
    assert _builder().main(["--shared", str(shared), "--out", str(tmp_path)]) == 0
    assert "wrote 16 workloads" in capsys.readouterr().out
    assert (tmp_path / "snapshot.json").read_bytes() == (demo_path() / "snapshot.json").read_bytes()
    rebuilt = read_snapshot(tmp_path)
    assert rebuilt.workloads == demo.workloads
    assert list(rebuilt.usage) == list(demo.usage)
    for metric, frame in demo.usage.items():
        pd.testing.assert_frame_equal(rebuilt.usage[metric], frame)
