"""One range series' samples as two float arrays, decoded from the answer's bytes without a Python object per
sample. Pure: no I/O.

Prometheus writes a range series' samples as ``[[<unix s>, "<value>"], ...]``: the time a JSON number, the
value a string (``"NaN"``, ``"+Inf"``, ``"-Inf"`` or Go's shortest decimal). :func:`decode` takes those bytes
as msgspec hands them over undecoded (``msgspec.Raw``), checks their structure with two passes over the bytes
(``bytes.translate``), and parses the numbers of many series at once with Arrow: the arrays are bit for bit
what ``float()`` of each string gives (what decoding the answer whole into Python objects gave), no Python
object is made per sample (those were about 130 bytes a sample, a whole answer's held until it was folded in),
and it takes half the CPU (``benchmarks/decode.py``).
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


_BATCH = 1 << 18  # numbers parsed in one go: about 5 MB of text, a few times that held while they are parsed


def decode(raw: bytes | memoryview) -> Points:
    """``[[t, "v"], ...]`` → :class:`Points`; see :func:`decode_many`."""
    return decode_many([raw])[0]


def decode_many(raws: Sequence[bytes | memoryview]) -> list[Points]:
    """Each ``[[t, "v"], ...]`` → :class:`Points`, the numbers of many series parsed at once. Raises ValueError
    on anything else: pairs that are not a number and a string, a value that is not a number."""
    out: list[Points] = []
    flats: list[bytes] = []
    sizes: list[int] = []
    pending = 0  # numbers in ``flats``, not yet parsed
    for raw in raws:
        text = bytes(raw).translate(None, _SPACE)
        if len(text) < 2 or text[0] != ord("[") or text[-1] != ord("]"):
            raise ValueError(f"a series' values are not a list: {_head(text)}")
        inner = text[1:-1]
        pairs = inner.count(b"[")
        if inner.translate(None, _NOT_STRUCTURE) != (_PAIR * pairs)[:-1]:
            raise ValueError(f"a series' values are not [time, \"value\"] pairs: {_head(text)}")
        if pairs:
            flats.append(inner.translate(None, b'[]"'))
        sizes.append(2 * pairs)
        pending += 2 * pairs
        if pending >= _BATCH:
            out += _parse(flats, sizes[len(out):])
            flats, pending = [], 0
    if len(out) < len(sizes):
        out += _parse(flats, sizes[len(out):])
    return out


def _parse(flats: list[bytes], sizes: list[int]) -> list[Points]:
    """The comma-separated numbers of several series, joined and parsed by Arrow's string-to-double cast (as
    correctly rounded as ``float()``, NaN and ±Inf included, about twice as fast as ``float()`` on each); cut
    back into each series' times and values."""
    import pyarrow as pa  # here, not at import: the CLI's --help does not pay for it
    import pyarrow.compute as pc

    if not flats:
        return [EMPTY for _ in sizes]
    tokens = pc.split_pattern(pa.array([b",".join(flats)], type=pa.binary()), ",").flatten()
    numbers = tokens.cast(pa.string()).cast(pa.float64()).to_numpy(zero_copy_only=False)
    if len(numbers) != sum(sizes):
        raise ValueError("a series' values are not numbers")
    out, at = [], 0
    for n in sizes:
        out.append(Points(numbers[at: at + n: 2].copy(), numbers[at + 1: at + n: 2].copy()) if n else EMPTY)
        at += n
    return out


def _head(text: bytes) -> str:
    return text[:60].decode("utf-8", "replace")
