"""What the pipeline derives per workload from its own series, remembered between reports: the keys.

A workload's features, class and forecasts depend only on its series (values and index), the workload as
found (allocation, annotations, KV pool, ...), the settings fields each reads and the code that computes them.
Each is kept in a :data:`Memo` under a digest of exactly those inputs, so a report whose inputs did not change
for a workload reuses it and any change computes it again: a key never names a stale answer. The memo is
handed in from the edge (a dict, or a file's contents: ``recommender.pipeline.memostore``); nothing here
does I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, MutableMapping
from typing import Any

import numpy as np
import pandas as pd

from recommender.core.plan import Forecast
from recommender.core.usage import Snapshot

Memo = MutableMapping[str, Any]  # key (from :func:`key`) -> a derived value (features, class, forecasts)

# bump when what a key covers changes shape (the code itself is covered by the version the memo's edge adds)
KEY_VERSION = 1


def series_digests(snapshot: Snapshot) -> dict[str, str]:
    """Per workload key, a digest of every series the snapshot holds for it: metric name, the frame's index and
    the column's values as float64 bytes (a workload with no column for a metric adds nothing for it)."""
    wanted = {w.ref.key for w in snapshot.workloads}
    hashes = {k: hashlib.blake2b(f"{KEY_VERSION}|{snapshot.step_s!r}".encode(), digest_size=20) for k in wanted}
    for metric in sorted(snapshot.usage):
        frame = snapshot.usage[metric]
        cols = [(j, c) for j, c in enumerate(frame.columns) if c in wanted]
        if not cols:
            continue
        head = metric.encode() + b"|" + _index_bytes(frame.index)
        head = hashlib.blake2b(head, digest_size=20).digest()
        values = np.asfortranarray(frame.to_numpy())  # each column contiguous; float32 made float64 per column
        wide = values.dtype == np.float64  # a float64 column is hashed where it lies (no copy of its bytes)
        for j, col in cols:
            h = hashes[col]
            h.update(head)
            h.update(values[:, j].data if wide else np.asarray(values[:, j], dtype=np.float64).tobytes())
    return {k: h.hexdigest() for k, h in hashes.items()}


def forecasts_digest(found: tuple[Forecast, ...]) -> str:
    """A digest of forecasts as the policies read them: each one's metric, model, reasons, backtest scores, and its
    frame's columns, index (zone, unit, stamps, frequency) and values as float64 bytes."""
    h = hashlib.blake2b(f"{KEY_VERSION}|{len(found)}".encode(), digest_size=20)
    for f in found:
        frame = f.frame
        index = frame.index
        h.update(repr((f.metric, f.model, f.reasons, f.backtest_smape, f.backtest_mase, [str(c) for c in frame.columns],
                       str(frame.dtypes.tolist()), getattr(index, "freqstr", None), getattr(index, "unit", None),
                       index.name, frame.shape)).encode())
        h.update(_index_bytes(frame.index))
        h.update(np.ascontiguousarray(frame.to_numpy(dtype=np.float64)).tobytes())
    return h.hexdigest()


def _index_bytes(index: pd.Index) -> bytes:
    if isinstance(index, pd.DatetimeIndex):
        return f"{index.tz}|".encode() + index.asi8.tobytes()
    return repr(list(index)).encode()


class Said:
    """A value's repr, made once: stands for the value among a key's inputs (the key's text is the same), so a
    workload read by several parts' keys is written out once."""

    __slots__ = ("text",)

    def __init__(self, value: object) -> None:
        self.text = repr(value)

    def __repr__(self) -> str:
        return self.text


def key(part: str, *inputs: object) -> str:
    """The memo key of one derived ``part`` ("features", "class", "forecast") from the repr of its inputs
    (strings, numbers, frozen dataclasses, tuples: stable across runs)."""
    raw = repr((KEY_VERSION, part, inputs)).encode("utf-8")
    return f"{part}:{hashlib.blake2b(raw, digest_size=20).hexdigest()}"


def remembered(memo: Memo | None, part: str, inputs: tuple[object, ...], compute: Callable[[], Any]) -> Any:
    """What ``memo`` holds under :func:`key` ``(part, *inputs)``, else ``compute()``, kept there (no key is made
    without a memo)."""
    if memo is None:
        return compute()
    k = key(part, *inputs)
    try:
        return memo[k]
    except KeyError:
        value = memo[k] = compute()
        return value

