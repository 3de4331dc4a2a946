"""An answer's series are written into the accumulator together (one scatter a block): the frame is the one
writing each series in turn gives, whatever the answers hold: pods new and seen, several blocks, points off the
grid, NaN and ±Inf, values float32 cannot hold, a shifted evaluation, a pod twice in one answer."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from collectors.pods import pod_key
from collectors.prometheus import chunks, parse
from collectors.prometheus.points import decode_many


def _one_by_one(grid: chunks.Grid, expected: int, compact: bool, answers: list[list[dict[str, Any]]],
                shift_s: float) -> pd.DataFrame:
    """The reference: each series of each answer written on its own, in key order, the later over the earlier."""
    acc = parse.Accumulator(grid, expected, compact)
    for answer in answers:
        found = sorted(((pod_key(i["metric"]["namespace"], i["metric"]["pod"]), i["values"]) for i in answer
                        if i.get("values")), key=lambda x: x[0])
        for key, values in found:
            ts, vs = parse._arrays(values)
            pos = np.rint((ts - shift_s - grid.start_s) / grid.step_s).astype(np.int64)
            ok = (pos >= 0) & (pos < grid.n)
            acc._column(key)[pos[ok]] = acc._held(vs[ok])
    return acc.frame()


def _answers(rng: np.random.Generator, grid: chunks.Grid, pods: int, odd: bool, twice: bool
             ) -> list[list[dict[str, Any]]]:
    out = []
    for _ in range(int(rng.integers(2, 6))):
        answer = []
        chosen = list(rng.choice(pods, size=int(rng.integers(1, pods)), replace=False))
        for j in chosen + chosen[:1] if twice else chosen:  # twice: the first pod again, other values
            steps = rng.choice(grid.n + 4, size=int(rng.integers(1, grid.n)), replace=False) - 2  # some off the grid
            values = rng.integers(0, 5_000, size=len(steps)).astype(np.float64)
            if odd:
                values[rng.random(len(values)) < 0.1] = rng.choice([np.nan, np.inf, -np.inf, 0.1, -0.0, 1e39])
            raw = "[" + ",".join(f'[{grid.start_s + grid.step_s * int(s) + 7.0:g},"{float(v)!r}"]'
                                 for s, v in zip(sorted(steps), values, strict=True)) + "]"
            answer.append({"metric": {"namespace": "ns", "pod": f"p-{j:03d}"}, "values": raw.encode()})
        points = iter(decode_many([a["values"] for a in answer]))
        out.append([{**a, "values": next(points)} for a in answer])
    return out


@pytest.mark.parametrize("seed", range(12))
def test_an_answer_written_at_once_is_the_frame_written_series_by_series(seed: int) -> None:
    rng = np.random.default_rng(seed)
    grid = chunks.Grid(1_000.0, 60.0, int(rng.integers(3, 40)))
    pods = int(rng.integers(2, 150))
    expected = int(rng.choice([pods, 3, 1]))  # one block; many (a census that counted fewer)
    compact, odd, twice = bool(seed % 2), bool(seed % 3), seed % 4 == 3
    answers = _answers(rng, grid, pods, odd, twice)
    acc = parse.Accumulator(grid, expected, compact)
    for answer in answers:
        acc.add(answer, "namespace", "pod", shift_s=7.0)
    got, want = acc.frame(), _one_by_one(grid, expected, compact, answers, 7.0)
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert got.dtypes.iloc[0] == (np.float64 if odd or not compact else np.float32)


@pytest.mark.parametrize("duplicate", [False, True])
def test_a_compact_metric_whose_first_value_float32_cannot_hold_is_read_at_float64(duplicate: bool) -> None:
    """FB used is read compact (float32 while exact); a user's recorded series of it may average, so the very
    first value may need float64. It used to end the collection with a traceback (widening with no block yet)."""
    grid = chunks.Grid(0.0, 60.0, 3)
    acc = parse.Accumulator(grid, 2, compact=True)
    series = [{"metric": {"namespace": "n", "pod": "p"}, "values": [[0, "1234.5"], [60, "0.1"]]}]
    acc.add(series * (2 if duplicate else 1), "namespace", "pod")
    frame = acc.frame()
    assert frame.dtypes.iloc[0] == np.float64 and frame["n/p"].tolist()[:2] == [1234.5, 0.1]
