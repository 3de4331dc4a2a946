"""Framed files (``recommender.core.framing``): what is streamed to a file is what :func:`framing.frame` gives,
written whole or not at all, and reading refuses anything but a whole file of the format and version."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from recommender.core import framing
from recommender.core.writes import OutputError

MAGIC = b"test frames\n"


class Refused(Exception):
    pass


def chunks() -> Iterator[bytes]:
    yield b"head\n"
    yield bytes(range(256)) * 1000
    yield memoryview(b"tail")  # type: ignore[misc]


def test_a_streamed_file_is_the_framed_bytes_and_reads_back(tmp_path: Path) -> None:
    dest = tmp_path / "f"
    framing.write(dest, MAGIC, 3, chunks())
    data = dest.read_bytes()
    assert data == framing.frame(MAGIC, 3, chunks())
    assert bytes(framing.read(data, MAGIC, 3, "test file", Refused)) == b"".join(bytes(c) for c in chunks())


def test_a_body_that_fails_half_way_leaves_the_previous_file(tmp_path: Path) -> None:
    dest = tmp_path / "f"
    framing.write(dest, MAGIC, 1, [b"old"])
    before = dest.read_bytes()

    def failing() -> Iterator[bytes]:
        yield b"new part"
        raise ValueError("encoding failed")

    with pytest.raises(ValueError):
        framing.write(dest, MAGIC, 1, failing())
    assert dest.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["f"]
    with pytest.raises(OutputError):
        framing.write(tmp_path / "missing" / "f", MAGIC, 1, [b"x"])


@pytest.mark.parametrize(("spoil", "why"), [
    (lambda d: d[:len(d) // 2], "checksum"), (lambda d: d[:-1], "checksum"), (lambda d: d + b"x", "checksum"),
    (lambda d: d[:-5] + bytes([d[-5] ^ 1]) + d[-4:], "checksum"), (lambda d: d[:len(MAGIC) + 40], "checksum"),
    (lambda d: d.replace(MAGIC + b"2\n", MAGIC + b"12\n", 1), "format '12'"),
    (lambda d: d.replace(MAGIC + b"2\n", MAGIC, 1), "format"),
    (lambda d: b"", "not a test file"), (lambda d: b"something else\n" + d, "not a test file"),
], ids=["half", "last-byte-gone", "byte-added", "byte-flipped", "header-only", "other-version", "no-version",
        "empty", "foreign"])
def test_a_spoilt_file_is_refused_with_why(spoil: object, why: str) -> None:
    data = framing.frame(MAGIC, 2, chunks())
    with pytest.raises(Refused, match=why):
        framing.read(spoil(data), MAGIC, 2, "test file", Refused)  # type: ignore[operator]
