"""One range series' samples as two float arrays, decoded from the answer's bytes without a Python object per
sample. Pure: no I/O.

Prometheus writes a range series' samples as ``[[<unix s>, "<value>"], ...]``: the time a JSON number, the
value a string (``"NaN"``, ``"+Inf"``, ``"-Inf"`` or Go's shortest decimal). :func:`decode` takes those bytes
as msgspec hands them over undecoded (``msgspec.Raw``), checks their structure with two passes over the bytes
(``bytes.translate``), and parses each number with ``float()``, as before: the arrays are bit for bit what
decoding the answer whole gave, and a series' Python objects (a bytes object and a float per number) live
only while that series is parsed, not the whole answer's (about 130 bytes a sample) until it is folded in.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np

_SPACE = b" \t\r\n"  # JSON whitespace: outside strings, and Prometheus' numbers and values have none
_PAIR = b'[,""],'  # the structure of one [t, "v"] pair and the comma after it, without its two numbers
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'[],"')  # deleted, what is left is the structure


@dataclass(frozen=True, eq=False)
class Points(Sequence[tuple[float, float]]):
    """A range series' samples: ``times`` (unix s) and ``values`` (NaN and ±Inf as sent), float64, one per step
    the series had a value. As a sequence it is the ``(time, value)`` pairs, for code that reads few of them."""

    times: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return len(self.times)

    @overload
    def __getitem__(self, i: int) -> tuple[float, float]: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[tuple[float, float]]: ...

    def __getitem__(self, i: int | slice) -> tuple[float, float] | Sequence[tuple[float, float]]:
        if isinstance(i, slice):
            return Points(self.times[i], self.values[i])
        return float(self.times[i]), float(self.values[i])

    def __iter__(self) -> Iterator[tuple[float, float]]:
        return zip(self.times.tolist(), self.values.tolist(), strict=True)


EMPTY = Points(np.empty(0), np.empty(0))


def decode(raw: bytes | memoryview) -> Points:
    """``[[t, "v"], ...]`` → :class:`Points`. Raises ValueError on anything else: pairs that are not a number and
    a string, a value that is not a number as ``float()`` reads it."""
    text = bytes(raw).translate(None, _SPACE)
    if len(text) < 2 or text[0] != ord("[") or text[-1] != ord("]"):
        raise ValueError(f"a series' values are not a list: {_head(text)}")
    inner = text[1:-1]
    if not inner:
        return EMPTY
    pairs = inner.count(b"[")
    if inner.translate(None, _NOT_STRUCTURE) != (_PAIR * pairs)[:-1]:
        raise ValueError(f"a series' values are not [time, \"value\"] pairs: {_head(text)}")
    numbers = np.array(list(map(float, inner.translate(None, b'[]"').split(b","))), dtype=np.float64)
    return Points(numbers[0::2].copy(), numbers[1::2].copy())


def _head(text: bytes) -> str:
    return text[:60].decode("utf-8", "replace")
