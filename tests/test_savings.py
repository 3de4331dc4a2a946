"""Fleet totals: GPU-hours under the scaling plans beside held and needed."""

from __future__ import annotations

from dataclasses import replace

import pytest

from policies.catalogue import load_catalogue
from policies.savings import autoscaled_gpus, summarize
from recommender import model as m
from recommender.model import ScalingPlan
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
