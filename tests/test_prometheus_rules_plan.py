"""Which families recording rules stand in for, and over which steps: pure planning, no server."""

from __future__ import annotations

import pytest

from collectors.prometheus import rules
from collectors.prometheus.chunks import Chunk
from recommender.core import usage as m
from recommender.core.settings_sources import PrometheusSettings

FINE = Chunk(0.0, 600.0 * 99, 600.0)  # 100 steps of 600 s
COARSE = Chunk(0.0, 3600.0 * 16, 3600.0)
END = 1_795_720_800.0  # a whole hour


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


def _step(metric: str, size: str = "10m") -> str:
    return f"namespace_pod:{metric}:step{size}"


def test_step_series_are_named_apart_from_range_series() -> None:
    assert rules.step_range_s(_step(m.FB_USED_MIB)) == 600 and rules.step_range_s(_step(m.POWER_W, "1h")) == 3600
    assert rules.step_range_s(_name(m.FB_USED_MIB)) is None and rules.step_range_s("team:fb:step10m") is None
    assert rules.step_name(m.KV_USAGE_FRAC, 600) == _step(m.KV_USAGE_FRAC)
    assert rules.recorded_range_s(_step(m.FB_USED_MIB)) is None  # never taken for a 10 min range series


def test_the_coarsest_source_covering_a_step_is_read_and_the_last_two_steps_from_finer_ones() -> None:
    present = {_name(m.FB_USED_MIB): 0.0, _step(m.FB_USED_MIB): 30_000.0, _step(m.KV_USAGE_FRAC): 0.0,
               _step(m.FB_USED_MIB, "5m"): 0.0}
    every = {_name(m.FB_USED_MIB): 60.0, _step(m.FB_USED_MIB): 600.0, _step(m.KV_USAGE_FRAC): 600.0,
             _step(m.FB_USED_MIB, "5m"): 300.0}
    plan = rules.choose(present, every, PrometheusSettings(), 600, FINE)
    fb = plan.stepped[m.FB_USED_MIB]
    assert fb.name == _step(m.FB_USED_MIB) and (fb.from_s, fb.to_s) == (30_600.0, FINE.end_s - 1200)  # 10m over 5m
    got = rules.segments(FINE, plan.recorded[m.FB_USED_MIB], fb)
    assert got == [("raw", Chunk(0.0, 0.0, 600.0)), ("range", Chunk(600.0, 30_000.0, 600.0)),
                   ("step", Chunk(30_600.0, FINE.end_s - 1200, 600.0)),
                   ("range", Chunk(FINE.end_s - 600, FINE.end_s, 600.0))]
    # no range series: raw before and after the step series
    kv = rules.segments(FINE, plan.recorded.get(m.KV_USAGE_FRAC), plan.stepped[m.KV_USAGE_FRAC])
    assert [s for s, _ in kv] == ["raw", "step", "raw"] and kv[-1][1].steps == 2
    line = plan.line({m.FB_USED_MIB, m.KV_USAGE_FRAC}, FINE.start_s)
    assert "2 of 2 families recorded (2m every 1m)" in line and "; 2 read at 10m steps (every 10m) from" in line
    q, shift = rules.step_query(fb, rules.Scope(("a",)), 1200)
    assert shift == 1200.0
    assert q == 'max_over_time({__name__="namespace_pod:fb_used_mib:step10m",namespace=~"a",pod!=""}[1200s] offset 1ms)'
    assert rules.step_query(plan.stepped[m.KV_USAGE_FRAC], rules.Scope(()), 600)[0].startswith("max_over_time(")


@pytest.mark.parametrize(("metric", "size", "interval", "window", "why"), [
    (m.FB_USED_MIB, 600, 600.0, 600, None),
    (m.FB_USED_MIB, 600, 300.0, 1200, None),  # a peak of blocks: any number of evaluations each
    (m.FB_USED_MIB, 600, 600.0, 120, "step window 2m is not a multiple of the step series' 10m"),
    (m.FB_USED_MIB, 600, 900.0, 600, "evaluated every 15m, longer than its 10m step: gaps"),
    (m.TTFT_P95_S, 600, 600.0, 600, None),
    (m.TTFT_P95_S, 600, 600.0, 1200, "a quantile over 20m does not combine from 10m ones"),
    (m.POWER_W, 600, 240.0, 1200, "evaluated every 4m, not a divisor of its 10m step: blocks weigh unequally"),
    (m.POWER_W, 600, 240.0, 600, None),  # one block: every evaluation in it records the same value
    (m.POWER_W, 600, 300.0, 1200, None),
    (m.FB_USED_MIB, 600, None, 600, "step series too short to tell its interval"),
])
def test_step_series_that_cannot_be_read_say_why(metric: str, size: int, interval: float | None, window: int,
                                                 why: str | None) -> None:
    fam = next(f for f in rules.FAMILIES if f.metric == metric)
    assert rules.step_unusable(fam, size, interval, window, objective_s=2.0) == why


def test_a_step_series_starting_too_late_or_for_another_objective_is_not_read() -> None:
    late = {_step(m.FB_USED_MIB): FINE.end_s - 1200.0}  # its first whole window ends after the last block read
    plan = rules.choose(late, dict.fromkeys(late, 600.0), PrometheusSettings(), 600, FINE)
    assert m.FB_USED_MIB not in plan.stepped and plan.step_because[m.FB_USED_MIB].startswith("recorded only since")
    assert "step series unused: fb_used_mib (recorded only since" in plan.line({m.FB_USED_MIB}, 0.0)
    over = {_step(m.TTFT_OVER_OBJECTIVE_RATE): 0.0}
    plan = rules.choose(over, dict.fromkeys(over, 600.0), PrometheusSettings(), 600, FINE, objective_s=1.0)
    assert plan.step_because[m.TTFT_OVER_OBJECTIVE_RATE] == "recorded for a 2 s TTFT objective, not 1 s"


def test_the_step_rule_is_the_raw_query_at_the_aligned_block_before_the_last() -> None:
    raw = rules.usage_query(m.POWER_W, rules.Scope(()), 600)
    assert rules.step_rule_expr(m.POWER_W, 600) == f"last_over_time(({raw})[600s:600s] offset 600s)"


def test_the_census_of_recorded_series_counts_each_name_before_it_looks_5_min_earlier() -> None:
    got = rules.census_query(rules.Scope(("a",)), PrometheusSettings())
    sel = got.split(") or ")[0].removeprefix("count by (__name__) (")
    assert sel.startswith('{namespace=~"a",pod!="",__name__=~') and ":step[0-9]+[smh]" in sel and ":[0-9]+" in sel
    steps = '{namespace=~"a",pod!="",__name__=~"' + rules.step_names_regex() + '"}'
    # one count per name on each side of the `or`, matched on the name: names, not each pod's series; only the
    # step series (evaluated every 10 min) looked for 5 min earlier
    assert got == f"count by (__name__) ({sel}) or on(__name__) count by (__name__) ({steps} offset 5m)"


@pytest.mark.parametrize(("coarse", "want"), [
    (Chunk(0.0, 3600.0 * 335, 3600.0), Chunk(3600.0 * 5, 3600.0 * 335, 6 * 3600.0)),  # 14 d: 56 instants, 6 h
    (Chunk(600.0, 600.0 * 288, 600.0), Chunk(600.0 * 6, 600.0 * 288, 3600.0)),  # 48 h at 10 min: hourly
    (Chunk(0.0, 3600.0 * 40, 3600.0), Chunk(0.0, 3600.0 * 40, 3600.0)),  # few steps: the inventory step itself
])
def test_the_census_of_recorded_series_is_coarser_and_ends_at_the_last_step(coarse: Chunk, want: Chunk) -> None:
    got = rules.census_chunk(coarse)
    assert got == want and got.steps <= rules.CENSUS_POINTS + 1
    assert (got.start_s - coarse.start_s) % coarse.step_s == 0 and got.start_s - coarse.start_s < got.step_s


@pytest.mark.parametrize(("since", "want"), [
    (Chunk(END - 600.0, END, 600.0), Chunk(END - 6 * 3600.0, END, 6 * 3600.0)),  # the last 2 steps: 6 h back
    (Chunk(END - 2 * 86_400.0, END, 600.0), Chunk(END - 54 * 3600.0, END, 6 * 3600.0)),  # 2 d and a window
])
def test_the_census_of_new_steps_reaches_a_window_before_them_and_6_hours_back(since: Chunk, want: Chunk) -> None:
    got = rules.census_since(since, Chunk(END - 335 * 3600.0, END, 3600.0), 600)
    assert got == want
    assert got.start_s <= since.start_s - 600 and got.end_s - got.start_s >= rules.MAX_STEP_SPAN_S


def test_renamed_exporter_labels_read_its_families_raw_and_say_why() -> None:
    present = {_name(m.FB_USED_MIB): 0.0, _name(m.KV_USAGE_FRAC): 0.0, _name(m.POWER_W): 0.0}
    plan = rules.exporter_raw(rules.choose(present, dict.fromkeys(present, 60.0), PrometheusSettings(), 600, FINE))
    assert set(plan.recorded) == {m.KV_USAGE_FRAC}  # vLLM's series name their pods themselves
    assert plan.raw_because[m.FB_USED_MIB] == plan.raw_because[m.POWER_W] == rules.RENAMED_WHY
    assert f"raw: fb_used_mib, power_w ({rules.RENAMED_WHY})" in \
        plan.line({m.FB_USED_MIB, m.KV_USAGE_FRAC, m.POWER_W}, FINE.start_s)
