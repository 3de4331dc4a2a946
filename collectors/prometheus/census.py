"""What a collection of a cached window's new steps asks first, as pure functions over the settings and the
window: the census of raw and recorded series over those steps, and the recorded series' evaluation intervals
from the recorded census' answer. The collector (``collect``) and the requests sent ahead of its imports
(``ahead``) are both made from these, so the two can only ask the same."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from collectors.prometheus import queries, rules
from collectors.prometheus.chunks import Chunk
from collectors.prometheus.queries import Scope
from collectors.prometheus.window import Window
from recommender.core.settings_sources import PrometheusSettings

RAW_CENSUS = "census"
RULE_CENSUS = "rule census"

Recorded = dict[str, list[Any]]  # recorded name → its census' (instant, count) pairs


@dataclass(frozen=True)
class Ask:
    """One range query of the census: what its answer fills (``RAW_CENSUS`` or ``RULE_CENSUS``), its PromQL,
    its range."""

    key: str
    promql: str
    chunk: Chunk


def since_asks(scope: Scope, win: Window, p: PrometheusSettings, since: Chunk) -> tuple[list[Ask], Chunk]:
    """The census of the steps of ``since`` (a cached collection's new ones): the raw series counted at each
    (a listing would name every series of the fleet) and, with ``recording_rules``, the recorded series at each
    instant of :func:`rules.census_since`, a query each (a range query loads every sample between its first and
    last step, hours apart here; one instant, its lookback's); and that range."""
    span = rules.census_since(since, win.coarse, win.window_s)
    asks = [Ask(RAW_CENSUS, queries.census_query(sel), since) for sel in queries.census_selectors(scope)]
    if p.recording_rules:
        promql = rules.census_query(scope, p)
        asks += [Ask(RULE_CENSUS, promql, Chunk(t, t, span.step_s))
                 for t in (span.start_s + k * span.step_s for k in range(span.steps))]
    return asks, span


def add_recorded(recorded: Recorded, result: Iterable[Mapping[str, Any]]) -> None:
    """The recorded census' answer added to ``recorded``, per name."""
    for item in result:
        recorded.setdefault(str((item.get("metric") or {}).get("__name__")), []).extend(item.get("values") or [])


def interval_ask(recorded: Recorded, span: Chunk, scope: Scope) -> tuple[dict[str, float], str | None]:
    """The recorded names that cover ``span``'s end (→ from when: :func:`rules.coverage`) and the instant query
    at ``span.end_s`` for their evaluation intervals (:func:`rules.interval_query`; None where none covers it)."""
    present = rules.coverage([{"metric": {"__name__": k}, "values": v} for k, v in recorded.items()], span)
    return present, rules.interval_query(present, scope, span.end_s) if present else None
