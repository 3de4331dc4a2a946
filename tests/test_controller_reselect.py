"""The controller carries each workload's forecast model choices from one cycle to the next: the loop
(``Controller`` over kmock, its plan function ``rightsizer controller``'s ``Cycle`` over a real Prometheus)
refits a choice younger than ``forecast.reselect_s`` and chooses again after it."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pytest

import recommender.cli.main  # noqa: F401  (recommender.cli.controller needs main's helpers loaded first)
from recommender.analysis.forecast import api
from recommender.cli.controller import Cycle
from recommender.controller.loop import Controller
from recommender.controller.policy import Mode
from recommender.core.plan import Plan
from recommender.core.settings import ForecastSettings, Settings
from recommender.core.settings_sources import KubernetesSettings, PrometheusSettings
from recommender.outputs.jsondoc import render_json
from recommender.pipeline.planstore import PlanStore
from recommender.pipeline.run import run_cycle, run_once
from tests.kubewrite import WriteCluster
from tests.promcluster import Cluster

pytestmark = pytest.mark.prometheus
REFITTED = "refitted without a new backtest"


@pytest.fixture
def backtests(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How many model selections (backtests over every candidate) the forecasts ran."""
    seen: Counter[str] = Counter()
    fit = api.AutoForecaster.fit

    def counted(self: Any, y: Any) -> Any:
        seen["selections"] += 1
        return fit(self, y)

    monkeypatch.setattr(api.AutoForecaster, "fit", counted)
    return seen


def _reasons(store: PlanStore) -> list[list[str]]:
    latest = store.latest()
    assert latest is not None
    return [list(f.reasons) for r in latest.plan.recommendations for f in r.forecasts]


def test_a_controller_cycle_within_reselect_s_refits_the_choice_and_after_it_chooses_again(
        cluster: Cluster, backtests: Counter[str]) -> None:
    s = Settings(history_s=86_400, prometheus=PrometheusSettings(url=cluster.url),
                 kubernetes=KubernetesSettings(enabled=False), forecast=ForecastSettings(reselect_s=3600.0))
    store = PlanStore()
    cycle = Cycle("prometheus", None, s, store)
    at: list[datetime] = [cluster.end - timedelta(minutes=90)]
    with WriteCluster([]) as kube:
        ctl = Controller(kube.kube(), cycle, clock=lambda: at[0], store=store, max_mode=Mode.RECOMMEND)

        assert not ctl.reconcile().errors
        first, chosen = backtests["selections"], cycle.choices
        assert first > 0 and sum(len(c) for c in chosen.values()) == first  # one choice per series forecast
        assert not any(REFITTED in line for reasons in _reasons(store) for line in reasons)

        at[0] += timedelta(minutes=30)  # within reselect_s: every series' model refitted, none chosen
        assert not ctl.reconcile().errors
        assert backtests["selections"] == first
        assert cycle.choices == chosen
        refitted = _reasons(store)
        assert len(refitted) == first and all(any(REFITTED in line for line in r) for r in refitted)

        at[0] += timedelta(minutes=60)  # 90 min after the choices: chosen again, on the newer history
        assert not ctl.reconcile().errors
        assert backtests["selections"] == 2 * first
        assert not any(REFITTED in line for reasons in _reasons(store) for line in reasons)
        later = [c.chosen_at for choices in cycle.choices.values() for c in choices.values()]
        assert later and min(later) > max(c.chosen_at for choices in chosen.values() for c in choices.values())


def test_a_one_shot_plan_is_the_first_cycle_s(cluster: Cluster) -> None:
    """``run_once`` (the report: no earlier choices) and a loop's first cycle give the same plan."""
    from recommender.cli.app import collect

    s = Settings(history_s=86_400, prometheus=PrometheusSettings(url=cluster.url),
                 kubernetes=KubernetesSettings(enabled=False))
    snap = collect("prometheus", None, s, cluster.end)
    once = run_once(snap, s, cluster.end)
    first = run_cycle(snap, s, cluster.end, choices={})
    assert first.choices and run_cycle(snap, s, cluster.end).choices == {}

    def doc(plan: Plan) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(render_json(plan, snap))
        out.pop("timings", None)
        return out

    assert doc(once) == doc(first.plan)
