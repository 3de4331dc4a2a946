"""Request traces for the replay: arrival times (s, from 0) and token lengths, read from the Azure LLM
inference, Mooncake and ServeGen formats. ServeGen files give each 10-minute window's rate and inter-arrival
law, not requests: arrivals are drawn from them with a seed, and token lengths from lognormals with given means.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

SPAN = 1 << 24  # requests a whole-trace computation takes at once: a 400 M-request client's temporaries would not fit


@dataclass(frozen=True)
class Trace:
    arrival_s: np.ndarray  # sorted, from 0
    input_tokens: np.ndarray
    output_tokens: np.ndarray


def load_azure(path: Path) -> Trace:
    df = pd.read_csv(path)
    t = pd.to_datetime(df["TIMESTAMP"]).astype("int64").to_numpy() / 1e9
    return make_trace(t, df["ContextTokens"].to_numpy(), df["GeneratedTokens"].to_numpy())


def load_mooncake(path: Path) -> Trace:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return make_trace(np.array([r["timestamp"] for r in rows]) / 1000.0, np.array([r["input_length"] for r in rows]),
                  np.array([r["output_length"] for r in rows]))


def load_servegen(path: Path, seed: int, mean_in: float, mean_out: float) -> Trace:
    """Arrivals from each 10-minute window's rate and inter-arrival law (Gamma/Weibull shape, scale),
    rescaled to the window's rate; token lengths are not in these files: lognormal (sigma 1) with the given means."""
    rng = np.random.default_rng(seed)
    df = pd.read_csv(path, header=None, names=["start", "rate", "cv", "dist", "p1", "p2"])
    times = []
    for start, rate, dist, p1, _p2 in df[["start", "rate", "dist", "p1", "p2"]].itertuples(index=False):
        if not rate > 0:
            continue
        n = int(rate * 600 * 1.5 + 20)
        if dist == "Gamma" and p1 > 0:
            gaps = rng.gamma(p1, 1.0, n)
        elif dist == "Weibull" and p1 > 0:
            gaps = rng.weibull(p1, n)
        else:
            gaps = rng.exponential(1.0, n)
        gaps *= (1.0 / rate) / max(gaps.mean(), 1e-12)
        arr = np.cumsum(gaps) - gaps[0] * rng.random()
        times.append(start + arr[(arr >= 0) & (arr < 600)])
    t = np.concatenate(times) if times else np.array([])
    del times
    sigma = 1.0
    lengths = []
    for m in (mean_in, mean_out):  # rounded and floored in place: a 100 M-request client's copies take gigabytes
        x = rng.lognormal(math.log(m) - sigma**2 / 2, sigma, t.size)
        lengths.append(np.maximum(np.round(x, out=x), 1, out=x))
    return make_trace(t, *lengths)


def make_trace(t: np.ndarray, tin: np.ndarray, tout: np.ndarray) -> Trace:
    """Requests by arrival (a stable sort, skipped where they already are: ServeGen's windows come in order, and
    a sort's copies of a 100 M-request client take gigabytes), times from the first. The arrays are the caller's
    to give away: float64 ones are shifted and floored in place, for the same reason."""
    if t.size > 1 and not bool(np.all(t[1:] >= t[:-1])):
        order = np.argsort(t, kind="stable")
        t, tin, tout = t[order], tin[order], tout[order]
    t, tin, tout = (np.asarray(a, dtype="float64") for a in (t, tin, tout))
    if t.size:
        t -= t[0]
    return Trace(t, tin, np.maximum(tout, 1, out=tout))


def minute_spans(arrival_s: np.ndarray, size: int | None = None) -> Iterator[slice]:
    """Slices of about ``size`` (default ``SPAN``) sorted requests that end at whole minutes (``arrival_s // 60``):
    a per-minute sum taken span by span adds each minute's requests in the same order as over the whole trace."""
    lo, n, size = 0, arrival_s.size, size or SPAN
    while lo < n:
        hi = min(n, lo + size)
        if hi < n:
            hi = max(hi, int(np.searchsorted(arrival_s, (arrival_s[hi - 1] // 60 + 1) * 60, side="left")))
        yield slice(lo, hi)
        lo = hi


def per_bin(arrival_s: np.ndarray, bin_s: int, length: int,
            weights: Callable[[slice], np.ndarray] | None = None) -> np.ndarray:
    """Requests (or ``weights(span)`` of each span's requests) summed per ``bin_s``-second bin (1 or 60) of sorted
    arrivals, ``length`` bins, a span of whole minutes at a time: the same sums, to the bit, as one ``bincount`` over
    the whole trace, without its whole-trace temporaries."""
    out = np.zeros(length)
    for part in minute_spans(arrival_s):
        out += np.bincount((arrival_s[part] // bin_s).astype(np.int64), minlength=length,
                           weights=None if weights is None else weights(part))
    return out


LOADERS = {"azure": load_azure, "mooncake": load_mooncake}

