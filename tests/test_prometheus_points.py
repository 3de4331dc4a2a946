"""Range series' samples decoded straight into float arrays (collectors/prometheus/points.py): bit for bit what
``float()`` of each string gives, and anything that is not ``[[time, "value"], ...]`` refused as a ValueError
(the client turns it into its one-line "did not answer like a Prometheus API")."""

from __future__ import annotations

import json
import math
import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from collectors.prometheus import chunks, parse, points
from collectors.prometheus.points import Points, decode

_FINITE = st.floats(allow_nan=False, allow_infinity=False)
# values as Prometheus writes them (Go's shortest decimal, no exponent) and as other servers may (repr)
_VALUE = st.one_of(_FINITE.map(repr), _FINITE.map(lambda x: f"{x:f}"), st.integers(-(10**20), 10**20).map(str),
                   st.sampled_from(["NaN", "+Inf", "-Inf", "-0", "0", "4.9e-324", "1.7976931348623157e308"]))


def _bits(values: np.ndarray | list[float]) -> bytes:
    return np.asarray(values, dtype=np.float64).tobytes()


@given(st.lists(st.tuples(st.integers(0, 2**33).map(lambda t: t / 2), _VALUE), max_size=60),
       st.sampled_from([(",", ":"), (", ", ": ")]))
def test_samples_decode_as_float_of_each_string(pairs: list[tuple[float, str]], separators: tuple[str, str]) -> None:
    got = decode(json.dumps([[t, v] for t, v in pairs], separators=separators).encode())
    assert _bits(got.times) == _bits([t for t, _ in pairs])
    assert _bits(got.values) == _bits([float(v) for _, v in pairs])  # NaN, ±Inf and -0 included


def test_points_read_as_pairs_where_code_reads_few_of_them() -> None:
    p = decode(b'[[10,"1.5"],[20,"NaN"],[30,"-2"]]')
    assert len(p) == 3 and p[-1] == (30.0, -2.0) and next(reversed(p)) == (30.0, -2.0)
    assert isinstance(p[1:], Points) and p[1:].times.tolist() == [20.0, 30.0]
    assert math.isnan(p[1][1]) and len(decode(b"[]")) == 0 and not decode(b" [ ] ")


@pytest.mark.parametrize("raw", [b'[["x","1"]]', b'[[1,"x"]]', b'[[1,""]]', b'[[1,2]]', b'[1,"2"]',
                                 b'[[1,"2"],[3,"4","5"],[6]]', b'[[1,"1,2"]]', b'{"a":1}', b'"[[1,\\"2\\"]]"',
                                 b"[[1,\"2\"],[3,\"4\"]"])
def test_anything_else_is_a_value_error(raw: bytes) -> None:
    with pytest.raises(ValueError):
        decode(raw)


@pytest.mark.parametrize(("pods", "answers"), [
    (["b", "a", "c-1", "c/2"], 1),  # one block, columns in key order: the frame is the block
    (["b", "a", "c-1", "c/2"], 2),  # the second answer's pods sort after the first's
    ([f"p{i}" for i in range(150)], 3),  # pods the first block has no room for, and keys between earlier ones
])
def test_the_accumulator_places_decoded_points_as_it_places_string_pairs(pods: list[str], answers: int) -> None:
    rng = np.random.default_rng(3)
    grid = chunks.Grid(1000.0, 60.0, 50)
    series = []
    for pod in pods:
        steps = sorted(rng.choice(50, size=30, replace=False).tolist())
        values = [repr(struct.unpack("d", struct.pack("Q", int(x)))[0]) for x in rng.integers(0, 2**62, 30)]
        values[0], values[1] = "+Inf", "NaN"
        pairs = [(1000 + 60 * s, v) for s, v in zip(steps, values, strict=True)]
        series.append(({"namespace": "n", "pod": pod}, pairs))
    as_strings, as_points = parse.Accumulator(grid), parse.Accumulator(grid, expected=2)
    for part in np.array_split(np.arange(len(series)), answers):
        as_strings.add([{"metric": series[i][0], "values": series[i][1]} for i in part], "namespace", "pod")
        as_points.add([{"metric": series[i][0], "values": decode(json.dumps(series[i][1]).encode())} for i in part],
                      "namespace", "pod")
    a, b = as_strings.frame(), as_points.frame()
    assert list(a.columns) == list(b.columns) == sorted(f"n/{p}" for p in pods)
    assert _bits(a.to_numpy()) == _bits(b.to_numpy()) and a.index.equals(b.index)
    # +Inf kept where it was sent (the data-quality stage drops and counts it), one a pod; emptied
    assert (np.isposinf(b.to_numpy()).sum(axis=0) == 1).all() and not as_points.pods


def test_many_series_parse_alike_in_one_batch_or_several(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(11)
    raws = [json.dumps([[60 * k, repr(float(v))] for k, v in enumerate(rng.random(n))]).encode()
            for n in (5, 0, 17, 1, 9)]
    whole = points.decode_many(raws)
    monkeypatch.setattr(points, "_BATCH", 8)  # a batch after every series or two
    for got in (points.decode_many(raws), [decode(r) for r in raws]):
        assert [len(p) for p in got] == [5, 0, 17, 1, 9]
        assert all(_bits(a.times) == _bits(b.times) and _bits(a.values) == _bits(b.values)
                   for a, b in zip(whole, got, strict=True))


@pytest.mark.parametrize("bad", [b'[[1,"x"]]', b'[[1,""]]', b'[[1,"1|2"]]', b'[[1,"2"]|[3,"4"]]', b"[1,2]", b"{}",
                                 b'[[1,"2"],[3,"4"]'])
def test_a_series_at_fault_among_good_ones_fails_the_whole_answer(bad: bytes) -> None:
    """The series of an answer are checked and parsed together: one at fault anywhere among them is a ValueError,
    never a misread of it or of its neighbours."""
    good = [json.dumps([[60 * k, repr(0.5 * k)] for k in range(n)]).encode() for n in (3, 0, 4)]
    assert [len(p) for p in points.decode_many(good)] == [3, 0, 4]
    for at in range(len(good) + 1):
        with pytest.raises(ValueError):
            points.decode_many([*good[:at], bad, *good[at:]])
