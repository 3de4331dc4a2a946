"""A family's chunks not yet sent, cut again from what the server said its answered chunks held
(``chunks.Measured``, ``jobs.run_jobs``): pure rules first, then a real Prometheus over a fleet that replaces every
pod every 6 hours, where the census (every series the window ever had) overestimates what any chunk selects.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from collectors.prometheus import chunks, collect_pod_usage
from collectors.prometheus import queries as q_names
from collectors.prometheus.chunks import Chunk, Cost, Measured
from collectors.prometheus.client import Answer
from collectors.prometheus.jobs import TASK
from collectors.prometheus.parse import Result
from recommender.core.progress import RecordingProgress
from recommender.core.settings import Settings
from recommender.core.settings_sources import PrometheusSettings
from tests import promcluster as pc
from tests.promfixture import PromServer, build_tsdb, prometheus_binaries, write_openmetrics
from tests.test_prometheus_collect import LoggingClient

P = PrometheusSettings(query_memory_mib=1)  # 43,690 samples a query
STEP = 600.0
COST = Cost(500, 500, 600)  # 500 raw series at 10 min steps: (43,690 - 500 x 10) / (3 x 500) = 25 steps a chunk


def _answered(cost: Cost, steps: int, held_share: float | None, points_share: float = 1.0) -> Measured:
    """A family after one answer of ``steps`` that held ``held_share`` of the estimate (None: no stats)."""
    seen = Measured()
    peak = None if held_share is None else round(held_share * cost.held(steps, STEP, P))
    seen.add(cost, Chunk(0, (steps - 1) * STEP, STEP), P, peak, round(points_share * cost.series * steps))
    return seen


def test_the_plan_stands_while_the_server_holds_between_half_and_all_of_the_estimate() -> None:
    planned = COST.steps(STEP, P)
    assert planned == 25
    for share in (0.5, 0.67, 1.0):
        assert _answered(COST, planned, share).steps(COST, STEP, P) == planned


def test_chunks_grow_for_twice_what_was_held_and_at_most_double_the_longest_answered() -> None:
    planned = COST.steps(STEP, P)
    seen = _answered(COST, planned, 0.1, 0.1)  # a tenth of the census' series in this chunk's hours
    assert seen.steps(COST, STEP, P) == 2 * planned  # the cap: twice the longest answered
    seen.add(COST, Chunk(0, (4 * planned - 1) * STEP, STEP), P, round(0.1 * COST.held(4 * planned, STEP, P)),
             round(0.1 * COST.series * 4 * planned))
    free = COST.steps(STEP, P, held_ratio=0.2, points_ratio=0.2)  # sized for twice the ratio seen
    assert planned < free <= 8 * planned
    assert seen.steps(COST, STEP, P) == free
    # so a chunk cut that way holds, at the ratio seen, half the budget: room for its series to double
    assert 0.2 * COST.held(free, STEP, P) <= chunks.budget_samples(P) < 0.2 * COST.held(free + 1, STEP, P)


def test_a_server_holding_more_than_estimated_gets_shorter_chunks_at_once() -> None:
    planned = COST.steps(STEP, P)
    seen = _answered(COST, planned, 1.6)
    short = seen.steps(COST, STEP, P)
    assert short < planned
    assert 1.6 * COST.held(short, STEP, P) <= chunks.budget_samples(P) < 1.6 * COST.held(short + 1, STEP, P)
    # a later answer that held less does not undo it: the largest ratio seen sizes what is left
    seen.add(COST, Chunk(0, (short - 1) * STEP, STEP), P, round(0.3 * COST.held(short, STEP, P)), COST.series * short)
    assert seen.steps(COST, STEP, P) == short


def test_without_query_stats_or_with_an_empty_answer_no_chunk_grows() -> None:
    planned = COST.steps(STEP, P)
    assert _answered(COST, planned, None, 0.01).steps(COST, STEP, P) == planned
    empty = Measured()
    empty.add(COST, Chunk(0, (planned - 1) * STEP, STEP), P, 12, 0)
    assert (empty.held_ratio, empty.longest) == (None, 0) and empty.steps(COST, STEP, P) == planned
    for nonsense in (0, -5):  # a server's count that cannot be: as if it had said nothing
        odd = Measured()
        odd.add(COST, Chunk(0, (planned - 1) * STEP, STEP), P, nonsense, COST.series * planned // 20)
        assert odd.held_ratio is None and odd.steps(COST, STEP, P) == planned


def test_recut_covers_the_same_steps_and_keeps_runs_apart() -> None:
    run = chunks.chunks(0, 99 * STEP, STEP, 10)[2:] + chunks.chunks(500 * STEP, 529 * STEP, STEP, 10)
    again = chunks.recut(run, 25)
    covered = [c.start_s + k * STEP for c in again for k in range(c.steps)]
    assert covered == [c.start_s + k * STEP for c in run for k in range(c.steps)]
    assert [c.steps for c in again] == [25, 25, 25, 5, 25, 5]  # 80 steps, then 30 after the gap


# ---- a real Prometheus: a fleet that replaces its pods -------------------------------------------------------

GENERATIONS = 8  # each pod's name over the 48 h: replaced every 6 h, as rollouts would
ROLLING = (pc.PODS[0], pc.PODS[6], pc.PODS[7], pc.PODS[9])  # a vLLM pod, two time-sliced ones, a util-only one


@dataclass(frozen=True)
class Fleet:
    url: str
    start: datetime
    end: datetime


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    work = tmp_path_factory.mktemp("resize")
    end_s = int(datetime.now(UTC).timestamp()) // 3600 * 3600
    ts = pc.timestamps(end_s)
    series, pods = [], []
    for i, pod in enumerate(ROLLING):
        for g, part in enumerate(np.array_split(ts, GENERATIONS)):
            generation = replace(pod, name=f"{pod.name[:-5]}g{g:04d}")
            pods.append(generation)
            series += pc._pod_series(generation, i, part)
    write_openmetrics(series + pc._ksm_series(tuple(pods), ts), work / "data.om", pc.TYPES)
    build_tsdb(work / "data.om", work / "tsdb")
    end = datetime.fromtimestamp(end_s, UTC)
    with PromServer.from_tsdb(Path(work / "tsdb")) as prom:
        yield Fleet(prom.url, end - timedelta(hours=pc.HOURS), end)


class NoStats(LoggingClient):
    """The same server, its answers without query stats (as VictoriaMetrics and Thanos send them)."""

    def query_range(self, promql: str, start_s: float, end_s: float, step_s: float) -> Result:
        return list(super().query_range(promql, start_s, end_s, step_s))


def _collect(fleet: Fleet, client_type: type[LoggingClient], **prom: object
             ) -> tuple[dict[str, pd.DataFrame], LoggingClient, RecordingProgress]:
    s = Settings(history_s=pc.HOURS * 3600,
                 prometheus=PrometheusSettings(**{"url": fleet.url, "retries": 0, **prom}))
    client, progress = client_type(s.prometheus), RecordingProgress()
    usage = collect_pod_usage(s, fleet.start, fleet.end, progress, client=client)
    return usage.series, client, progress


def _covered(client: LoggingClient) -> dict[str, list[float]]:
    """Each query's evaluation times, per PromQL, in the order sent."""
    out: dict[str, list[float]] = {}
    for promql, start, end, step in client.ranges:
        out.setdefault(promql, []).extend(np.arange(start, end + step / 2, step).tolist())
    return out


@pytest.mark.prometheus
@pytest.mark.skipif(prometheus_binaries() is None,
                    reason="Debian's prometheus/promtool not installed (apt-get install -y prometheus)")
def test_a_fleet_that_replaces_its_pods_is_read_in_fewer_queries_within_the_budget(fleet: Fleet) -> None:
    budget = 0.25  # MiB: 10,922 samples, so the plan cuts each family into many chunks
    got, client, progress = _collect(fleet, LoggingClient, query_memory_mib=budget)
    planned, plain, plain_progress = _collect(fleet, NoStats, query_memory_mib=budget)
    wide, _, _ = _collect(fleet, LoggingClient, query_memory_mib=1024)
    for metric, frame in wide.items():  # the same numbers whichever way the window was cut
        pd.testing.assert_frame_equal(got[metric], frame, rtol=1e-9, atol=1e-12, obj=metric)
        pd.testing.assert_frame_equal(planned[metric], frame, rtol=1e-9, atol=1e-12, obj=metric)
    # the census counts 8 names a pod; a chunk of 6 hours or less selects one or two of them: FB used (every pod
    # has it) in half the queries or fewer, and no query sent more often than the plan has it
    sent, as_planned = Counter(client.sent), Counter(plain.sent)
    fb_used = next(q for q in as_planned if f'"{q_names.FB_USED}"' in q and "max_over_time" in q)
    assert sent[fb_used] <= as_planned[fb_used] / 2
    assert all(n <= as_planned[q] for q, n in sent.items()) and sent.keys() == as_planned.keys()
    # every family's steps read once each, in the same grid, however its chunks were cut again
    assert {q: sorted(t) for q, t in _covered(client).items()} == {q: sorted(t) for q, t in _covered(plain).items()}
    assert all(len(t) == len(set(t)) for t in _covered(client).values())
    # the server's own count of the most one query held stays within the budget
    assert 0 < client.stats.peak_samples <= chunks.budget_samples(PrometheusSettings(query_memory_mib=budget))
    assert client.stats.splits == 0
    # the cost line says how often chunks were cut again; a server without stats keeps the plan
    assert client.stats.recuts > 0 and plain.stats.recuts == 0
    assert f"0 split, {client.stats.recuts} re-cut)" in client.stats.line()
    # progress counts the planned queries, each done once
    assert progress.done[TASK] == progress.totals[TASK] == plain_progress.totals[TASK]


class Heavier(LoggingClient):
    """The same server, saying it held 30 times what it did: about twice the plan's estimate on this fleet (a chunk
    selects one or two of the eight names the census counts a pod), as a server whose queries cost more than the
    plan's model of Prometheus."""

    def query_range(self, promql: str, start_s: float, end_s: float, step_s: float) -> Result:
        answer = super().query_range(promql, start_s, end_s, step_s)
        if isinstance(answer, Answer) and answer.peak_samples:
            answer.peak_samples *= 30
        return answer


@pytest.mark.prometheus
@pytest.mark.skipif(prometheus_binaries() is None,
                    reason="Debian's prometheus/promtool not installed (apt-get install -y prometheus)")
def test_a_server_holding_more_than_the_plan_estimates_gets_more_shorter_queries(fleet: Fleet) -> None:
    got, client, progress = _collect(fleet, Heavier, query_memory_mib=1)
    planned, plain, _ = _collect(fleet, NoStats, query_memory_mib=1)
    for metric, frame in planned.items():
        pd.testing.assert_frame_equal(got[metric], frame, rtol=1e-9, atol=1e-12, obj=metric)
    sent, as_planned = Counter(client.sent), Counter(plain.sent)
    assert sum(sent.values()) > sum(as_planned.values()) and client.stats.recuts > 0
    assert {q: sorted(t) for q, t in _covered(client).items()} == {q: sorted(t) for q, t in _covered(plain).items()}
    assert all(len(t) == len(set(t)) for t in _covered(client).values())
    assert progress.done[TASK] == progress.totals[TASK]
