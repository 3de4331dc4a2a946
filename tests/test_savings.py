"""Fleet totals: GPU-hours under the scaling plans beside held and needed, and on the recommended shape."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest

from policies.compute import compute_held
from policies.replicas import ReplicaHistory
from policies.savings import autoscaled_gpus, summarize
from recommender.core import usage as m
from recommender.core.catalogue import load_catalogue
from recommender.core.inventory import Allocation, Sharing
from recommender.core.plan import Recommendation, ScalingPlan
from recommender.mechanisms.hami import HamiShare
from recommender.mechanisms.mig import MigShare
from recommender.mechanisms.mps import MpsShare
from tests import planfixture as pf

WINDOW_S = (pf.END - pf.START).total_seconds()


def _scaling(mean: float | None) -> ScalingPlan:
    return ScalingPlan(metric=m.REQUEST_RATE, per_replica_capacity=10.0, target_per_replica=7.0, min_replicas=1,
                       max_replicas=10, recommended_replicas=3, activation_threshold=0.0, cooldown_s=300,
                       scale_to_zero=False, headroom_frac=0.3, cold_start_s=None, mean_replicas=mean)


def test_autoscaled_gpu_hours_count_todays_replica_shape_under_the_plan() -> None:
    recs = list(pf.recommendations())
    i, first = next((i, r) for i, r in enumerate(recs) if r.workload.allocation.replicas > 1)
    recs[i] = replace(first, scaling=_scaling(0.5))
    recs.append(replace(recs[-1], scaling=_scaling(None)))  # a plan without a mean counts as held
    s = summarize(recs, WINDOW_S, load_catalogue())
    per_replica = first.gpus_held / first.workload.allocation.replicas
    assert autoscaled_gpus(recs[i]) == pytest.approx(per_replica * 0.5)
    expected = (sum(r.gpus_held for r in recs) - first.gpus_held + per_replica * 0.5) * WINDOW_S / 3600
    assert s.gpu_hours_autoscaled == pytest.approx(expected, abs=0.05) and s.autoscaled_workloads == 1
    assert s.gpu_hours_autoscaled < s.gpu_hours_held


def test_no_mean_means_no_autoscaled_figure() -> None:
    s = summarize(pf.recommendations(), WINDOW_S, load_catalogue())
    assert s.gpu_hours_autoscaled is None and s.autoscaled_workloads == 0


# -- right-sized and autoscaled: the plan's mean on the recommended shape ---------------------------------------

A100 = {"gpu_model": "A100-80GB"}
WHOLE = Allocation(Sharing.EXCLUSIVE, gpus=1, gpu_equivalents=1.0, replicas=2, **A100)  # type: ignore[arg-type]
SLICE_3G = replace(WHOLE, sharing=Sharing.MIG, gpus=0, share=MigShare("3g.40gb", 1), gpu_equivalents=0.5)


def _rate(values: list[float]) -> ReplicaHistory:
    index = pd.date_range("2026-01-01", periods=len(values), freq="600s", tz="UTC")
    return ReplicaHistory(600.0, pd.Series(values, index=index, dtype=float))


def _rec(now: Allocation, after: Allocation | None, mean: float | None = 1.0) -> Recommendation:
    rec = pf.recommendations()[0]
    return replace(rec, workload=replace(rec.workload, allocation=now), recommended=after,
                   gpus_held=now.total_gpu_equivalents,
                   gpus_needed=after.total_gpu_equivalents if after else now.total_gpu_equivalents,
                   scaling=_scaling(mean))


@pytest.mark.parametrize(("alloc", "expected"), [
    (WHOLE, 1.0),
    (replace(WHOLE, gpus=2), 2.0),
    (SLICE_3G, 3 / 7),
    (replace(SLICE_3G, share=MigShare("5g.60gb", 1)), None),  # not an A100-80GB profile
    (replace(WHOLE, sharing=Sharing.MPS, share=MpsShare(40.0)), 0.4),
    (replace(WHOLE, sharing=Sharing.HAMI, share=HamiShare(None, 30.0)), 0.3),
    (replace(WHOLE, sharing=Sharing.TIME_SLICING, gpu_equivalents=0.25), 0.25),
    (replace(WHOLE, sharing=Sharing.NONE, gpus=0), None),
])
def test_compute_held_per_replica(alloc: Allocation, expected: float | None) -> None:
    assert compute_held(alloc, load_catalogue()) == (None if expected is None else pytest.approx(expected))


def test_the_fleet_figure_adds_right_sizing_and_autoscaling() -> None:
    cat = load_catalogue()
    slice_rec = _rec(WHOLE, SLICE_3G, mean=3.0)  # 7 replicas of a 3g slice on average (scaling_plan's estimate)
    assert slice_rec.scaling is not None
    slice_rec = replace(slice_rec, scaling=replace(slice_rec.scaling, mean_replicas_right_sized=7.0))
    others = list(pf.recommendations())
    s = summarize([slice_rec, *others], WINDOW_S, cat)
    expected = (7 * 0.5 + sum(r.gpus_needed for r in others)) * WINDOW_S / 3600
    assert s.gpu_hours_right_sized_autoscaled == pytest.approx(expected, abs=0.05)
    assert s.right_sized_autoscaled_workloads == 1
    assert summarize(others, WINDOW_S, cat).gpu_hours_right_sized_autoscaled is None
