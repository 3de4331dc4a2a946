"""Which families recording rules stand in for, and over which steps: pure planning, no server."""

from __future__ import annotations

import pytest

from collectors.prometheus import rules
from collectors.prometheus.chunks import Chunk
from recommender.core import usage as m
from recommender.core.settings_sources import PrometheusSettings

FINE = Chunk(0.0, 600.0 * 99, 600.0)  # 100 steps of 600 s
COARSE = Chunk(0.0, 3600.0 * 16, 3600.0)


def _name(metric: str, rng: str = "2m") -> str:
    return f"namespace_pod:{metric}:{rng}"


def test_coverage_is_the_last_unbroken_run_up_to_the_end() -> None:
    def item(name: str, hours: list[int]) -> dict[str, object]:
        return {"metric": {"__name__": name}, "values": [[h * 3600, "5"] for h in hours]}

    got = rules.coverage([item("a", list(range(17))), item("b", [0, 1, 2, 9, 10, 11, 12, 13, 14, 15, 16]),
                          item("c", [0, 1, 2, 3])], COARSE)
    assert got == {"a": 0.0, "b": 9 * 3600.0}  # c stopped before the end: not used


def test_rules_stand_in_from_one_window_after_they_start() -> None:
    present = {_name(m.FB_USED_MIB): 0.0, _name(m.KV_USAGE_FRAC): 29_990.0}
    every = dict.fromkeys(present, 60.0)
    plan = rules.choose(present, every, PrometheusSettings(), 600, FINE)
    assert plan.recorded[m.FB_USED_MIB].from_s == 600.0  # the first step whose window lies after 0
    assert plan.recorded[m.KV_USAGE_FRAC].from_s == 30_600.0  # 29,990 + one window → the next step
    raw, rec = rules.split_range(FINE, plan.recorded[m.KV_USAGE_FRAC])
    assert raw == Chunk(0.0, 30_000.0, 600.0) and rec == Chunk(30_600.0, FINE.end_s, 600.0)
    assert plan.raw_because[m.POWER_W] == "no recorded series"
    line = plan.line({m.FB_USED_MIB, m.KV_USAGE_FRAC, m.POWER_W}, FINE.start_s)
    assert line.startswith("recording rules: 2 of 3 families recorded (2m every 1m), 2 only from") and \
        "raw: power_w (no recorded series)" in line


@pytest.mark.parametrize(("metric", "rng", "interval", "window", "why"), [
    (m.FB_USED_MIB, 300, 60.0, 120, "step window 2m is not a multiple of the rule's 5m"),
    (m.FB_USED_MIB, 120, 300.0, 600, "evaluated every 5m, longer than its 2m range: gaps"),
    (m.TTFT_P95_S, 120, 60.0, 600, "a quantile over 10m does not combine from 2m ones"),
    (m.TTFT_P95_S, 120, 60.0, 120, None),
    (m.FB_USED_MIB, 600, 600.0, 600, None),
])
def test_rules_that_cannot_stand_in_say_why(metric: str, rng: int, interval: float, window: int,
                                            why: str | None) -> None:
    fam = next(f for f in rules.FAMILIES if f.metric == metric)
    assert rules.unusable(fam, rng, interval, window, shipped=True, objective_s=2.0) == why


def test_another_ttft_objective_skips_the_shipped_rule_but_not_a_users() -> None:
    fam = next(f for f in rules.FAMILIES if f.over_objective)
    assert "2 s TTFT objective, not 1 s" in (rules.unusable(fam, 120, 60.0, 120, shipped=True, objective_s=1.0) or "")
    assert rules.unusable(fam, 120, 60.0, 120, shipped=False, objective_s=1.0) is None


def test_a_users_series_comes_first_and_the_largest_usable_shipped_range_next() -> None:
    p = PrometheusSettings(recorded_series={m.POWER_W: "gpu:power:10m"})
    present = {"gpu:power:10m": 0.0, _name(m.POWER_W): 0.0, _name(m.FB_USED_MIB): 0.0,
               _name(m.FB_USED_MIB, "10m"): 0.0, _name(m.FB_USED_MIB, "7m"): 0.0}
    every = dict.fromkeys(present, 60.0)
    plan = rules.choose(present, every, p, 600, FINE)
    assert plan.recorded[m.POWER_W].name == "gpu:power:10m" and plan.recorded[m.POWER_W].range_s == 600
    assert plan.recorded[m.FB_USED_MIB].range_s == 600  # 10m divides the window; 7m would not
    q = rules.recorded_query(plan.recorded[m.FB_USED_MIB], rules.Scope(("a",)), 600)
    assert q == 'max_over_time({__name__="namespace_pod:fb_used_mib:10m",namespace=~"a",pod!=""}[300s:600s])'


def test_user_recorded_series_must_name_a_metric_and_a_range() -> None:
    with pytest.raises(ValueError, match="is not a metric we read"):
        PrometheusSettings(recorded_series={"gpu_temp": "x:5m"})
    with pytest.raises(ValueError, match="last ':' segment is its range"):
        PrometheusSettings(recorded_series={m.POWER_W: "gpu_power"})


def test_the_interval_is_the_span_over_the_samples() -> None:
    names = {"a": 0.0, "b": 7_000.0 - 600}
    result = [{"metric": {rules.RULE_TAG: "a"}, "value": [7_000, "61"]},  # both ends of the hour in
              {"metric": {rules.RULE_TAG: "b"}, "value": [7_000, "5"]}]  # 600 s, left end out: 5 at 120 s
    assert rules.intervals(result, names, 7_000.0) == {"a": 60.0, "b": 133.0}
    assert 'label_replace(max(count_over_time({__name__="b"' in rules.interval_query(names, rules.Scope(()), 7_000.0)


def test_every_family_may_be_recorded_and_nothing_else() -> None:
    from recommender.core.settings_sources import RECORDABLE

    assert sorted(RECORDABLE) == sorted(f.metric for f in rules.FAMILIES)
