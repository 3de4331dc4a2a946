"""Range-answer decoding, per point: the client's decoder (collectors/prometheus/client.py: msgspec with
each series' samples left raw, parsed by collectors/prometheus/points.py with Arrow) against the whole answer
decoded into Python objects and then into arrays (what it did before), on a synthetic answer of the size the
memory budget cuts queries to at 2,000 pods (113 steps x 1,000 series). Prints CPU per point (best of the
repeats, both decoders interleaved so that the machine's load falls on both) and the memory each holds at
its peak (tracemalloc).

    python benchmarks/decode.py [--series 1000] [--steps 113] [--repeats 7]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import NotRequired, TypedDict

import msgspec
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collectors.prometheus.client import _RANGE_ANSWER
from collectors.prometheus.points import decode_many


class _OldSeries(TypedDict):
    metric: dict[str, str]
    values: NotRequired[list[tuple[float, str]]]


class _OldData(TypedDict):
    result: list[_OldSeries]


class _OldAnswer(TypedDict):
    data: _OldData


_OLD = msgspec.json.Decoder(_OldAnswer)


def answer(series: int, steps: int, seed: int = 0) -> bytes:
    """A range answer as Prometheus writes it: values as Go's shortest decimals, a few NaN and +Inf."""
    rng = np.random.default_rng(seed)
    result = []
    for i in range(series):
        values = rng.random(steps) * 10.0 ** rng.integers(-2, 6, steps)
        text = [repr(float(v)) for v in values]
        for k in rng.choice(steps, size=max(1, steps // 50), replace=False):
            text[k] = str(rng.choice(["NaN", "+Inf"]))
        result.append({"metric": {"namespace": f"ns-{i % 50}", "pod": f"svc-{i}-6f8d9c7b5-x2x4q"},
                       "values": [[1_795_000_000 + 600 * k, v] for k, v in enumerate(text)]})
    body = {"status": "success", "data": {"resultType": "matrix", "result": result,
                                          "stats": {"samples": {"totalQueryableSamples": 1, "peakSamples": 1}}}}
    return json.dumps(body, separators=(",", ":")).encode()


def old(body: bytes) -> list[tuple[np.ndarray, np.ndarray]]:
    out = []
    for item in _OLD.decode(body)["data"]["result"]:
        times, raw = zip(*item["values"], strict=True)
        out.append((np.array(times, dtype=np.float64), np.array(raw, dtype=np.float64)))
    return out


def new(body: bytes) -> list[tuple[np.ndarray, np.ndarray]]:
    result = _RANGE_ANSWER.decode(body)["data"]["result"]
    return [(p.times, p.values) for p in decode_many([item["values"] for item in result])]


def _peak_mib(fn: Callable[[bytes], object], body: bytes) -> float:
    tracemalloc.start()
    fn(body)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=" ".join((__doc__ or "").split("\n\n")[0].split()))
    ap.add_argument("--series", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=113)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    body = answer(args.series, args.steps)
    a, b = old(body), new(body)
    same = len(a) == len(b) and all(x[0].tobytes() == y[0].tobytes() and x[1].tobytes() == y[1].tobytes()
                                    for x, y in zip(a, b, strict=True))
    best = {"old": float("inf"), "new": float("inf")}
    for _ in range(args.repeats):
        for name, fn in (("old", old), ("new", new)):
            t0 = time.process_time()
            fn(body)
            best[name] = min(best[name], time.process_time() - t0)
    points = args.series * args.steps
    print(f"answer: {args.series:,} series x {args.steps} steps = {points:,} points, {len(body) / 2**20:.1f} MiB of "
          f"JSON; arrays identical bit for bit: {same}")
    for name in ("old", "new"):
        print(f"{name}: {best[name] * 1e9 / points:.0f} ns CPU a point (best of {args.repeats}), "
              f"{_peak_mib(old if name == 'old' else new, body):.1f} MiB held at its peak besides the answer's bytes")


if __name__ == "__main__":
    main()
