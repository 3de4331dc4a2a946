"""Recorded series in place of raw ones: which families the recording rules cover, over which steps, and the
PromQL that reads them. Pure: no I/O (``collect.py`` runs the two queries and hands their answers here).

A recorded series (``deploy/monitoring/recording-rules.yaml``: ``namespace_pod:<metric>:<range>``, or a user's
named in ``recorded_series``) holds, per (namespace, pod), what the family's raw query gives over ``range``
(R), evaluated every interval (I). A step of the report whose window W is a multiple of R is then read as the
W / R tiles of R that make it up (a subquery ``[W:R]``), combined as the family combines time: the peak for
peaks, the mean for means and rates. That holds exactly when W = R and for peaks; for means and rates it is
the mean of equal tiles. A quantile does not combine, so TTFT p95 is read from a rule only when W = R.

Rules start when they are installed: the census of recorded series (:func:`census_query`, its own query at
about ``CENSUS_POINTS`` instants over the window: :func:`census_chunk`) says from which of its instants each one
is present at every instant to the window's end; steps from one window after that instant are read recorded,
earlier steps raw. So a rule is read from at most a census step and a window after it starts, never before;
an absence that falls between two census instants is not seen (see :func:`coverage`). A family falls back to
raw series, and the cost line says why, where no recorded series exists, the step is not a multiple of its
range, it is evaluated less often than its range (gaps), or it was recorded for another TTFT objective.

Step series (``namespace_pod:<metric>:step<S>``, the second group of the shipped rules) hold the family's raw
query over a window of S evaluated at the aligned instants b (multiples of S): each evaluation at t records
the block b = floor(t / S) x S - S (the last complete one but one, so its scrapes have all arrived), whatever
the group's phase. A report step whose window W is a multiple of S reads the W / S blocks that make it up as
one sample each (:func:`step_query`), exactly the raw query's answer where W = S; they are the coarsest source
and are preferred over the range series, which (else raw) fill the steps before them and the last two steps,
whose blocks are not evaluated yet. Where W = k S the blocks combine as the range tiles do (the peak of peaks;
for means, counter rates and the request rate's growth slopes the mean over the blocks, which is the raw
answer for means and for rates up to the extrapolation at each block's ends), so TTFT p95 is read from them
only where W = S; for the mean the group's interval must divide S (each block then holds as many evaluations,
all recording the same value). A group evaluated every 10 min may have no sample within the census' instant
lookback (5 min), so the census also looks 5 min earlier for them (:func:`census_query`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from collectors.prometheus.chunks import Chunk
from collectors.prometheus.queries import FAMILIES, Family, Scope, quote, regex_alternatives, usage_query
from recommender.core.settings_scaling import ScalingSettings
from recommender.core.settings_sources import (
    RECORDABLE,
    PrometheusSettings,
    recorded_metric_name,
    recorded_range_s,
)

if TYPE_CHECKING:  # pandas' module: the census and its rule plan are made before pandas is imported
    from collectors.prometheus.parse import Result

PREFIX = "namespace_pod:"  # the shipped rules' names: namespace_pod:<canonical metric>:<range>
STEP = "step"  # the shipped step series: namespace_pod:<canonical metric>:step<S>
SHIPPED_OBJECTIVE_S = ScalingSettings.model_fields["ttft_objective_s"].default  # the shipped over-objective rule's
RULE_TAG = "rightsizer_rule"  # labels each term of the interval query with the series it counts
MAX_INTERVAL_SPAN_S = 3600  # the interval is counted over the last hour of a recorded series (at most)
LOOKBACK_S = 300  # an instant query's lookback (Prometheus' default): what a census instant sees before it
MAX_STEP_SPAN_S = 6 * 3600  # and over the last 6 h of a step series (36 samples at 10 min: the interval to 2 %)
CENSUS_POINTS = 56  # the census of recorded series: about this many instants over the window (6 h apart at 14 d)
_BY_METRIC = {f.metric: f for f in FAMILIES}


@dataclass(frozen=True)
class Recorded:
    """One family read from a recorded series: its name, range R (s), evaluation interval I (s), and the first
    grid step from which it is read (earlier steps are raw)."""

    metric: str
    name: str
    range_s: int
    interval_s: float
    from_s: float
    to_s: float = math.inf  # the last grid step read from it (step series: blocks evaluated by the window's end)


@dataclass(frozen=True)
class RulePlan:
    """What a collection reads from recording rules, and why each other family present stays raw."""

    recorded: dict[str, Recorded]
    raw_because: dict[str, str]  # metric → why it is read raw
    stepped: dict[str, Recorded] = field(default_factory=dict)  # metric → its step series, where usable
    step_because: dict[str, str] = field(default_factory=dict)  # metric → why its step series is not used

    def line(self, present: set[str], grid_start_s: float) -> str:
        """The cost line's part about the sources, e.g. ``recording rules: 5 of 6 families recorded (2m every 1m),
        5 only from 2026-11-25 13:40 UTC on (raw before); 5 at 10m steps (every 10m) from ..., the last 2 steps
        from finer series; raw: ttft_p95_s (a quantile ...)``."""
        rec = {k: v for k, v in self.recorded.items() if k in present}
        stepped = {k: v for k, v in self.stepped.items() if k in present}
        raw = {k: why for k, why in self.raw_because.items() if k in present and k not in rec and k not in stepped}
        if not rec and not stepped and set(raw.values()) <= {"no recorded series"} and \
                not present & self.step_because.keys():
            return "recording rules: none found, raw series read"
        out = f"recording rules: {len(rec.keys() | stepped.keys())} of {len(present)} families recorded"
        if rec:
            out += f" ({', '.join(sorted({f'{_dur(v.range_s)} every {_about(v.interval_s)}' for v in rec.values()}))})"
            late = [v.from_s for v in rec.values() if v.from_s > grid_start_s]
            if late:
                out += (f", {len(late)} only from {datetime.fromtimestamp(min(late), UTC):%Y-%m-%d %H:%M} UTC on "
                        "(raw before)")
        if stepped:
            kinds = sorted({f"{_dur(v.range_s)} steps (every {_about(v.interval_s)})" for v in stepped.values()})
            first = min(v.from_s for v in stepped.values())
            last = max(v.to_s for v in stepped.values())
            out += (f"; {len(stepped)} read at {', '.join(kinds)} from "
                    f"{datetime.fromtimestamp(first, UTC):%Y-%m-%d %H:%M} to {datetime.fromtimestamp(last, UTC):%H:%M}"
                    " UTC, finer series or raw around them")
        unused: dict[str, list[str]] = {}
        for k, why in sorted(self.step_because.items()):
            if k in present and k not in stepped:
                unused.setdefault(why, []).append(k)
        out += "".join(f"; step series unused: {', '.join(ks)} ({why})" for why, ks in unused.items())
        reasons: dict[str, list[str]] = {}
        for k, why in sorted(raw.items()):
            reasons.setdefault(why, []).append(k)
        return out + "".join(f"; raw: {', '.join(ks)} ({why})" for why, ks in reasons.items())


def _about(seconds: float) -> str:
    """An estimated interval: to the minute where within 5 % of one (608 s → 10m)."""
    minutes = round(seconds / 60)
    return _dur(minutes * 60) if minutes and abs(seconds - minutes * 60) <= 0.05 * minutes * 60 else _dur(seconds)


def _dur(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 3600}h" if s % 3600 == 0 else f"{s // 60}m" if s % 60 == 0 else f"{s}s"


def candidates(p: PrometheusSettings) -> dict[str, tuple[str, ...]]:
    """Series names each family may be read from, the user's first; the shipped ones as a regex over any range."""
    out: dict[str, tuple[str, ...]] = {}
    for metric in RECORDABLE:
        mine = p.recorded_series.get(metric)
        out[metric] = ((recorded_metric_name(mine),) if mine else ()) + (f"{PREFIX}{metric}:",)
    return out


def names_regex(p: PrometheusSettings) -> str:
    """The recorded series' names the census counts besides the raw ones (the shipped ones at any range). They
    are selected with the same namespaces and extra matchers as the raw series, so a rule without those labels
    is absent, and not used."""
    mine = sorted({recorded_metric_name(n) for n in p.recorded_series.values()})
    shipped = f"{regex_alternatives([PREFIX])}({'|'.join(RECORDABLE)}):[0-9]+[smh]"
    return "|".join([regex_alternatives(mine), shipped] if mine else [shipped])


def step_names_regex() -> str:
    """The shipped step series' names at any step (``namespace_pod:<metric>:step<S>``)."""
    return f"{regex_alternatives([PREFIX])}({'|'.join(RECORDABLE)}):{STEP}[0-9]+[smh]"


def census_listings(scope: Scope, p: PrometheusSettings) -> tuple[tuple[str, int], tuple[str, int]]:
    """The census of recorded series as two series listings per instant t (``/api/v1/series``, which reads the
    index and no chunk), each as (selector, how far before t it looks, s): the range series over the instant
    lookback (5 min), the step series over 10 min (the count's lookback and its look 5 min earlier,
    :func:`census_query`). A listing names a series whose samples reach into that span."""
    return ((scope.matchers(None, also=f"__name__=~{quote(names_regex(p))}"), LOOKBACK_S),
            (scope.matchers(None, also=f"__name__=~{quote(step_names_regex())}"), 2 * LOOKBACK_S))


def census_query(scope: Scope, p: PrometheusSettings) -> str:
    """Recorded series (range and step series, a user's named ones) per name at each instant of the census,
    and the step series 5 min earlier where the instant has none of a name: a group evaluated every 10 min may
    have no sample within the instant lookback (5 min). Each term is counted per name before the ``or``, so it
    matches a few names, not each pod's series (whose matching cost grew with the fleet); ``on(__name__)``, as a
    plain ``or`` ignores the name and would drop every earlier count at an instant with any later one."""
    sel = scope.matchers(None, also=f"__name__=~{quote(f'{names_regex(p)}|{step_names_regex()}')}")
    steps = scope.matchers(None, also=f"__name__=~{quote(step_names_regex())}")
    return f"count by (__name__) ({sel}) or on(__name__) count by (__name__) ({steps} offset 5m)"


def census_chunk(coarse: Chunk) -> Chunk:
    """The census of recorded series' instants: a multiple of the inventory step (``coarse.step_s``) giving
    about ``CENSUS_POINTS`` over the window, the last at its last step (where coverage must reach).

    Example: 14 d at hourly inventory steps → every 6 h, 56 instants."""
    step = coarse.step_s * max(1, math.ceil((coarse.steps - 1) / CENSUS_POINTS))
    return Chunk(coarse.end_s - math.floor((coarse.end_s - coarse.start_s) / step) * step, coarse.end_s, step)


def census_since(since: Chunk, coarse: Chunk, window_s: int) -> Chunk:
    """The census of recorded series for a collection of the steps of ``since`` only (a cache holds the earlier
    ones): at :func:`census_chunk`'s step, from an instant at least a window before ``since`` starts (so its
    first step can be read recorded, as the full census allowed) and ``MAX_STEP_SPAN_S`` before its end (so the
    evaluation intervals are counted over as long a span as after a full census), to its end. Counted over
    ``since`` alone, the steps read again would be read raw where the full collection read them recorded."""
    step = census_chunk(coarse).step_s
    k = max(1, math.ceil((since.end_s - min(since.start_s - window_s, since.end_s - MAX_STEP_SPAN_S)) / step))
    return Chunk(since.end_s - k * step, since.end_s, step)


def step_range_s(name: str) -> int | None:
    """S of a step series' name (``namespace_pod:fb_used_mib:step10m`` → 600); None for any other name."""
    hit = re.fullmatch(f"{step_names_regex()[:-len('[0-9]+[smh]')]}([0-9]+[smh])", name)
    return recorded_range_s(f"x:{hit.group(2)}") if hit else None


def step_name(metric: str, step_s: int) -> str:
    """The shipped step series of ``metric`` at step ``step_s``."""
    return f"{PREFIX}{metric}:{STEP}{_dur(step_s)}"


def coverage(result: Result, coarse: Chunk) -> dict[str, float]:
    """From the census answer (a range query at ``coarse``), per recorded name the first step of its last run
    of consecutive steps with series that reaches the window's last step; names absent there are left out.
    Only the instants are seen: a name present at each of them is taken as present between them."""
    out = {}
    for item in result:
        name = (item.get("metric") or {}).get("__name__")
        times = sorted(float(t) for t, v in item.get("values") or () if float(v) > 0)
        if not name or not times or times[-1] < coarse.end_s:
            continue
        first = times[-1]
        for t in reversed(times[:-1]):
            if first - t > coarse.step_s * 1.5:
                break
            first = t
        out[name] = first
    return out


def interval_query(names: dict[str, float], scope: Scope, end_s: float) -> str:
    """Per recorded name (→ the time it covers from) the most samples any of its series has over its last hour
    (or less, where it starts later), each term labelled with the name (a function drops ``__name__``)."""
    terms = []
    for name, since in sorted(names.items()):
        span = spans_s(since, end_s, name)
        terms.append(f'label_replace(max(count_over_time({scope.matchers(name)}[{span}s])), "{RULE_TAG}", '
                     f'{quote(name)}, "", "")')
    return " or ".join(terms)


def spans_s(since_s: float, end_s: float, name: str = "") -> int:
    """The span the interval of a series recorded since ``since_s`` is counted over: at most an hour (6 h for a
    step series, evaluated less often)."""
    longest = MAX_STEP_SPAN_S if step_range_s(name) else MAX_INTERVAL_SPAN_S
    return int(max(60, min(longest, end_s - since_s)))


def intervals(result: Result, names: dict[str, float], end_s: float) -> dict[str, float]:
    """Evaluation interval per recorded name (s) from :func:`interval_query`'s instant answer: span / samples,
    to the second (half a sample off either way); names with fewer than two samples are left out (their
    interval cannot be told)."""
    out = {}
    for item in result:
        name = (item.get("metric") or {}).get(RULE_TAG)
        value = item.get("value") or (item.get("values") or [[0, "0"]])[-1]
        count = float(value[1])
        if name in names and count >= 2:
            # a range closed at both ends (2.x) holds span / I + 1 samples, one open at the left (3.x) span / I
            out[name] = float(round(spans_s(names[name], end_s, name) / (count - 0.5)))
    return out


def choose(present: dict[str, float], every: dict[str, float], p: PrometheusSettings, window_s: int,
           fine: Chunk, objective_s: float | None = None) -> RulePlan:
    """Which families to read recorded, from which grid step, and why each other stays raw.

    ``present``: recorded name → covered from (:func:`coverage`); ``every``: name → evaluation interval
    (:func:`intervals`). Per family the user's series first, else the shipped one of the largest usable range.
    """
    objective = SHIPPED_OBJECTIVE_S if objective_s is None else objective_s
    recorded: dict[str, Recorded] = {}
    why: dict[str, str] = {}
    for metric, names in candidates(p).items():
        fam = _BY_METRIC[metric]
        mine = names[0] if len(names) == 2 else None
        found = [n for n in present if n == mine] or sorted(
            (n for n in present if n.startswith(names[-1]) and recorded_range_s(n) is not None),
            key=lambda n: -(recorded_range_s(n) or 0))
        if not found:
            why[metric] = "no recorded series"
            continue
        reasons = []
        for name in found:
            r = recorded_range_s(p.recorded_series[metric] if name == mine else name) or 0
            i = every.get(name)
            reason = unusable(fam, r, i, window_s, shipped=name != mine, objective_s=objective)
            if reason:
                reasons.append(reason)
                continue
            assert i is not None
            first = first_step(present[name], window_s, fine)
            if first is None:
                reasons.append(f"recorded only since {datetime.fromtimestamp(present[name], UTC):%H:%M} UTC")
                break
            recorded[metric] = Recorded(metric, name, r, i, first)
            break
        if metric not in recorded:
            why[metric] = reasons[0] if reasons else "no recorded series"
    stepped, step_why = _choose_steps(present, every, window_s, fine, objective)
    return RulePlan(recorded, why, stepped, step_why)


RENAMED_WHY = "dcgm-exporter names its pods in other labels than the scrape's: recorded by the exporter's own pods"


def exporter_raw(plan: RulePlan) -> RulePlan:
    """``plan`` with dcgm-exporter's families read raw: where it names its pods in other labels than the scrape's
    (``Scope.exporter``), a rule that groups them by pod groups them by the exporter's own."""
    out = {f.metric for f in FAMILIES if f.exporter}
    return RulePlan({k: v for k, v in plan.recorded.items() if k not in out},
                    {**plan.raw_because, **dict.fromkeys(out, RENAMED_WHY)},
                    {k: v for k, v in plan.stepped.items() if k not in out},
                    {**plan.step_because, **dict.fromkeys(out & (plan.stepped.keys() | plan.step_because.keys()),
                                                            RENAMED_WHY)})


def _choose_steps(present: dict[str, float], every: dict[str, float], window_s: int, fine: Chunk,
                  objective_s: float) -> tuple[dict[str, Recorded], dict[str, str]]:
    """Per family the step series of the largest usable step S, the grid steps it covers (from one window after
    it starts to the last step whose blocks are evaluated by the window's end, 2 S before it), and why the
    family's step series are not used where none is."""
    stepped: dict[str, Recorded] = {}
    why: dict[str, str] = {}
    for metric in RECORDABLE:
        fam = _BY_METRIC[metric]
        found = sorted((n for n in present if step_range_s(n) and n.startswith(f"{PREFIX}{metric}:")),
                       key=lambda n: -(step_range_s(n) or 0))
        for name in found:
            size = step_range_s(name) or 0
            reason = step_unusable(fam, size, every.get(name), window_s, objective_s)
            first = first_step(present[name], window_s, fine)
            last = fine.start_s + math.floor((fine.end_s - 2 * size - fine.start_s) / fine.step_s) * fine.step_s
            if reason is None and (first is None or last < first):
                reason = f"recorded only since {datetime.fromtimestamp(present[name], UTC):%H:%M} UTC"
            if reason is not None:
                why.setdefault(metric, reason)
                continue
            assert first is not None
            stepped[metric] = Recorded(metric, name, size, every[name], first, last)
            why.pop(metric, None)
            break
    return stepped, why


def step_unusable(fam: Family, step_s: int, interval_s: float | None, window_s: int, objective_s: float
                  ) -> str | None:
    """Why a step series of blocks of ``step_s`` evaluated every ``interval_s`` cannot be read at ``window_s``
    (None: it can). Every evaluation within a block records the same value, so a block needs one at least;
    blocks combine as their mean only when each holds as many evaluations."""
    if interval_s is None:
        return "step series too short to tell its interval"
    if window_s % step_s:
        return f"step window {_dur(window_s)} is not a multiple of the step series' {_dur(step_s)}"
    if interval_s > step_s * 1.02:
        return f"evaluated every {_dur(interval_s)}, longer than its {_dur(step_s)} step: gaps"
    if fam.quantile is not None and window_s != step_s:
        return f"a quantile over {_dur(window_s)} does not combine from {_dur(step_s)} ones"
    per_block = step_s / interval_s
    if window_s != step_s and fam.over_time != "max_over_time" and abs(per_block - round(per_block)) > 0.1:
        return f"evaluated every {_dur(interval_s)}, not a divisor of its {_dur(step_s)} step: blocks weigh unequally"
    if fam.over_objective and not math.isclose(objective_s, SHIPPED_OBJECTIVE_S):
        return f"recorded for a {SHIPPED_OBJECTIVE_S:g} s TTFT objective, not {objective_s:g} s"
    return None


def unusable(fam: Family, range_s: int, interval_s: float | None, window_s: int, *, shipped: bool,
             objective_s: float) -> str | None:
    """Why a series recorded over ``range_s`` every ``interval_s`` cannot stand in for ``fam`` at ``window_s``
    (None: it can)."""
    if interval_s is None:
        return "recorded series too short to tell its interval"
    if range_s <= 0 or window_s % range_s:
        return f"step window {_dur(window_s)} is not a multiple of the rule's {_dur(range_s)}"
    if interval_s > range_s * 1.02:
        return f"evaluated every {_dur(interval_s)}, longer than its {_dur(range_s)} range: gaps"
    if fam.quantile is not None and window_s != range_s:
        return f"a quantile over {_dur(window_s)} does not combine from {_dur(range_s)} ones"
    if fam.over_objective and shipped and not math.isclose(objective_s, SHIPPED_OBJECTIVE_S):
        return f"recorded for a {SHIPPED_OBJECTIVE_S:g} s TTFT objective, not {objective_s:g} s"
    return None


def first_step(since_s: float, window_s: int, fine: Chunk) -> float | None:
    """The first grid step of ``fine`` whose whole window lies after ``since_s`` (None: none does)."""
    t = fine.start_s + max(0, math.ceil((since_s + window_s - fine.start_s) / fine.step_s)) * fine.step_s
    return t if t <= fine.end_s else None


def recorded_query(rec: Recorded, scope: Scope, window_s: int) -> str:
    """One series per (namespace, pod): the W / R tiles of a step combined as the family combines time. The
    subquery's instants are multiples of R; its range stops half a tile short of W, so the instant at t - W
    (the previous step's last tile) is out whether the server's ranges are closed at the left (2.x) or not."""
    fam = _BY_METRIC[rec.metric]
    fn = "max_over_time" if fam.over_time == "max_over_time" or fam.quantile is not None else "avg_over_time"
    return f"{fn}({scope.matchers(rec.name)}[{window_s - rec.range_s // 2}s:{rec.range_s}s])"


def step_rule_expr(metric: str, step_s: int, objective_s: float | None = None) -> str:
    """The expression of the shipped step rule of ``metric`` at step S: the raw query over S (all namespaces)
    evaluated at the aligned instant b = floor(t / S) x S - S by a subquery of step S (its instants are
    multiples of S) offset by S, so it is the last complete block but one whatever the group's phase."""
    raw = usage_query(metric, Scope(()), step_s, objective_s)
    return f"last_over_time(({raw})[{step_s}s:{step_s}s] offset {step_s}s)"


def step_query(rec: Recorded, scope: Scope, window_s: int) -> tuple[str, float]:
    """The PromQL reading step ``s`` of a step series, and the shift (s) at which to evaluate it: the blocks of
    ``s``'s window (s - W, s] are the ones ending at s - k S, recorded by the evaluations in [s - W + 2 S, s + 2 S);
    evaluated at s + 2 S with ``offset 1ms`` its range [s + 2 S - W - 1 ms, s + 2 S - 1 ms] holds exactly those
    (a phase of S - 1 ms would add one more, at the left end, in Prometheus 2.x). One per (namespace, pod),
    peaks combined as the peak, the rest as the mean."""
    fam = _BY_METRIC[rec.metric]
    fn = "max_over_time" if fam.over_time == "max_over_time" or fam.quantile is not None else "avg_over_time"
    return f"{fn}({scope.matchers(rec.name)}[{window_s}s] offset 1ms)", 2.0 * rec.range_s


def segments(fine: Chunk, rec: Recorded | None, stepped: Recorded | None) -> list[tuple[str, Chunk]]:
    """``fine`` cut into runs of steps by their source, in time order: "step" (from the step series), "range"
    (from the range series ``rec``), "raw"; each step from the coarsest source that covers it."""
    out: list[tuple[str, Chunk]] = []
    for k in range(fine.steps):
        t = fine.start_s + k * fine.step_s
        src = ("step" if stepped is not None and stepped.from_s <= t <= stepped.to_s
               else "range" if rec is not None and rec.from_s <= t else "raw")
        if out and out[-1][0] == src:
            out[-1] = (src, Chunk(out[-1][1].start_s, t, fine.step_s))
        else:
            out.append((src, Chunk(t, t, fine.step_s)))
    return out


def split_range(fine: Chunk, rec: Recorded | None) -> tuple[Chunk | None, Chunk | None]:
    """``fine`` cut at the first recorded step: (raw part, recorded part); either may be None."""
    if rec is None or rec.from_s > fine.end_s:
        return fine, None
    if rec.from_s <= fine.start_s:
        return None, fine
    return (Chunk(fine.start_s, rec.from_s - fine.step_s, fine.step_s), Chunk(rec.from_s, fine.end_s, fine.step_s))

