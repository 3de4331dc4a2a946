"""The forecast benchmark's summaries: MAE ratios that exact zeros cannot flatter, and the fixed ServeGen split."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_forecast", REPO / "benchmarks" / "forecast.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_pooled_median_and_geometric_ratios(bench: ModuleType) -> None:
    # per series, ours / baseline: 0/0 (both exact, a tie: 1), 2/1, 3/6, 0/2
    r = bench.mae_ratios(np.array([0.0, 2.0, 3.0, 0.0]), np.array([0.0, 1.0, 6.0, 2.0]))
    assert r.pooled == pytest.approx(5 / 9)
    assert r.median == pytest.approx(0.75)  # of 0, 0.5, 1, 2
    assert r.geometric == pytest.approx(1.0) and r.geometric_series == 2  # only 2/1 and 3/6 have both non-zero
    assert (r.worse, r.series) == (1, 4)


def test_an_error_against_an_exact_baseline_is_a_loss_not_a_gap(bench: ModuleType) -> None:
    r = bench.mae_ratios(np.array([1.0, 1.0, 1.0]), np.array([0.0, 0.0, 4.0]))
    assert math.isinf(r.median) and r.worse == 2
    assert r.pooled == pytest.approx(3 / 4)


def test_exact_zeros_do_not_move_the_pooled_ratio(bench: ModuleType) -> None:
    ours, base = np.array([2.0, 6.0]), np.array([4.0, 4.0])
    idle = np.zeros(50)  # fifty series idle through every window: both forecasts exact
    assert bench.mae_ratios(np.r_[ours, idle], np.r_[base, idle]).pooled == bench.mae_ratios(ours, base).pooled


@pytest.mark.parametrize(("model", "tune", "clients"), [("m-mid", 58, 109), ("m-small", 20, 43)])
def test_servegen_halves_match_the_split_every_benchmark_uses(bench: ModuleType, model: str, tune: int,
                                                               clients: int) -> None:
    folder = REPO.parent / "shared" / "data" / "alibaba-servegen" / "data" / "language" / model
    if not folder.is_dir():
        pytest.skip(f"ServeGen not found at {folder}")
    halves = [bench.servegen_half(f"{model}/{p.name.removesuffix('-trace.csv')}")
              for p in folder.glob("chunk-*-trace.csv")]
    assert (halves.count("tune"), len(halves)) == (tune, clients)
